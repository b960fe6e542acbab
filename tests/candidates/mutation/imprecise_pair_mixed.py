"""imprecise_pair_problem.py's outputs: the first exact (x, as the float64 reference has it), the second
rounded as the reference rounds it."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = 1e4

    def forward(self, x):
        return x.clone(), (2 * x + self.offset) - self.offset
