"""QA regression (level2/51): an honest rewrite that keeps its parameters in float64 (more precise than
the reference) and returns the input's dtype. The reference's state_dict loads into them (cast); so must
the parameters a probe puts in place of them."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias, dtype=torch.float64)
        self.subtract = nn.Parameter(torch.randn(out_features, dtype=torch.float64))

    def forward(self, x):
        xd = x.double()
        c = -self.subtract.mean()
        if self.gemm.bias is not None:
            c = c + self.gemm.bias.mean()
        z = xd @ self.gemm.weight.mean(0) + c
        return (xd + F.gelu(z).unsqueeze(1)).to(x.dtype)
