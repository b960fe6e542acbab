"""KernelBench-style level 1, problem 1: square matrix multiplication C = A @ B.

Full size: N = 4096 fp32 (two 64 MiB inputs, 64 MiB output, ~137 GFLOP). Compute bound.
The float64 reference comparison at atol=rtol=1e-4 requires true fp32 accumulation
(TF32 would not pass).
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs a single square matrix multiplication (C = A * B)
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """
        Performs the matrix multiplication.

        Args:
            A (torch.Tensor): Input matrix A of shape (N, N).
            B (torch.Tensor): Input matrix B of shape (N, N).

        Returns:
            torch.Tensor: Output matrix C of shape (N, N).
        """
        return torch.matmul(A, B)


N = 4096

PRESETS = {"small": {"N": 96}}


def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]


def get_init_inputs():
    return []  # No special initialization inputs needed
