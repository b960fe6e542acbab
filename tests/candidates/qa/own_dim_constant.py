"""QA 24: an honest softmax whose module-level `dim = 1` is its own axis, not a copy of the problem's `dim` (the
feature size, which the run's preset changes): left as it is (it was set to the run's size, and the call raised)."""
import torch
import torch.nn as nn

dim = 1  # the softmax's axis


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=dim)
