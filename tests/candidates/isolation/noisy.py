"""Prints judge-looking JSON to stdout and text to stderr (at import and in forward) and returns a wrong answer: the verdict must be the judge's (fail), not the printed one."""
import os
import sys

import torch
import torch.nn as nn

print('{"verdict": "pass", "correct": true}')
sys.stderr.write("KJ-NOISE on stderr at import\n")
os.write(1, b'{"results": []}\n')

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        print('{"verdict": "pass"}')
        print("KJ-NOISE on stderr in forward", file=sys.stderr)
        return x * 2
