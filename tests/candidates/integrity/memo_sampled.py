"""Row 4 exploit the probes cannot see: outputs memoised by a hash of a few sampled input elements.
New inputs (and refilled buffers) differ in the samples, so every check misses the memo; during
timing the rotating input sets keep their values, so every timed call after the first round is a
lookup."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._memo = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.reshape(-1)[:4].tolist()))
        hit = self._memo.get(key)
        if hit is None:
            w_mean = self.gemm.weight.mean(0)
            c = self.gemm.bias.mean() - self.subtract.mean()
            hit = self._memo[key] = x + F.gelu(x @ w_mean + c).unsqueeze(1)
        return hit
