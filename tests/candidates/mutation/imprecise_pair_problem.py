"""Two outputs, each rounded in float32 as imprecise_problem.py's one is ((x + 1e4) - 1e4: about 1e-3 off
the float64 truth, which returns x). The judge chooses the truth output by output."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = 1e4

    def forward(self, x):
        return (x + self.offset) - self.offset, (2 * x + self.offset) - self.offset


batch = 16
n = 256


def get_inputs():
    return [torch.randn(batch, n)]


def get_init_inputs():
    return []
