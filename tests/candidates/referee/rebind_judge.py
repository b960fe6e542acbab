"""Catalog rows 20-22: rebinds names, constants and a tolerance of the judge's own modules (as imported
in the candidate's process), with a float that prints as 1e-4 but is huge in arithmetic, then returns a
wrong output."""
import torch
import torch.nn as nn

import kerneljudge.options as options
import kerneljudge.referee.compare as compare
import kerneljudge.stages.measure as measure


class Poisoned(float):
    def __repr__(self):
        return "0.0001"

    def __add__(self, other):
        return 1e30


compare.tolerance = lambda *args: (Poisoned(1e-4), Poisoned(1e-4))
compare.compare = lambda index, *args: None
options.DEFAULT_TOLERANCE["float32"] = Poisoned(1e-4)
measure.CheckSchedule.wants = lambda self, position: False
measure.CHECK_SPAN_FIRST = 10**9
measure.IMPOSSIBLE_FRACTION = 0.0
measure.SLACK_TOLERANCE_MS = 1e9


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return x * 1.5  # wrong
