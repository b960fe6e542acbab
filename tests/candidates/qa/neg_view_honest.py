"""QA 24: relu(x) as a negative view of -relu(x): its values are right, its bytes the opposite (it failed as
`wrong-output` when the bytes crossed as they lay)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch._neg_view(torch.neg(torch.relu(x)))
