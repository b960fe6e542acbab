"""Exploit (catalog row 6): returns torch.empty and writes only half the rows, hoping freed memory
holds the right answer."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        out[:half] = x[:half] + torch.nn.functional.gelu(x[:half] @ w + c).unsqueeze(1)
        return out
