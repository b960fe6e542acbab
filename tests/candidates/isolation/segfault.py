"""Prints a marker, then reads address 0 in forward: the worker dies from SIGSEGV."""
import ctypes

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        print("KJ-MARKER: about to segfault", flush=True)
        ctypes.string_at(0)
        return x
