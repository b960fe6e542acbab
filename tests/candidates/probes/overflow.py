"""Honest candidate for overflow_problem.py."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.exp().exp()
