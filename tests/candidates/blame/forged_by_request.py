"""Correct (the reference's math), and forges the reply to the first request it serves whose op (and `what`) are
$KJ_TEST_FORGE_OP (`op` or `op:what`): the JSON object $KJ_TEST_FORGE_REPLY, sent through the worker's channel
with the pending nonce read in its `serve` frame (a red team's, twenty-eighth session: a timed batch answered with
a warning alone, which ended the turns with the first, false times kept; a `usage_error`, which ended a whole
batch; a probe's reply of the wrong shape, which ended the judge)."""
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from kerneljudge import channel


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.forged = False

    def forward(self, x):
        frame = sys._getframe()
        while frame is not None and frame.f_code.co_name != "serve":
            frame = frame.f_back
        if frame is not None and not self.forged:
            request = frame.f_locals.get("message") or {}
            op, _, what = os.environ["KJ_TEST_FORGE_OP"].partition(":")
            if request.get("op") == op and (not what or request.get("what") == what):
                self.forged = True
                channel.send(frame.f_locals["write_fd"], {**json.loads(os.environ["KJ_TEST_FORGE_REPLY"]),
                                                          "nonce": request.get("nonce")})
        y = self.gemm(x) - self.subtract
        y = torch.logsumexp(torch.mean(y, dim=1, keepdim=True), dim=1, keepdim=True)
        return F.gelu(y) + x
