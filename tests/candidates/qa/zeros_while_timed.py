"""QA regression (level1/19 ReLU): honest in the trials and probes; returns zeros on every call made from
the judge's timing loop (it finds `batch` of proc/timed.py on its call stack). A measurement that the
budget ends after a few calls must still check a timed output."""
import sys

import torch
import torch.nn as nn


def _being_timed() -> bool:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "batch" and frame.f_code.co_filename.endswith("timed.py"):
            return True
        frame = frame.f_back
    return False


class ModelNew(nn.Module):
    def forward(self, x):
        if _being_timed():
            return torch.zeros_like(x)
        return torch.relu(x)
