"""Row 1 exploit: the cache holds the parameter tensors it saw first and refreshes when their version
counters move (in-place changes), but never notices a parameter replaced by a new object."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._seen = None
        self._versions = None
        self._cached = None

    def forward(self, x):
        if self._seen is None:
            self._seen = (self.gemm.weight, self.gemm.bias, self.subtract)
        versions = tuple(p._version for p in self._seen)
        if versions != self._versions:
            weight, bias, sub = self._seen
            self._cached = (weight.mean(0).clone(), (bias.mean() - sub.mean()).clone())
            self._versions = versions
        w_mean, c = self._cached
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
