"""Row 29 exploit: derived values refreshed only when `gemm.weight` changes (a partial cache key). A probe
that changes every parameter together always changes the weight too, so it never sees the stale bias and
subtract; changing each one alone does."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._key = None

    def forward(self, x):
        w = self.gemm.weight
        key = (id(w), w._version, w.data_ptr())
        if key != self._key:  # bias and subtract are not in the key
            self._w_mean = w.mean(0)
            self._c = self.gemm.bias.mean() - self.subtract.mean()
            self._key = key
        return x + F.gelu(x @ self._w_mean + self._c).unsqueeze(1)
