"""A C++ extension that does not compile: the compiler's error line must reach the user."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/extension.h>

torch::Tensor kj_broken(torch::Tensor x) {
    return x + kj_undeclared_identifier;
}
"""

_ext = load_inline(name="kj_isolation_broken", cpp_sources=[_CPP], functions=["kj_broken"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return _ext.kj_broken(x)
