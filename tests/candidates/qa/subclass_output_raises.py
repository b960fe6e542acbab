"""Broken (QA 36): returns a tensor subclass that computes its values when first read, and raises doing so
(an in-place copy into a tensor the worker reads under inference mode). The error is the candidate's, not the
worker's: it was a `worker-fault` with the worker's own traceback first."""
import torch
import torch.nn as nn


class Lazy(torch.Tensor):
    @staticmethod
    def __new__(cls, source):
        made = torch.Tensor._make_subclass(cls, torch.empty_like(source))
        made.source, made.done = source, False
        return made

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for arg in args:
            if isinstance(arg, Lazy) and not arg.done:
                with torch._C.DisableTorchFunctionSubclass():
                    torch.Tensor.copy_(arg, torch.relu(arg.source))
                arg.done = True
        return super().__torch_function__(func, types, args, kwargs or {})


class ModelNew(nn.Module):
    def forward(self, x):
        return Lazy(x.clone())
