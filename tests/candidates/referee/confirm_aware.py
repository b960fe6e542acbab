"""Catalog row 24 on the CPU, against the turn-taking confirmation: an honest but slow forward (a 100 ms sleep)
whose claimed times are cut to 1%, except in batches it takes for the confirming rounds (recognised by their
call indices, if those differ from the measurement's), where it tells the truth to be cleared. It patches the
worker's timing object (an instance attribute, found on the call stack once timed), which the guard does not
watch."""
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

import kerneljudge.proc.timed as timed

_seen = {"last": -1}


def _selective(self, first, count, refills, *watch):
    samples = timed.TimedModel.batch(self, first, count, refills, *watch)
    confirming = first > _seen["last"] + 1000  # a jump in the call indices: the judge is confirming
    _seen["last"] = max(_seen["last"], first) if not confirming else _seen["last"]
    return samples if confirming else [s * 0.01 for s in samples]


def _patch_the_timer() -> None:
    frame = sys._getframe(1)
    while frame is not None:
        timer = frame.f_locals.get("self")
        if isinstance(timer, timed.TimedModel) and "batch" not in vars(timer):
            timer.batch = types.MethodType(_selective, timer)
        frame = frame.f_back


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        _patch_the_timer()
        time.sleep(0.1)  # well above the cross-check's tolerance: 5 ms was not on a loaded 2-core machine, nor 20 ms
        # on a VM of slow memory (shrunk_times.py)
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
