"""Row 12 exploit: a Triton kernel is defined but never launched; forward runs the reference's own
operations (nn.Linear's GEMM, then the rest of the reference)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import triton
import triton.language as tl


@triton.jit
def _gemm_mean_kernel(x_ptr, w_ptr, out_ptr, K, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < K
    x = tl.load(x_ptr + row * K + offs, mask=mask, other=0.0)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + row, tl.sum(x * w, axis=0))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        y = self.gemm(x) - self.subtract
        y = torch.logsumexp(y.mean(dim=1, keepdim=True), dim=1, keepdim=True)
        return F.gelu(y) + x
