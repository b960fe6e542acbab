"""A correct level2/51 candidate that takes a few seconds to import: long enough to lose its judge
(or its node) while it is being judged."""
import time

import torch
import torch.nn as nn

time.sleep(6)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        y = self.gemm(x) - self.subtract
        y = torch.mean(y, dim=1, keepdim=True)
        return torch.nn.functional.gelu(y) + x
