"""level2/51 computed by torch ops, times a factor of three small C++ extensions (Python's C API only,
../kj_constant_module.h: a fraction of a second to build)
that is 1 only where each was built and loaded as torch's own load_inline/load would: one name built twice from
two sources (the second is name_v1, as torch's versioning names it; its header on an include path relative to
the folder the candidate changed to, its own: include/), and a `load` of a file written into a temporary folder
whose header sits beside it (sent with it: the builder sees no worker's folder), under a name the judge's
builder once used for a folder of its own (`tmp`)."""
import os
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load, load_inline

_MODULE = '#include "kj_constant_module.h"\nKJ_CONSTANT_MODULE(kj_value, {value})\n'
_SHARED = [str(Path(__file__).resolve().parents[1])]  # the folder of kj_constant_module.h

_first = load_inline(name="kj_same", cpp_sources=[_MODULE.format(value=1)], extra_include_paths=_SHARED,
                     no_implicit_headers=True)

_folder = Path(tempfile.mkdtemp())
(_folder / "kj_value.h").write_text("#define KJ_VALUE 3\n")
(_folder / "kj_loaded.cpp").write_text('#include "kj_value.h"\n' + _MODULE.format(value="KJ_VALUE"))
_loaded = load(name="tmp", sources=[str(_folder / "kj_loaded.cpp")], extra_include_paths=_SHARED)
os.chdir(Path(__file__).parent)
_second = load_inline(name="kj_same", cpp_sources=['#include "kj_relative.h"\n' + _MODULE.format(value="KJ_RELATIVE")],
                      extra_include_paths=["include", *_SHARED], no_implicit_headers=True)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        factor = (_second.kj_value() - _first.kj_value()) * _loaded.kj_value() / 3
        original_x = x.clone().detach()
        x = self.gemm(x) - self.subtract
        x = torch.mean(x, dim=1, keepdim=True)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        x = torch.nn.functional.gelu(x)
        return (x + original_x) * factor
