"""QA 24: the loss without the batch's last row (as a kernel that drops its last block would). On rows drawn
alike the mean hardly moves: within the tolerance. Some rows shifted by 3, the last among them (the range plan's
rows move): `range-mismatch`."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        return torch.mean((predictions[:-1] - targets[:-1]) ** 2)
