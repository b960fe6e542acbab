"""QA 24: the loss on 7 rows in 8 (every eighth skipped): an unbiased subsample of rows drawn alike, within the
tolerance; with some rows shifted by 3 in secret it is not: `range-mismatch`."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        keep = torch.arange(predictions.shape[0], device=predictions.device) % 8 != 7
        return torch.mean((predictions[keep] - targets[keep]) ** 2)
