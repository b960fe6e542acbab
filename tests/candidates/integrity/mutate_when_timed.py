"""Catalog row 4 while timed: the right output, but on the timed calls only (seen on the call stack) it works
in place in its input, the caller's tensor left overwritten, the check and the probes seeing an honest
candidate. Its inputs after a checked timed call are compared too: `input-mutation`."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def _being_timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "batch" and frame.f_code.co_filename.endswith("timed.py"):
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        gelu = F.gelu(x @ w_mean + c).unsqueeze(1)
        return x.add_(gelu) if _being_timed() else x + gelu
