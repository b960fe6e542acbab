"""Right on the calls of the visible trials, wrong on every call after them (for tolerance_problem.py,
judged with 5 trials and no probes): what the check shows passes, only a re-check on inputs the candidate
has not been judged on before can catch it."""
import torch
import torch.nn as nn

VISIBLE_CALLS = 5


class ModelNew(nn.Module):
    def __init__(self, dtype_code, offset_percent):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x.clone() if self.calls <= VISIBLE_CALLS else x + 1
