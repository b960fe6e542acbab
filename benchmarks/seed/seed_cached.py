"""Seed-author candidate for level2/51, "cached" variant (benchmark baseline).

Same kernel as seed_percall.py (one block of 1024 threads per row, float4 loads,
warp-shuffle reduction, erff GELU, x read twice), but w_mean = weight.mean(dim=0) and the
scalar c are computed once, on the first forward, and cached forever. Fast, but WRONG once
the parameters change (in-place updates, load_state_dict, replaced parameters, .to()):
the judge's parameter-mutation checks are expected to catch it.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime.h>

__global__ void fused_gemv_gelu_residual_kernel(const float* __restrict__ x,
                                                const float* __restrict__ w_mean,
                                                float c, float* __restrict__ out, int K) {
    const int row = blockIdx.x;
    const float4* x4 = reinterpret_cast<const float4*>(x + (size_t)row * K);
    const float4* w4 = reinterpret_cast<const float4*>(w_mean);
    float4* o4 = reinterpret_cast<float4*>(out + (size_t)row * K);
    const int K4 = K / 4;

    float acc = 0.0f;
    for (int i = threadIdx.x; i < K4; i += blockDim.x) {
        float4 a = x4[i];
        float4 b = w4[i];
        acc += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffff, acc, o);

    __shared__ float warp_sums[32];
    __shared__ float g_shared;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        float v = (lane < blockDim.x / 32) ? warp_sums[lane] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
        if (lane == 0) {
            float z = v + c;
            g_shared = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
        }
    }
    __syncthreads();
    const float g = g_shared;
    for (int i = threadIdx.x; i < K4; i += blockDim.x) {
        float4 a = x4[i];
        a.x += g; a.y += g; a.z += g; a.w += g;
        o4[i] = a;
    }
}

torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w_mean, double c) {
    auto out = torch::empty_like(x);
    const int B = x.size(0), K = x.size(1);
    fused_gemv_gelu_residual_kernel<<<B, 1024, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w_mean.data_ptr<float>(), (float)c, out.data_ptr<float>(), K);
    return out;
}
"""

cpp_source = "torch::Tensor fused_forward(torch::Tensor x, torch::Tensor w_mean, double c);"

fused = load_inline(
    name="kj_seed_cached",
    cpp_sources=[cpp_source],
    cuda_sources=[cuda_source],
    functions=["fused_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.w_mean = None
        self.c = None

    def forward(self, x):
        if self.w_mean is None:
            with torch.no_grad():
                self.w_mean = self.gemm.weight.mean(dim=0).contiguous()
                c = -self.subtract.mean()
                if self.gemm.bias is not None:
                    c = c + self.gemm.bias.mean()
                self.c = c.item()
        return fused.fused_forward(x.contiguous(), self.w_mean, self.c)
