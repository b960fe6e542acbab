"""PyTorch solution for level1/63_conv_standard_2D__square_input__square_kernel.

Keeps the same `conv2d` submodule (so the reference state_dict loads) and calls the
functional convolution with its parameters directly.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1,
                 padding: int = 0, dilation: int = 1, groups: int = 1, bias: bool = False):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size), stride=stride,
                                padding=padding, dilation=dilation, groups=groups, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.conv2d
        return F.conv2d(x, c.weight, c.bias, c.stride, c.padding, c.dilation, c.groups)
