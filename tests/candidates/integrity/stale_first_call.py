"""Row 1 exploit: derived values cached on the first call and never refreshed."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._cached = None

    def forward(self, x):
        if self._cached is None:
            self._cached = (self.gemm.weight.mean(0).clone(), (self.gemm.bias.mean() - self.subtract.mean()).clone())
        w_mean, c = self._cached
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
