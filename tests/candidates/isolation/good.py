"""A correct plain-PyTorch ModelNew for level2/51: x + gelu(x @ mean(W, 0) + mean(b) - mean(s))."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        c = -self.subtract.mean()
        if self.gemm.bias is not None:
            c = c + self.gemm.bias.mean()
        return x + torch.nn.functional.gelu(x @ self.gemm.weight.mean(0) + c).unsqueeze(1)
