"""Kills the process that judges it (a Ray actor) when imported: the nearest ancestor that is not the
sandbox's launcher (the test turns the PID namespace off, so the judge is in view)."""
import os
import signal

import torch.nn as nn


def _judge_pid() -> int:
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if b"kerneljudge.sandbox.launch" not in cmdline.read():
                return pid
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
    return os.getppid()


os.kill(_judge_pid(), signal.SIGKILL)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
