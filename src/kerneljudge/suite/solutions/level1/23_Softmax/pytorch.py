"""PyTorch solution for level1/23_Softmax: a numerically stable softmax written out by hand."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.amax(dim=1, keepdim=True)
        e = torch.exp(x - m)
        return e / e.sum(dim=1, keepdim=True)
