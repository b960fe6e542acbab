"""Memory, as the referee and the worker measure it: a process's peaks, the device's size, and the
problem's footprint estimated without allocating it (on the meta device).

The peaks are the process's own high-water marks: the resident set's (`getrusage`, no psutil) and, on a
GPU, the caching allocator's `max_memory_allocated`. The resident set includes torch's own libraries,
so a baseline taken when the problem's work begins (the resident set then) is reported beside it.
"""

from __future__ import annotations

import os
import resource
from typing import Any

import torch

from kerneljudge.proc.inputs import seed_generators


def rss_peak_bytes() -> int:
    """This process's resident-set high-water mark (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def rss_now_bytes() -> int:
    """This process's resident set now (the baseline: taken when the problem's work begins, after torch,
    the problem and the candidate are imported)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def device_total_bytes(device: torch.device) -> int:
    """The device's memory: the GPU's, or the machine's RAM."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def device_free_bytes(device: torch.device) -> int:
    """Memory a new allocation can still get: the GPU's free memory plus this process's cached blocks,
    or the machine's available RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
    with open("/proc/meminfo") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["MemAvailable"].split()[0]) * 1024


# The allocator's peak is reset to measure one call; the process's peak, and the peak since the last stage
# mark, are kept here across resets.
_cuda_peak_before_reset = 0
_cuda_stage_peak = 0


def _fold_cuda_peak(device: torch.device) -> None:
    global _cuda_peak_before_reset, _cuda_stage_peak
    peak = int(torch.cuda.max_memory_allocated(device))
    _cuda_peak_before_reset = max(_cuda_peak_before_reset, peak)
    _cuda_stage_peak = max(_cuda_stage_peak, peak)
    torch.cuda.reset_peak_memory_stats(device)


def cuda_call_start(device: torch.device) -> int:
    """Before measuring one call's peak on a GPU: the bytes allocated now (the process's peak is kept)."""
    _fold_cuda_peak(device)
    return int(torch.cuda.memory_allocated(device))


def stage_peak_bytes(device: torch.device) -> int:
    """At a stage's end: on a GPU the allocator's peak since the last stage's end (then a new mark); on a
    CPU the resident set's high-water mark so far (it cannot be reset: the stage that raised it shows as
    the step from the stage before)."""
    if device.type != "cuda":
        return rss_peak_bytes()
    global _cuda_stage_peak
    _fold_cuda_peak(device)
    peak, _cuda_stage_peak = _cuda_stage_peak, int(torch.cuda.memory_allocated(device))
    return peak


def peaks(device: torch.device, baseline_rss_bytes: int) -> dict[str, Any]:
    """This process's peaks so far."""
    data: dict[str, Any] = {"rss_peak_bytes": rss_peak_bytes(), "rss_baseline_bytes": baseline_rss_bytes}
    if device.type == "cuda":
        data["cuda_peak_bytes"] = max(_cuda_peak_before_reset, int(torch.cuda.max_memory_allocated(device)))
    return data


def tensor_bytes(values) -> int:
    """Bytes of the tensors in `values` (a tensor, or a list/tuple of them and other things)."""
    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(tensor_bytes(v) for v in values)
    return 0


def model_bytes(model) -> int:
    """Bytes of a model's parameters and buffers (each storage once)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    seen: dict[int, int] = {}
    for t in list(model.parameters()) + list(model.buffers()):
        seen[id(t)] = tensor_bytes(t)
    return sum(seen.values())


def warm_meta_device() -> None:
    """Run one op on the meta device: the first loads torch's meta registrations (about 1.5 s on a CPU),
    which the referee pays when it starts rather than inside an evaluation's estimate."""
    with torch.device("meta"):
        torch.relu(torch.empty(1))


def estimate_footprint(problem, init_inputs: list, seed: int) -> dict[str, Any]:
    """The problem's parameters, inputs and outputs in bytes, from a run on the meta device (nothing is
    allocated); {"unknown": why} when the problem's code cannot run there (an op without a meta kernel,
    an explicit device)."""
    try:
        seed_generators(seed, torch.device("cpu"))
        with torch.device("meta"):
            model = problem.Model(*init_inputs)
            inputs = list(problem.get_inputs())
        if any(isinstance(a, torch.Tensor) and a.device.type != "meta" for a in inputs):
            return {"unknown": "get_inputs() places its tensors on a device itself"}
        parameters, input_bytes = model_bytes(model), tensor_bytes(inputs)
        with torch.inference_mode():
            out = model(*inputs)
        return {"parameters_bytes": parameters, "inputs_bytes": input_bytes, "outputs_bytes": tensor_bytes(out)}
    except Exception as exc:  # noqa: BLE001 - the problem's code on the meta device; the estimate is optional
        return {"unknown": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"}
