"""The worker draws each call's inputs from the judge's seed itself: this candidate makes its process draw
the first inputs it ever drew for every later call (so that a cache keyed on nothing would always be right),
then computes honestly on them. The referee compares with the reference on its own draw: wrong."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import kerneljudge.worker.server as server

_draw = server.make_inputs
_first = []


def _same_inputs_every_time(problem, seed, device):
    if not _first:
        _first.append(_draw(problem, seed, device))
    return [t.clone() for t in _first[0]]


server.make_inputs = _same_inputs_every_time


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
