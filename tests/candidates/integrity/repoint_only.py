"""Catalog row 4, without a write: forward points its input tensor at its own output (`x.set_(y)`) and returns
it; the memory it was given is untouched, the caller's tensor is not: `input-mutation`."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        y = x + torch.nn.functional.gelu(x @ w_mean + c).unsqueeze(1)
        x.set_(y)
        return x
