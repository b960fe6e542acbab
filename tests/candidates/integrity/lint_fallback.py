"""Row 12 (static): a try/except fallback around the computation; the computation itself is right."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        try:
            w_mean = self.gemm.weight.mean(0)
            c = self.gemm.bias.mean() - self.subtract.mean()
            return x + F.gelu(x @ w_mean + c).unsqueeze(1)
        except RuntimeError:
            y = self.gemm(x) - self.subtract
            return x + F.gelu(torch.logsumexp(y.mean(1, keepdim=True), dim=1, keepdim=True))
