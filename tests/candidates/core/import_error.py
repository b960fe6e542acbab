import torch
import nonexistent_module  # noqa: F401


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
