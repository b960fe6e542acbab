"""KernelBench-style level 1, problem 47: sum reduction over one dimension (keepdim=True).

Full size: 64 x 1024 x 1024 fp32 input (256 MiB read), reduced over dim 1 (the middle,
strided dimension), output 64 x 1 x 1024.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Simple model that performs sum reduction over a specified dimension.
    """

    def __init__(self, dim: int):
        """
        Initializes the model with the dimension to reduce over.

        Args:
            dim (int): Dimension to reduce over.
        """
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies sum reduction over the specified dimension.

        Args:
            x (torch.Tensor): Input tensor of shape (..., dim, ...).

        Returns:
            torch.Tensor: Output tensor after sum reduction, shape (..., 1, ...).
        """
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 64
dim1 = 1024
dim2 = 1024
reduce_dim = 1

PRESETS = {"small": {"batch_size": 4, "dim1": 64, "dim2": 48}}


def get_inputs():
    x = torch.randn(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
