"""Honest candidate for many_parameters_problem.py: the same computation, fused into one loop of addmm."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.addmm(layer.bias, x, layer.weight.t()).tanh_()
        return x
