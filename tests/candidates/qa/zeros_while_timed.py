"""QA regression (level1/19 ReLU): honest in the trials and probes; returns zeros on every call made from
the judge's timing loop (proc/timed.py is on its call stack). A measurement that the budget ends after a
few calls must still check a timed output."""
import traceback

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        if any(frame.filename.endswith("/proc/timed.py") for frame in traceback.extract_stack()):
            return torch.zeros_like(x)
        return torch.relu(x)
