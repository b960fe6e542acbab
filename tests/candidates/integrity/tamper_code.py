"""Catalog row 10: swaps the __code__ of a judge function (the comparison) in place, then returns a wrong
output. Object identities are unchanged, so only a code snapshot sees it."""
import sys
import torch
import torch.nn as nn

C = sys.modules["kerneljudge.worker.compare"]


def _always_close(out, truth, atol, rtol):
    return True, 0, {"max_abs": 0.0, "sum_abs": 0.0, "count": 1, "max_rel": 0.0, "worst": (), "nonfinite": 0,
                     "worst_elements": []}


C._close.__code__ = _always_close.__code__


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return x * 2.0  # wrong, and no GEMM at all
