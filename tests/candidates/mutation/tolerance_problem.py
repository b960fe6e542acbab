"""A problem whose reference is exact at every precision (a copy of its input), for candidates placed at a
chosen fraction of the tolerance bound: dtype_code picks float32, float16 or bfloat16; offset_percent is
passed to the candidates (the reference ignores it) and says how far off they are, in percent of the bound
atol + rtol * |ref|."""
import torch
import torch.nn as nn

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class Model(nn.Module):
    def __init__(self, dtype_code, offset_percent):
        super().__init__()

    def forward(self, x):
        return x.clone()


batch = 16
n = 256
dtype_code = 0
offset_percent = 50


def get_inputs():
    return [(torch.randn(batch, n) * 8).to(DTYPES[dtype_code])]


def get_init_inputs():
    return [dtype_code, offset_percent]
