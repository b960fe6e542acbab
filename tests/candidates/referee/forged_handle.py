"""Its outputs described as shared device memory (a made-up CUDA IPC handle, no bytes) instead of their
values: the referee refuses the description at the boundary (no GPU here, a handle that does not open or
bytes past the allocation it maps on one) and never reads what it names."""
import torch
import torch.nn as nn

import kerneljudge.proc.tensorwire as tensorwire

_pack = tensorwire.pack_tensor


def _forged(t, share=None):
    meta, _ = _pack(t, share)
    meta.pop("shared", None)
    return {**meta, "shared": {"handle": "ab" * 64, "offset": 0}}, None


tensorwire.pack_tensor = _forged


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return torch.zeros_like(x)
