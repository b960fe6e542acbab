"""QA 24: the negated values behind a negative view's bit (`torch._neg_view`): a plain, contiguous torch.Tensor
whose bytes are relu(x) and whose values are -relu(x). The worker reads an output's values, not its bytes:
`wrong-output` (it passed with an error of 0 when the bytes crossed as they lay)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch._neg_view(torch.relu(x))
