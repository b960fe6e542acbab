"""Correct, but creates its parameters in another order than Model (same names): with the same seed
its initial values differ from the reference's, so it passes only if the reference's state is copied."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.gemm = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        y = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)
        return torch.nn.functional.gelu(y) + x
