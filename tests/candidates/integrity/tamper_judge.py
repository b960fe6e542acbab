"""Row 10 exploit: a function of the judge itself is replaced at import."""
import torch
import torch.nn as nn
import torch.nn.functional as F

import kerneljudge.worker.server as _judge_worker

_judge_worker.poison_free_memory = lambda *args: None


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)

