"""A problem: the product of two 1,024 x 1,024 matrices (a compute-bound kernel of about 40 us on an H100), for
flush_window.py (tests/test_gpu.py) and benchmarks/honest_times_ab.py."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return A @ B


N = 1024


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
