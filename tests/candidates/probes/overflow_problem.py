"""A problem whose float64 reference overflows once its input is scaled up: exp(exp(x)). The range probes
that would move it there are skipped, and say why."""
import torch
import torch.nn as nn

batch_size = 4
width = 8


class Model(nn.Module):
    def forward(self, x):
        return torch.exp(torch.exp(x))


def get_inputs():
    return [torch.randn(batch_size, width)]


def get_init_inputs():
    return []
