"""CUDA solution for level2/51 (Gemm, Subtract, GlobalAvgPool, LogSumExp, GELU, ResidualAdd).

Exact algebraic simplification of the reference for x of shape (B, in_features):

    y = x + gelu(x . w_mean + c),  w_mean = mean(W, dim=0),  c = mean(b) - mean(s)
    (c = -mean(s) when bias=False; logsumexp over a size-1 dim is the identity)

Kernel: one thread block per row. The row of x is loaded once into registers (16-byte float4
loads when the row pointers are 16-byte aligned and in_features % 4 == 0, scalar loads
otherwise), dotted with w_mean in fp32, reduced with warp shuffles, and reused from registers
for the residual add; GELU is exact (erff). c is read through a device pointer (no host sync).
Rows longer than 8192 vectors use a two-pass loop kernel (x is read twice).

w_mean (float32) and c (1-element float32 tensor) are cached in plain attributes and
recomputed (torch ops, float32 accumulation) whenever any parameter changes in place, is
replaced, has its .data swapped, or moves device/dtype; that refresh is the only time the
weight is read. Inference tensors (parameters made under torch.inference_mode()) have no version
counter, so for them the values are derived anew on every call. Non-float32 inputs, CPU tensors,
and non-2D inputs use the PyTorch formula.

Importing this file compiles the extension with nvcc; on a CPU-only PyTorch build that fails.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <cstdint>

namespace {

__device__ __forceinline__ float kj_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block; every thread gets the total. Used once per block (one row per block).
template <int THREADS>
__device__ __forceinline__ float kj_block_sum(float v) {
    constexpr int WARPS = THREADS / 32;
    __shared__ float part[WARPS];
    v = kj_warp_sum(v);
    const int lane = threadIdx.x & 31;
    const int wid = threadIdx.x >> 5;
    if (WARPS == 1) return v;
    if (lane == 0) part[wid] = v;
    __syncthreads();
    float t = lane < WARPS ? part[lane] : 0.0f;
    return kj_warp_sum(t);
}

__device__ __forceinline__ float kj_gelu(float z) {
    return 0.5f * z * (1.0f + erff(z * 0.70710678118654752440f));
}

__device__ __forceinline__ float kj_dot(const float4 a, const float4 b, float acc) {
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    return fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float kj_dot(const float a, const float b, float acc) {
    return fmaf(a, b, acc);
}

__device__ __forceinline__ float4 kj_add(float4 a, const float g) {
    a.x += g; a.y += g; a.z += g; a.w += g;
    return a;
}

__device__ __forceinline__ float kj_add(const float a, const float g) { return a + g; }

// T = float4 (vectorized) or float (scalar). n = number of T elements per row.
// Each thread keeps ITEMS elements of the row in registers between the dot and the write.
template <typename T, int THREADS, int ITEMS>
__global__ void __launch_bounds__(THREADS)
kj_l2_51_row_kernel(const float* __restrict__ x, const float* __restrict__ w,
                    const float* __restrict__ c, float* __restrict__ out,
                    int n, long long x_stride, long long out_stride) {
    const long long row = blockIdx.x;
    const T* __restrict__ xr = reinterpret_cast<const T*>(x + row * x_stride);
    const T* __restrict__ wv = reinterpret_cast<const T*>(w);
    T* __restrict__ orow = reinterpret_cast<T*>(out + row * out_stride);
    const float cv = __ldg(c);  // before the reduction, not after it at the tail of the row

    // Plain loads and stores: the evict-first hints (__ldcs/__stcs) cost 6% at full size on an
    // H200 (benchmarks/l2_51_variants.py: 1.099x a copy with them, 1.037x without).
    T xv[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < n) xv[i] = xr[idx];
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < n) acc = kj_dot(xv[i], __ldg(wv + idx), acc);
    }
    const float z = kj_block_sum<THREADS>(acc) + cv;
    const float g = kj_gelu(z);
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < n) orow[idx] = kj_add(xv[i], g);
    }
}

// Fallback for very long rows: two passes over x (second pass mostly hits L2).
template <int THREADS>
__global__ void __launch_bounds__(THREADS)
kj_l2_51_row_loop_kernel(const float* __restrict__ x, const float* __restrict__ w,
                         const float* __restrict__ c, float* __restrict__ out,
                         long long K, long long x_stride, long long out_stride) {
    const long long row = blockIdx.x;
    const float* __restrict__ xr = x + row * x_stride;
    float* __restrict__ orow = out + row * out_stride;
    float acc = 0.0f;
    for (long long k = threadIdx.x; k < K; k += THREADS) acc = fmaf(xr[k], __ldg(w + k), acc);
    const float g = kj_gelu(kj_block_sum<THREADS>(acc) + __ldg(c));
    for (long long k = threadIdx.x; k < K; k += THREADS) orow[k] = xr[k] + g;
}

template <typename T, int THREADS, int ITEMS>
void kj_launch(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& c,
               torch::Tensor& out, int n, cudaStream_t stream) {
    kj_l2_51_row_kernel<T, THREADS, ITEMS><<<(unsigned)x.size(0), THREADS, 0, stream>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), c.data_ptr<float>(), out.data_ptr<float>(),
        n, (long long)x.stride(0), (long long)out.stride(0));
}

template <typename T>
bool kj_dispatch(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& c,
                 torch::Tensor& out, int64_t n, cudaStream_t stream) {
    if (n <= 32)        kj_launch<T, 32, 1>(x, w, c, out, (int)n, stream);
    else if (n <= 64)   kj_launch<T, 64, 1>(x, w, c, out, (int)n, stream);
    else if (n <= 128)  kj_launch<T, 128, 1>(x, w, c, out, (int)n, stream);
    else if (n <= 256)  kj_launch<T, 256, 1>(x, w, c, out, (int)n, stream);
    else if (n <= 512)  kj_launch<T, 256, 2>(x, w, c, out, (int)n, stream);
    else if (n <= 1024) kj_launch<T, 256, 4>(x, w, c, out, (int)n, stream);
    else if (n <= 2048) kj_launch<T, 1024, 2>(x, w, c, out, (int)n, stream);  // 1.037x a copy (do_bench)
    else if (n <= 4096) kj_launch<T, 512, 8>(x, w, c, out, (int)n, stream);
    else if (n <= 8192) kj_launch<T, 512, 16>(x, w, c, out, (int)n, stream);
    else return false;
    return true;
}

}  // namespace

torch::Tensor kj_l2_51_forward(torch::Tensor x, torch::Tensor w_mean, torch::Tensor c) {
    TORCH_CHECK(x.is_cuda() && w_mean.is_cuda() && c.is_cuda(), "kj_l2_51: CUDA tensors expected");
    TORCH_CHECK(x.scalar_type() == at::kFloat && w_mean.scalar_type() == at::kFloat &&
                c.scalar_type() == at::kFloat, "kj_l2_51: float32 tensors expected");
    TORCH_CHECK(x.dim() == 2, "kj_l2_51: x must be 2D");
    TORCH_CHECK(x.device() == w_mean.device() && x.device() == c.device(), "kj_l2_51: device mismatch");
    if (x.stride(1) != 1) x = x.contiguous();
    if (!w_mean.is_contiguous()) w_mean = w_mean.contiguous();
    const int64_t B = x.size(0), K = x.size(1);
    TORCH_CHECK(w_mean.numel() == K && c.numel() == 1, "kj_l2_51: shape mismatch");
    TORCH_CHECK(B <= 2147483647LL, "kj_l2_51: too many rows");
    const c10::cuda::CUDAGuard guard(x.device());
    auto out = torch::empty({B, K}, x.options());
    if (B == 0 || K == 0) return out;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    const bool vec = (K % 4 == 0) && (x.stride(0) % 4 == 0) && (out.stride(0) % 4 == 0) &&
                     (reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0) &&
                     (reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0) &&
                     (reinterpret_cast<uintptr_t>(w_mean.data_ptr()) % 16 == 0);
    bool done = vec ? kj_dispatch<float4>(x, w_mean, c, out, K / 4, stream)
                    : kj_dispatch<float>(x, w_mean, c, out, K, stream);
    if (!done) {
        kj_l2_51_row_loop_kernel<512><<<(unsigned)B, 512, 0, stream>>>(
            x.data_ptr<float>(), w_mean.data_ptr<float>(), c.data_ptr<float>(),
            out.data_ptr<float>(), (long long)K, (long long)x.stride(0), (long long)out.stride(0));
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_CPP_SOURCE = "torch::Tensor kj_l2_51_forward(torch::Tensor x, torch::Tensor w_mean, torch::Tensor c);"

_ext = load_inline(
    name="kj_l2_51_fused_cuda",
    cpp_sources=[_CPP_SOURCE],
    cuda_sources=[_CUDA_SOURCE],
    functions=["kj_l2_51_forward"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self._kj_key = None
        self._kj_pin = None
        self._kj_w_mean = None
        self._kj_c = None

    # ---- cached derived values -------------------------------------------------------
    def _kj_params(self):
        return (self.gemm.weight, self.gemm.bias, self.subtract)

    @staticmethod
    def _kj_param_key(p):
        if p is None:
            return None
        return (id(p), p._version, p.data_ptr(), p.device, p.dtype, tuple(p.shape))

    @staticmethod
    def _kj_compute(weight, bias, sub):
        """(w_mean, c) in float32 (float64 for float64 params). w_mean accumulates in that type, as the
        reference's own GEMM does: on an H200 this is 0.09 ms, float64 accumulation 0.45 ms, and
        parameters made under inference_mode pay it on every call. c (short vectors): float64."""
        with torch.no_grad():
            store = torch.float64 if weight.dtype == torch.float64 else torch.float32
            w_mean = weight.mean(dim=0, dtype=store).contiguous()
            c = -sub.mean(dtype=torch.float64)
            if bias is not None:
                c = c + bias.mean(dtype=torch.float64)
            return w_mean, c.to(store).reshape(1)

    def _kj_derived(self):
        params = self._kj_params()
        if any(p is not None and p.is_inference() for p in params):
            # Inference tensors (made under torch.inference_mode) have no version counter, so an
            # in-place change to one cannot be seen: derive the values anew on every call.
            self._kj_key = self._kj_pin = None
            return self._kj_compute(*params)
        key = tuple(self._kj_param_key(p) for p in params)
        if key != self._kj_key:
            self._kj_w_mean, self._kj_c = self._kj_compute(*params)
            self._kj_key = key
            # Pin the keyed objects/storages so a freed id()/data_ptr() cannot alias the key.
            self._kj_pin = tuple(p.detach() if p is not None else None for p in params) + params
        return self._kj_w_mean, self._kj_c

    # ---- forward ---------------------------------------------------------------------
    def _reference_forward(self, x):
        original_x = x.clone().detach()
        x = self.gemm(x)
        x = x - self.subtract
        x = torch.mean(x, dim=1, keepdim=True)
        x = torch.logsumexp(x, dim=1, keepdim=True)
        x = torch.nn.functional.gelu(x)
        return x + original_x

    @staticmethod
    def _formula(x, w_mean, c):
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf = x.to(compute)
        z = torch.mv(xf, w_mean.to(compute)) + c.to(compute)
        return (xf + torch.nn.functional.gelu(z).unsqueeze(1)).to(x.dtype)

    def forward(self, x):
        if x.dim() != 2 or not x.is_floating_point():
            return self._reference_forward(x)
        w_mean, c = self._kj_derived()
        if (x.is_cuda and x.dtype == torch.float32 and w_mean.dtype == torch.float32
                and w_mean.device == x.device):
            return _ext.kj_l2_51_forward(x, w_mean, c)
        return self._formula(x, w_mean, c)
