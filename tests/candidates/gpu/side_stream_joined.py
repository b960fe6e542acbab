"""Honest control: a side stream, joined back to the caller's stream before returning."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.stream = None

    def forward(self, x):
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        caller = torch.cuda.current_stream()
        self.stream.wait_stream(caller)
        with torch.cuda.stream(self.stream):
            w = self.gemm.weight.mean(0)
            c = self.gemm.bias.mean() - self.subtract.mean()
            y = x + torch.nn.functional.gelu(x @ w + c).unsqueeze(1)
        caller.wait_stream(self.stream)
        y.record_stream(caller)
        return y
