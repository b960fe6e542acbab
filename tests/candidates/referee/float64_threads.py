"""Honest control: accumulates in float64, changes torch's thread count inside forward and restores it,
keeps a derived value in a buffer refreshed from the parameters' identities, versions and memory (README: a cache
key with `data_ptr` follows a `.data` swap too)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.register_buffer("w_mean", torch.zeros(in_features), persistent=False)
        self._key = None

    def forward(self, x):
        key = tuple((id(p), p._version, p.data_ptr()) for p in (self.gemm.weight, self.gemm.bias, self.subtract))
        if key != self._key:
            self.w_mean = self.gemm.weight.double().mean(0).to(x.dtype)
            self._key = key
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            c = self.gemm.bias.double().mean() - self.subtract.double().mean()
            y = (x.double() @ self.w_mean.double() + c).to(x.dtype)
        finally:
            torch.set_num_threads(threads)
        return x + F.gelu(y).unsqueeze(1)
