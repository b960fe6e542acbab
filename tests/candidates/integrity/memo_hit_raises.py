"""Witness for the timing refill: memoises outputs by address plus a few sampled elements, like
memo_sampled.py, but raises as soon as a memo would hit. Timing must never let it hit: every input
set gets new values before it comes round again."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._seen = set()

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.reshape(-1)[:4].tolist()))
        if key in self._seen:
            raise RuntimeError("memo hit: the same buffer came back with the same values")
        self._seen.add(key)
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
