"""A C++ extension that compiles in a fraction of a second (Python's C API only, ../kj_constant_module.h):
level2/51 computed by torch ops, with the extension's function called once per forward (tests of the build
cache's lock, where a cold build is the point and torch's headers would only add ~20 s)."""
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = '#include "kj_constant_module.h"\nKJ_CONSTANT_MODULE(kj_light_one, 1)\n'

_ext = load_inline(name="kj_isolation_light", cpp_sources=[_CPP], extra_include_paths=[str(Path(__file__).parents[1])],
                   no_implicit_headers=True, verbose=False)


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
