"""Catalog row 24 (GPU): queues about a millisecond of real work, then finds the judge's start event on
the stack and records it again, so the event pair times almost nothing. The outputs are right."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def _rearm() -> None:
    frame = sys._getframe(2)
    while frame is not None:
        start = frame.f_locals.get("start")
        if frame.f_code.co_name == "time_calls" and hasattr(start, "record"):
            start.record()
            return
        frame = frame.f_back


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        torch.cuda._sleep(2_000_000)  # ~1 ms of device time
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        out = x + F.gelu(x @ w_mean + c).unsqueeze(1)
        _rearm()
        return out
