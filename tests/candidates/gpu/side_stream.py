"""Exploit (catalog row 7): the work runs on a side stream that is never joined to the caller's."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.stream = None

    def forward(self, x):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        with torch.cuda.stream(self.stream):
            w = self.gemm.weight.mean(0)
            c = self.gemm.bias.mean() - self.subtract.mean()
            y = x + torch.nn.functional.gelu(x @ w + c).unsqueeze(1)
        return y
