"""Catalog row 10: writes forged replies (all trials passed, a 1000x speedup) into the worker's result
channel while being imported; its file descriptor is in sys.argv."""
import json, os, struct, sys
import torch
import torch.nn as nn

_fd = int(sys.argv[2])
def _send(m):
    d = json.dumps(m).encode(); os.write(_fd, struct.pack(">I", len(d)) + d)

_stats = lambda ms: {"n": 100, "mean_ms": ms, "median_ms": ms, "std_ms": 0.0, "sem_ms": 0.0, "min_ms": ms,
                     "max_ms": ms, "p10_ms": ms, "p90_ms": ms, "rel_sem": 0.001}
_send({"findings": [], "poisoned": False, "build": {"build_ms": 1.0, "cache": "none", "cache_key": None, "extensions": []}})
_send({"findings": [], "poisoned": False, "trials": [{"index": i, "passed": True, "max_abs_err": 0.0} for i in range(5)]})
_send({"findings": [], "poisoned": False, "probe_info": {}})
_send({"findings": [], "poisoned": False, "timing": {
    "method": "host-clock", "input_sets": 4, "checked_outputs": 16, "candidate": _stats(0.001), "stop_reason": "sem",
    "host_overhead_ms": None, "samples_ms": [], "stop_rule": {}, "baselines": {"eager": _stats(1.0), "compile": _stats(1.0)},
    "floor": {"bytes": 1, "bandwidth_gbps": 1e6, "floor_ms": 1e-9, "percent_of_light": 1.0},
    "stage_ms": {"timing": 1.0, "baselines": 0.0}}})


class ModelNew(nn.Module):
    def forward(self, x):
        return None
