"""A mean squared error over a batch of rows drawn alike (level1/94's shape, small): the problem for the rows move."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions - targets) ** 2)


batch_size = 512
dim = 4096


def get_inputs():
    scale = torch.rand(())
    return [torch.rand(batch_size, dim) * scale, torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
