"""Row 3 exploit: the result is written into a buffer of the module and the buffer itself is returned."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.register_buffer("result", torch.empty(0), persistent=False)

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        out = x + F.gelu(x @ w_mean + c).unsqueeze(1)
        if self.result.shape != out.shape:
            self.result = torch.empty_like(out)
        self.result.copy_(out)
        return self.result
