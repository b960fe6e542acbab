"""Catalog row 10: ways to run code at any call the worker makes afterwards (where it copies an output, say),
each left set at import by a candidate whose own forward is honest: which one is chosen by the module-level
`HOOK` below, rewritten by the test (tests/test_integrity.py). Each is `tampering` (worker/guard.py), but for
"default-device": torch.set_default_device, which leaves torch's own mode entered, is honest."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HOOK = "audit"


def _run_pending(*args):
    return None


if HOOK == "audit":
    sys.addaudithook(lambda event, args: _run_pending())
elif HOOK == "profile":
    sys.setprofile(lambda frame, event, arg: _run_pending())
elif HOOK == "mode":
    from torch.overrides import TorchFunctionMode

    class _Late(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            _run_pending()
            return func(*args, **(kwargs or {}))

    _Late().__enter__()
elif HOOK == "kernel":
    LIBRARY = torch.library.Library("aten", "IMPL")
    LIBRARY.impl("clone", lambda x, memory_format=None: (_run_pending(), torch.empty_like(x).copy_(x))[1], "CPU")
elif HOOK == "default-device":  # honest: torch's own DeviceContext mode, left entered by design
    torch.set_default_device("cpu")
elif HOOK == "method":
    torch.Tensor.numpy = lambda self, *a, **k: (_run_pending(), torch._C.TensorBase.numpy(self, *a, **k))[1]


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
