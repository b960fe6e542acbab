"""A problem whose reference output is NaN where its input is below 0.5 (the log of a negative number):
KernelBench's `torch.allclose` (no `equal_nan`) fails any candidate on it, the strict rule accepts NaN
where the reference is NaN. The candidate is the reference itself."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.log(x - 0.5)


batch = 8
n = 64


def get_inputs():
    return [torch.rand(batch, n)]


def get_init_inputs():
    return []
