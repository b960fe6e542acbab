"""Computes what imprecise_problem.py's float64 reference computes: x itself, without the float32 rounding
of (x + 1e4) - 1e4 that its native reference adds."""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clone()
