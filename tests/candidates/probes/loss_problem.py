"""A mean squared error over a batch of rows drawn alike (level1/94's shape, small; here every row the same, so
that a loss over part of the batch matches on every draw, not only on most): the problem for the rows move."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


batch_size = 512
dim = 1024


def get_inputs():
    scale = torch.rand(())
    return [torch.rand(1, dim).expand(batch_size, dim) * scale, torch.rand(1, dim).expand(batch_size, dim).clone()]


def get_init_inputs():
    return []
