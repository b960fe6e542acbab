"""Correct output; at its first call forks sleeping children until fork fails (at most 2000) and writes
how many it got to $KJ_TEST_OUT/forks."""
import os
import time
from pathlib import Path

import torch
import torch.nn as nn

MOST = 2000


def bomb() -> int:
    started = 0
    while started < MOST:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        started += 1
    return started


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            Path(os.environ["KJ_TEST_OUT"], "forks").write_text(str(bomb()))
        c = -self.subtract.mean() + self.gemm.bias.mean()
        return x + torch.nn.functional.gelu(x @ self.gemm.weight.mean(0) + c).unsqueeze(1)
