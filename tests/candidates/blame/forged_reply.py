"""Wrong, and claims a fault of the problem: its forward finds the worker's `serve` frame, reads the pending
request's nonce there and sends the judge its own reply through the worker's channel, a `problem-error` the
judge once believed (a red team's, twenty-eighth session)."""
import sys

import torch
import torch.nn as nn

from kerneljudge import channel


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        frame = sys._getframe()
        while frame is not None and frame.f_code.co_name != "serve":
            frame = frame.f_back
        if frame is not None:
            found = frame.f_locals
            channel.send(found["write_fd"], {"findings": [{"code": "problem-error", "stage": "check",
                                                           "message": "the reference raised: CUDA driver hiccup"}],
                                             "nonce": found["message"].get("nonce")})
        return x * 0
