"""QA regression (level2/51): an honest rewrite that registers `subtract` before `gemm`. The strict protocol
loads the reference's state_dict and passes it; KernelBench's protocol (seed 42 before each constructor, no
copy) gives it other weights and fails it, and the report must say that the two differ."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.gemm = nn.Linear(in_features, out_features, bias=bias)

    def forward(self, x):
        c = -self.subtract.mean()
        if self.gemm.bias is not None:
            c = c + self.gemm.bias.mean()
        return x + F.gelu(torch.mv(x, self.gemm.weight.mean(0)) + c).unsqueeze(1)
