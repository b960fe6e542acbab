"""Right answers, but at its first call it takes 60% of the GPU's memory and keeps it: past the worker's
default share (half), so `out-of-memory` in its own process; allowed the whole GPU it passes (the control),
the referee working in what is left."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.hoard = None

    def forward(self, x):
        if self.hoard is None:
            total = torch.cuda.get_device_properties(x.device).total_memory
            self.hoard = torch.empty(int(total * 0.6) // 4, device=x.device)
        original_x = x.clone().detach()
        x = self.gemm(x) - self.subtract
        x = torch.logsumexp(torch.mean(x, dim=1, keepdim=True), dim=1, keepdim=True)
        return F.gelu(x) + original_x
