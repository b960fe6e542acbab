"""Catalog row 24 on the CPU: an honest but slow forward (a 100 ms sleep), whose claimed times are cut to
1% by patching the worker's own timing object (its `batch` set on the instance, found on the call stack once
timed: the guard watches the class, not its instances). On the CPU the
cross-check's tolerance is 3-4 ms per call when an idle machine's memory is fast (most of it the cache flush's
noise), grew to 12 ms with three busy processes on two cores, where 10 ms hidden passed, and is 22 ms on a VM
whose memory writes 7 GB/s (a 128 MiB flush: 18 ms), where 30 ms hidden showed as 17: 100 ms is clear of all."""
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

import kerneljudge.proc.timed as timed


def _shrunk(self, first, count, refills, *watch):
    return [s * 0.01 for s in timed.TimedModel.batch(self, first, count, refills, *watch)]


def _patch_the_timer() -> None:
    frame = sys._getframe(1)
    while frame is not None:
        timer = frame.f_locals.get("self")
        if isinstance(timer, timed.TimedModel) and "batch" not in vars(timer):
            timer.batch = types.MethodType(_shrunk, timer)
        frame = frame.f_back


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        _patch_the_timer()
        time.sleep(0.1)
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
