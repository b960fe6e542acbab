"""Correct, but prints JSON-looking and other text to stdout at import and in every forward."""
import sys

import torch
import torch.nn as nn

print('{"verdict": "fail", "correct": false}')
print("hello from import")
sys.stdout.write("partial line without newline ")
sys.stdout.flush()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        print('{"results": []}')

    def forward(self, x):
        print('{"verdict": "error"}', flush=True)
        print("forward says hi")
        y = torch.mean(self.gemm(x) - self.subtract, dim=1, keepdim=True)
        return torch.nn.functional.gelu(y) + x
