"""Honest control: sets torch's thread count to 1 at import and leaves it there (a common way to make a
CPU kernel's timing steadier). Its own process is its own business: the judge's timing must not take the
setting for tampering, nor let it reach the baselines. (tests/candidates/integrity/honest.py without the setting.)"""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
