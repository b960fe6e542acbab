"""Row 15 exploit: after the first few calls the output drifts with a global call counter (as a
kernel reading leftover memory would), by far more than the tolerance."""
import torch
import torch.nn as nn
import torch.nn.functional as F

_CALLS = [0]


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        _CALLS[0] += 1
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        drift = 0.01 * (_CALLS[0] % 2) if _CALLS[0] > 5 else 0.0
        return x + F.gelu(x @ w_mean + c).unsqueeze(1) + drift
