"""Correct, but its process claims absurd memory figures: an exabyte and more in every reply's request
figures, and a memory report with a string, a negative number, 10**400 bytes and a footprint of its own.
The judge must neither crash nor take the footprint from it (stages/memory.py, memtally.py); the guard
also names the replaced functions (tampering)."""
import torch
import torch.nn as nn

import kerneljudge.worker.server as server

server.memory.request_end = lambda device, between: {"device": device.type, "between": 10**400, "peak": 1 << 70,
                                                     "held": -5, "reset": True}
server.memory.peaks = lambda device, baseline: {"rss_peak_bytes": 10**400, "rss_baseline_bytes": -1,
                                               "cuda_peak_bytes": 10**400, "footprint": {"total_bytes": "huge"}}
server.memory.stage_peak_bytes = lambda device: "many"


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        y = self.gemm(x) - self.subtract
        y = torch.mean(y, dim=1, keepdim=True)
        return torch.nn.functional.gelu(y) + x
