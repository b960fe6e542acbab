"""Returns a tensor subclass whose `numel` raises: the worker's description of the output failed in its own
code, and that was the judge's error."""
import torch
import torch.nn as nn


class Refusing(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if "numel" in str(func):
            raise RuntimeError("no numel")
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return torch.zeros_like(x).as_subclass(Refusing)
