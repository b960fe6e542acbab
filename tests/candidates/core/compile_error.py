"""A C++ extension whose source does not compile: it includes a header that does not exist (the
compiler stops right there, so the test stays fast). The extension's name contains "error" on purpose:
the compiler's command line, which names it, must not be taken for an error line."""
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SOURCE = r"""
#include "kj_no_such_header.h"

torch::Tensor kj_broken(torch::Tensor x) {
    return x;
}
"""

_ext = load_inline(name="kj_core_error_ext", cpp_sources=[_SOURCE], functions=["kj_broken"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return _ext.kj_broken(x)
