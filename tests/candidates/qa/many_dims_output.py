"""QA 24: the right values with fifteen unit dimensions added (17 in all, more than the channel carries):
`output-shape` (it was `tampering`, a malformed reply)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x)
        return y.reshape(tuple(y.shape) + (1,) * 15)
