"""A CPU C++ extension (load_inline) for level2/51: the residual add and exact GELU run in a C++ loop.

z = x @ mean(W, 0) + mean(b) - mean(s) is computed with torch; out[i, j] = x[i, j] + gelu(z[i]) in C++.
Used by the build-cache tests (cold build, cache hit, the lock, `kerneljudge build`). It includes only the
headers it uses, not torch/extension.h: the suite's cold build takes ~17 s of one core instead of ~36 s.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CPP = r"""
#include <torch/csrc/utils/pybind.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <cmath>

at::Tensor kj_residual_gelu(const at::Tensor& x, const at::Tensor& z) {
    TORCH_CHECK(x.dim() == 2 && z.dim() == 1 && x.size(0) == z.size(0), "kj_residual_gelu: bad shapes");
    TORCH_CHECK(x.scalar_type() == at::kFloat && z.scalar_type() == at::kFloat, "kj_residual_gelu: float32 only");
    auto xc = x.contiguous();
    auto zc = z.contiguous();
    auto out = at::empty_like(xc);
    const float* xp = xc.data_ptr<float>();
    const float* zp = zc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t rows = xc.size(0), cols = xc.size(1);
    for (int64_t i = 0; i < rows; ++i) {
        const double v = zp[i];
        const float g = static_cast<float>(0.5 * v * (1.0 + std::erf(v * 0.70710678118654752440)));
        for (int64_t j = 0; j < cols; ++j) op[i * cols + j] = xp[i * cols + j] + g;
    }
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("kj_residual_gelu", &kj_residual_gelu); }
"""

_ext = load_inline(name="kj_isolation_residual_gelu", cpp_sources=[_CPP], no_implicit_headers=True,
                   extra_cflags=["-O1"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        c = -self.subtract.mean()
        if self.gemm.bias is not None:
            c = c + self.gemm.bias.mean()
        z = x @ self.gemm.weight.mean(0) + c
        if x.device.type == "cpu" and x.dtype == torch.float32 and x.dim() == 2:
            return _ext.kj_residual_gelu(x, z)
        return x + torch.nn.functional.gelu(z).unsqueeze(1)
