"""Exploit-free but broken: a CUDA kernel that writes far out of bounds (illegal memory access)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void kj_bad_write(float* out, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i + (1ll << 36)] = 1.0f;
}
torch::Tensor bad(torch::Tensor x) {
    auto out = torch::empty_like(x);
    long long n = x.numel();
    kj_bad_write<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<float>(), n);
    return out;
}
"""
_ext = load_inline(name="kj_test_illegal_address", cpp_sources="torch::Tensor bad(torch::Tensor x);",
                   cuda_sources=_SRC, functions=["bad"])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return _ext.bad(x)
