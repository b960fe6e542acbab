"""Correct output; at its first call tries to outlive its evaluation three ways (catalog row 27): a
double fork with setsid whose survivor ignores SIGTERM, a direct child that ignores SIGTERM, and a
daemon thread. Each process appends "PID" to $KJ_TEST_OUT/pids once it runs (pids as it sees them); each
survivor's command line carries $KJ_TEST_TOKEN so the test can find it on the host."""
import os
import subprocess
import sys
import threading
import time

import torch
import torch.nn as nn

SLEEPER = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "open(os.path.join(os.environ['KJ_TEST_OUT'], 'pids'), 'a').write(f'{os.getpid()}\\n'); time.sleep(600)")


def escape() -> None:
    command = [sys.executable, "-c", SLEEPER, os.environ["KJ_TEST_TOKEN"]]
    subprocess.Popen(command)  # a direct child
    if os.fork() == 0:  # double fork: the grandchild leaves the session and is orphaned
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, command)
        os._exit(0)
    threading.Thread(target=lambda: time.sleep(600), daemon=True).start()


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            escape()
        c = -self.subtract.mean() + self.gemm.bias.mean()
        return x + torch.nn.functional.gelu(x @ self.gemm.weight.mean(0) + c).unsqueeze(1)
