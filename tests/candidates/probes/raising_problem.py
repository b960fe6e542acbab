"""A reference that raises on a draw whose first input value is above one half once its weight is moved far (x10):
a range plan made on one draw, offered to another, fails its check there, and the referee plans again."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        if float(x[0, 0]) > 0.5 and float(self.w.abs().max()) > 5:
            raise ValueError("this reference refuses a large weight on this draw")
        return torch.tanh(x * self.w)


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return []
