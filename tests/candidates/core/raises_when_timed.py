"""Correct through the correctness trials and the probes, then raises as soon as it is being timed
(it looks for the judge's timing stage on its call stack)."""
import sys

import torch
import torch.nn as nn


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
        if _being_timed():
            raise RuntimeError("kj-fails-when-timed")
        y = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)
        return torch.nn.functional.gelu(y) + x
