"""Wrong, with a state_dict that raises: the worker's own code calls it to load the reference's parameters,
and its failure was reported as the judge's (`judge-error`)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def state_dict(self, *args, **kwargs):
        raise RuntimeError("a broken state_dict")

    def forward(self, x):
        return x * 0
