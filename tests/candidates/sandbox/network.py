"""Correct output; at its first call connects to 127.0.0.1:$KJ_TEST_PORT (a socket the test listens on)
and says in $KJ_TEST_OUT/net whether it got through."""
import os
import socket
from pathlib import Path

import torch
import torch.nn as nn


def connect() -> str:
    try:
        with socket.create_connection(("127.0.0.1", int(os.environ["KJ_TEST_PORT"])), timeout=10) as conn:
            conn.sendall(b"kj-exfiltrated")
        return "connected"
    except OSError as exc:
        return f"blocked {exc.errno}"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            Path(os.environ["KJ_TEST_OUT"], "net").write_text(connect())
        c = -self.subtract.mean() + self.gemm.bias.mean()
        return x + torch.nn.functional.gelu(x @ self.gemm.weight.mean(0) + c).unsqueeze(1)
