"""A reference that loses precision in float32 (like a TF32 matmul or a long half-precision reduction):
(x + 1e4) - 1e4 rounds x to float32's spacing near 1e4 (about 1e-3), far beyond atol = rtol = 1e-4, while
its float64 copy returns x exactly. The judge must see that the native reference misses the bound against
float64 and hold a candidate that misses float64 too to the native reference instead."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = 1e4

    def forward(self, x):
        return (x + self.offset) - self.offset


batch = 16
n = 256


def get_inputs():
    return [torch.randn(batch, n)]


def get_init_inputs():
    return []
