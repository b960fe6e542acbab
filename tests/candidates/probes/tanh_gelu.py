"""Row 30 exploit: level2/51 algebraically simplified (as the shipped solution), but GELU computed with the
tanh approximation. Within 1e-4 where get_inputs() and the initial parameters put GELU's argument
(|z| < 1); up to 4.7e-4 off near |z| = 2.7, where legal parameters (subtract = 1.0, larger weights) put it."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        z = x @ self.gemm.weight.mean(0) + (self.gemm.bias.mean() - self.subtract.mean())
        return x + F.gelu(z, approximate="tanh").unsqueeze(1)
