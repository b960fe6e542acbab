"""Catalog row 10: swaps the __code__ of a judge function in the worker (the one that lists an output's
tensors) in place, then returns a wrong output. Object identities are unchanged, so only a code snapshot
sees it; the comparison itself runs in the referee, out of reach."""
import sys
import torch
import torch.nn as nn

W = sys.modules["kerneljudge.proc.tensorwire"]


def _nothing(out):
    return []


W.tensors_of.__code__ = _nothing.__code__


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return x * 2.0  # wrong, and no GEMM at all
