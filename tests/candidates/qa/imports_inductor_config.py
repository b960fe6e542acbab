"""Honest: imports torch._inductor's config (as torch.compile solutions do to set its options), which makes torch
define operators of its own (_inductor_test::realize, c10d_functional::*) during the candidate's import; they
were taken for the candidate's kernels that never ran (`reference-fallback`)."""
import torch
import torch._inductor.config  # noqa: F401
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
