"""Row 3 variant: writes every result into one buffer kept in a plain attribute and returns it, so each
call overwrites what the previous call returned (and a caller holding it sees it change)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._out = None

    def forward(self, x):
        if self._out is None or self._out.shape != x.shape:
            self._out = torch.empty_like(x)
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        torch.add(x, F.gelu(x @ w_mean + c).unsqueeze(1), out=self._out)
        return self._out
