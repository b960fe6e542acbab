"""Asks for 4 TiB at once in forward."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        print("KJ-MARKER: about to allocate 4 TiB", flush=True)
        torch.empty(2**40)
        return x
