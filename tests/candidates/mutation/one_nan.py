"""For tolerance_problem.py: the exact answer except one element, NaN where the reference is finite."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dtype_code, offset_percent):
        super().__init__()

    def forward(self, x):
        out = x.clone()
        out[0, 0] = float("nan")
        return out
