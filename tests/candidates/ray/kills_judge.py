"""Kills the process that judges it (a Ray actor) when imported: the nearest ancestor that is neither the
sandbox's launcher nor the fork server (the test turns the PID namespace off, so the judge is in view)."""
import os
import signal

import torch.nn as nn


def _judge_pid() -> int:
    pid = os.getppid()
    while pid > 1:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            line = cmdline.read()
            if b"kerneljudge.sandbox.launch" not in line and b"kerneljudge.proc.zygote" not in line:
                return pid
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])
    return os.getppid()


os.kill(_judge_pid(), signal.SIGKILL)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
