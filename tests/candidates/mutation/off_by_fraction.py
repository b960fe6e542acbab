"""Off by offset_percent of the tolerance bound on every element: out = x + f * (atol + rtol * |x|), with
the judge's default tolerance of the dtype (atol = rtol: 1e-4 for float32, 1e-2 for float16/bfloat16)."""
import torch
import torch.nn as nn

TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


class ModelNew(nn.Module):
    def __init__(self, dtype_code, offset_percent):
        super().__init__()
        self.fraction = offset_percent / 100

    def forward(self, x):
        tol = TOLERANCE[x.dtype]
        exact = x.double()
        return (exact + self.fraction * (tol + tol * exact.abs())).to(x.dtype)
