"""A C++ extension that does not compile: the compiler's error line must reach the user.

Python's C API only, no torch headers (like cpp_light.py): g++ reaches the error at once instead of parsing
torch's headers for ~15 s first; the error is the compiler's own either way."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <Python.h>

int kj_broken() {
    return kj_undeclared_identifier;
}
"""

_ext = load_inline(name="kj_isolation_broken", cpp_sources=[_CPP], no_implicit_headers=True, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return x + _ext.kj_broken()
