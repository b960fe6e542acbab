import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        y = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)
        return (torch.nn.functional.gelu(y) + x).double()
