"""Spins forever in forward; records its pid and a child's pid (KJ_TEST_PIDFILE) so the test can see them die."""
import os
import subprocess

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        pidfile = os.environ.get("KJ_TEST_PIDFILE")
        if pidfile:
            child = subprocess.Popen(["sleep", "600"])
            with open(pidfile, "w") as out:
                out.write(f"{os.getpid()} {child.pid}")
        print("KJ-MARKER: spinning", flush=True)
        while True:
            pass
