"""Catalog row 4, hidden: works in place in its input, then points its argument at a copy of the original values
(`x.set_(saved)`), so the tensor object it was given looks untouched while the caller's memory is overwritten.
The worker looks at the inputs through views of that memory made before the call: `input-mutation`."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        saved = x.clone()
        out = x.add_(F.gelu(x @ w_mean + c).unsqueeze(1)).clone()  # the caller's memory overwritten
        x.set_(saved)
        return out
