"""A ReLU whose process leaves its outputs' memory files unsealed (the worker's own sealing step is
weakened at import through a constant the in-process guard does not watch), so it could rewrite an output
after handing it over: the judge, which checks the seals itself, must refuse it."""
import torch
import torch.nn as nn

import kerneljudge.sealed as sealed

sealed.REQUIRED_SEALS = 0  # only F_SEAL_SEAL: the file stays writable


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
