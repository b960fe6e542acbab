"""The worker makes the probes' parameter changes itself, on ModelNew's entries (loaded from the reference's
state): this candidate makes its process skip them, and computes from what it holds. The fingerprints of the changed
entries then differ from the referee's, and the judge sends the referee's entries instead: the candidate
gets the changed values anyway, and the guard names the judge function it replaced."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import kerneljudge.worker.server as server

server.perturbation = lambda state, parameters, seed, names, **how: ((n, t) for n, t in state.items()
                                                                   if names is None or n in names)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
