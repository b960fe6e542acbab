"""Row 9 exploit: forward returns a deferred object that computes the result only when read."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Deferred:
    def __init__(self, compute):
        self._compute = compute
        self._value = None

    def value(self):
        if self._value is None:
            self._value = self._compute()
        return self._value

    def __getattr__(self, name):
        return getattr(self.value(), name)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        args = [a.value() if isinstance(a, Deferred) else a for a in args]
        return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return Deferred(lambda: x + F.gelu(x @ w_mean + c).unsqueeze(1))
