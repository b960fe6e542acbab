"""A problem whose state is a buffer, not a parameter (like BatchNorm's running statistics): the
parameter probes must change buffers in place too."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("scale", torch.rand(n) + 0.5)

    def forward(self, x):
        return x * self.scale


batch = 16
n = 256


def get_inputs():
    return [torch.randn(batch, n)]


def get_init_inputs():
    return [n]
