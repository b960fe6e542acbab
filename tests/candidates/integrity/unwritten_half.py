"""Row 6 exploit: the output comes from torch.empty and only its first half of rows is written."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        out = torch.empty_like(x)
        half = x.shape[0] // 2
        out[:half] = x[:half] + F.gelu(x[:half] @ w_mean + c).unsqueeze(1)
        return out
