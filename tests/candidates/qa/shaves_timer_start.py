"""Exploit (QA 36, CPU form): computes honestly (and waits 1 ms, a call long enough for the judge's clock to
see), then moves the worker timer's start (`t0`, a local of HostTimer.time_call) forward by 95% of the time
elapsed, through the frame on its stack: it patches nothing the guard watches, and each call claims a twentieth
of its time. Past the cross-check's tolerance it is `timing-tampering`; within it, the report says what the
judge's clock saw (`timing-unconfirmed`)."""
import ctypes
import sys
import time

import torch
import torch.nn as nn


def _shave() -> None:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "time_call" and "t0" in frame.f_locals:
            started = frame.f_locals["t0"]
            frame.f_locals["t0"] = started + int((time.perf_counter_ns() - started) * 0.95)
            ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))
            return
        frame = frame.f_back


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.relu(x)
        time.sleep(0.001)
        _shave()
        return out
