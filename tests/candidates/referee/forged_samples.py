"""The worker's timing reply forged with numbers no clock gives (negative): they are refused at the
boundary, never averaged. The reply is forged by the worker's own handler table, an instance's dict, which the
guard does not watch (its classes it does): the judge's check of the numbers is what refuses it."""
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

from kerneljudge import protocol
from kerneljudge.worker.server import Worker

for server in [o for o in gc.get_objects() if isinstance(o, Worker)]:
    server.handlers[protocol.TimeBatch] = lambda request, blobs: ({"samples_ms": [-1.0] * request.count}, [])


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        w_mean = self.gemm.weight.mean(0)
        c = self.gemm.bias.mean() - self.subtract.mean()
        return x + F.gelu(x @ w_mean + c).unsqueeze(1)
