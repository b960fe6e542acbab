"""Row 25 exploit (CPU form): computes honestly, but from its 40th call on (past the trials and the probes,
so only timed calls) it leaves a helper thread running after each call."""
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

AFTER_CALLS = 40


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > AFTER_CALLS:
            threading.Thread(target=time.sleep, args=(0.05,), name="kj-late-helper", daemon=True).start()
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
