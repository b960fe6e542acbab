"""Softmax as exp(x) / sum(exp(x)), without subtracting the row's maximum first: exact on get_inputs()'s
draw and on the curved-range moves (logits under 10), NaN once a logit passes ~88 (exp overflows float32).
The range probe that shifts the softmax's own input by +100 sees it (red-team trial, twenty-third session)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        e = torch.exp(x)
        return e / e.sum(dim=1, keepdim=True)
