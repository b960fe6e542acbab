"""A C++ extension that compiles in seconds (pybind11 only, no torch headers): level2/51 computed by torch
ops, with the extension's function called once per forward (tests of the build cache's lock, where a
cold build is the point and torch's headers would only add ~20 s)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <pybind11/pybind11.h>

int kj_light_one() { return 1; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("kj_light_one", &kj_light_one); }
"""

_ext = load_inline(name="kj_isolation_light", cpp_sources=[_CPP], no_implicit_headers=True, verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        original_x = x.clone().detach()
        x = self.gemm(x) - self.subtract
        x = torch.mean(x, dim=1, keepdim=True)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        x = torch.nn.functional.gelu(x)
        return (x + original_x) * _ext.kj_light_one()
