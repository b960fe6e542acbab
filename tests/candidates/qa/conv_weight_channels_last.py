"""QA regression (level1/63): an honest convolution that keeps its weight in channels_last layout, chosen
in __init__, and reads it through its raw storage in that order (as a native kernel reading data_ptr()
would). Loading the reference's state_dict keeps a parameter's layout; so must a probe that replaces it."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=False):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, (kernel_size, kernel_size), stride=stride,
                                padding=padding, dilation=dilation, groups=groups, bias=bias)
        self.conv2d.weight.data = self.conv2d.weight.data.contiguous(memory_format=torch.channels_last)

    def forward(self, x):
        c = self.conv2d
        o, i, kh, kw = c.weight.shape
        # the weight's storage read as O, kh, kw, I (channels_last order), whatever its strides say
        nhwc = torch.as_strided(c.weight, (o, kh, kw, i), (kh * kw * i, kw * i, i, 1))
        return F.conv2d(x, nhwc.permute(0, 3, 1, 2), c.bias, c.stride, c.padding, c.dilation, c.groups)
