"""Triton solution for level2/51 (Gemm, Subtract, GlobalAvgPool, LogSumExp, GELU, ResidualAdd).

Exact algebraic simplification of the reference for x of shape (B, in_features):

    y = x + gelu(x . w_mean + c),  w_mean = mean(W, dim=0),  c = mean(b) - mean(s)
    (c = -mean(s) when bias=False; logsumexp over a size-1 dim is the identity)

One Triton program per row: the row of x is loaded once, kept in registers for the dot
product (fp32 accumulation) and reused for the residual add; GELU is exact (erf). Rows longer
than _MAX_SINGLE_BLOCK elements use a two-pass chunked loop (x is read twice).

w_mean (float32) and c (0-d float32 tensor, read by the kernel through a pointer, so there is
no host sync) are cached in plain attributes and recomputed when any parameter changes in
place, is replaced, has its .data swapped, or moves device/dtype. Inference tensors (parameters
made under torch.inference_mode()) have no version counter, so for them the values are derived
anew on every call.

Runs on CUDA tensors (fp32/fp16/bf16) and, under TRITON_INTERPRET=1, on CPU tensors. float64
inputs, non-2D inputs, and CPU tensors without the interpreter use the PyTorch formula.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_MAX_SINGLE_BLOCK = 16384
_CHUNK = 4096


@triton.jit
def _kj_l2_51_row_kernel(x_ptr, w_ptr, c_ptr, out_ptr, K, stride_x, stride_out,
                         BLOCK: tl.constexpr, SINGLE: tl.constexpr, EVEN: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    o_row = out_ptr + row * stride_out
    c = tl.load(c_ptr).to(tl.float32)
    if SINGLE:
        offs = tl.arange(0, BLOCK)
        if EVEN:
            x = tl.load(x_row + offs).to(tl.float32)
            w = tl.load(w_ptr + offs).to(tl.float32)
        else:
            mask = offs < K
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        z = tl.sum(x * w, axis=0) + c
        g = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
        y = (x + g).to(out_ptr.dtype.element_ty)
        if EVEN:
            tl.store(o_row + offs, y)
        else:
            tl.store(o_row + offs, y, mask=mask)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for k0 in range(0, K, BLOCK):
            offs = k0 + tl.arange(0, BLOCK)
            mask = offs < K
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            acc += x * w
        z = tl.sum(acc, axis=0) + c
        g = 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
        for k0 in range(0, K, BLOCK):
            offs = k0 + tl.arange(0, BLOCK)
            mask = offs < K
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(o_row + offs, (x + g).to(out_ptr.dtype.element_ty), mask=mask)


def _interpreting():
    # Under TRITON_INTERPRET=1, @triton.jit yields an InterpretedFunction that runs on CPU tensors.
    return type(_kj_l2_51_row_kernel).__name__ == "InterpretedFunction"


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
        use_triton = (
            (x.is_cuda or (_interpreting() and x.device.type == "cpu"))
            and x.dtype in (torch.float32, torch.float16, torch.bfloat16)
            and w_mean.dtype == torch.float32
            and w_mean.device == x.device
        )
        if not use_triton:
            return self._formula(x, w_mean, c)
        B, K = x.shape
        if x.stride(1) != 1:
            x = x.contiguous()
        out = torch.empty((B, K), dtype=x.dtype, device=x.device)
        if B == 0 or K == 0:
            return out
        if K <= _MAX_SINGLE_BLOCK:
            block = triton.next_power_of_2(K)
            single = True
        else:
            block = _CHUNK
            single = False
        # one warp per 256 elements of the row (32 warps for 8192: 1.047x a copy on an H200, see
        # docs/benchmarks.md), at least 4
        num_warps = max(4, min(32, block // 256)) if single else 8
        _kj_l2_51_row_kernel[(B,)](
            x, w_mean, c, out, K, x.stride(0), out.stride(0),
            BLOCK=block, SINGLE=single, EVEN=(single and block == K),
            num_warps=num_warps,
        )
        return out
