"""Computes what imprecise_problem.py's reference computes, at the same float32 precision."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = 1e4

    def forward(self, x):
        return (x + self.offset) - self.offset
