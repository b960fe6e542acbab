"""Memory, as the referee and the worker measure it: a process's peaks, the device's size, and the
problem's footprint estimated without allocating it (on the meta device).

The peaks are the process's own high-water marks: the resident set's (`/proc/self/status`, no psutil) and,
on a GPU, the caching allocator's `max_memory_allocated`, kept per request, per stage and for the process. The resident set includes torch's own libraries,
so a baseline taken when the problem's work begins (the resident set then) is reported beside it.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch

from kerneljudge.proc.failures import exception_line
from kerneljudge.proc.inputs import seed_generators


def rss_now_bytes() -> int:
    """This process's resident set now (the baseline: taken when the problem's work begins, after torch,
    the problem and the candidate are imported)."""
    return int(os.pread(_proc_fd("/proc/self/statm", os.O_RDONLY), 256, 0).split()[1]) * _PAGE_BYTES


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


# High-water marks (the GPU allocator's, or the resident set's on the CPU, reset through /proc/self/clear_refs)
# are reset to measure one reference call, one request or one stage; the highest marks of the process, the
# stage and the request so far are kept here across resets, per device type (this process's own state).
_marks: dict[str, dict[str, int]] = {}
# False once the kernel refused a reset (as it does to a process that is not dumpable, unless it runs as root:
# the referee and the worker are not): the resident set's mark then only grows, and the figures say so
_rss_resettable = [True]


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_proc_files: dict[str, int] = {}  # path -> descriptor, this process's own (`_proc_fd`)


def _proc_fd(path: str, flags: int) -> int:
    """A descriptor of this process's /proc file `path`, opened once per process (every request reads or
    writes two of them: opened each time, that was most of the 0.15 ms a request's figures cost)."""
    key = f"{os.getpid()}:{path}"  # a forked child opens its own: the parent's would be the parent's file
    if key not in _proc_files:
        _proc_files[key] = os.open(path, flags | os.O_CLOEXEC)
    return _proc_files[key]


def _vm_hwm_bytes() -> int:
    """This process's resident-set high-water mark since its last reset (Linux reports kilobytes)."""
    status = os.pread(_proc_fd("/proc/self/status", os.O_RDONLY), 1 << 16, 0)
    start = status.find(b"VmHWM:")
    return int(status[start:status.index(b"\n", start)].split()[1]) * 1024 if start >= 0 else rss_now_bytes()


def _allocated(device: torch.device, which: str) -> int:
    """The GPU allocator's allocated bytes, "current" or "peak". Read from the nested statistics: the flat
    ones behind torch.cuda.memory_allocated (`memory_stats`) cost 0.4 ms a call on the H200, 0.2 s of an
    evaluation's referee time at four calls a request (ninth session's profile)."""
    stats = torch.cuda.memory_stats_as_nested_dict(device)  # empty before CUDA is initialised
    return int(stats.get("allocated_bytes", {}).get("all", {}).get(which, 0))


def _high_water(device: torch.device) -> int:
    return _allocated(device, "peak") if device.type == "cuda" else _vm_hwm_bytes()


def held_bytes(device: torch.device) -> int:
    """What this process holds now: the allocator's allocated bytes on a GPU, else the resident set."""
    return _allocated(device, "current") if device.type == "cuda" else rss_now_bytes()


def _fold(device: torch.device) -> tuple[dict[str, int], int]:
    """The high-water mark since the last reset into the kept marks, then a new mark (from what is held now):
    the kept marks, and the mark that was folded."""
    marks = _marks.setdefault(device.type, {"process": 0, "stage": 0, "request": 0})
    peak = _high_water(device)
    for name in marks:
        marks[name] = max(marks[name], peak)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif _rss_resettable[0]:
        try:
            os.write(_proc_fd("/proc/self/clear_refs", os.O_WRONLY), b"5")
        except OSError:
            _rss_resettable[0] = False
    return marks, peak


def cuda_call_start(device: torch.device) -> int:
    """Before measuring one call's peak on a GPU: the bytes allocated now (the process's peak is kept)."""
    _fold(device)
    return held_bytes(device)


def cuda_call_peak(device: torch.device) -> int:
    """After the call `cuda_call_start` began: the most bytes allocated since."""
    return _allocated(device, "peak")


def stage_peak_bytes(device: torch.device) -> int:
    """At a stage's end: the peak since the last stage's end (then a new mark), the allocator's on a GPU, the
    resident set's on a CPU (where the kernel refuses the reset: the high-water mark so far)."""
    marks, _ = _fold(device)
    peak, marks["stage"] = marks["stage"], held_bytes(device)
    return peak


def request_start(device: torch.device) -> int:
    """Before a request: the peak since the last measured request ended (requests not measured, a timing's
    batches, ran meanwhile), then a new mark for this one."""
    marks, between = _fold(device)
    marks["request"] = held_bytes(device)
    return between


def request_end(device: torch.device, between: int) -> dict[str, Any]:
    """After a request, on the device `request_start` measured: what the judge tallies (memtally.py), the
    peak before the request, the peak during it and what the process holds now, in bytes."""
    marks, _ = _fold(device)
    return {"device": device.type, "between": between, "peak": marks["request"], "held": held_bytes(device),
            "reset": device.type == "cuda" or _rss_resettable[0]}


def measured(device: torch.device, answer: Callable[[], tuple[dict[str, Any], list]]) -> tuple[dict[str, Any], list]:
    """`answer()`'s reply with this request's memory figures (`request_end`) under "_memory": how the referee
    and the worker answer every request but a timing's batches."""
    between = request_start(device)
    reply, blobs = answer()
    reply["_memory"] = request_end(device, between)
    return reply, blobs


def peaks(device: torch.device, baseline_rss_bytes: int) -> dict[str, Any]:
    """This process's peaks so far (and on a GPU, its cuBLAS workspaces: asked for last, they are let go)."""
    data: dict[str, Any] = {"rss_peak_bytes": _fold(torch.device("cpu"))[0]["process"],
                            "rss_baseline_bytes": baseline_rss_bytes}
    if device.type == "cuda":
        data["cuda_peak_bytes"] = _fold(device)[0]["process"]
        data["cublas_workspaces_bytes"] = cublas_workspaces_bytes(device)
    return data


def make_cublas_workspaces(device: torch.device) -> None:
    """Have torch make this process's cuBLAS workspaces for the current stream now (a product through cuBLAS and
    one with a bias through cuBLASLt, of 2 x 2 matrices), so that a call measured after this does not count them
    among its own memory: they are the process's fixed cost (`cublas_workspaces_bytes`), not the call's."""
    if device.type == "cuda":
        square = torch.ones(2, 2, device=device)
        torch.nn.functional.linear(square @ square, square, square[0])


def cublas_workspaces_bytes(device: torch.device) -> int:
    """The cuBLAS workspaces this process holds on a GPU: torch makes one per cuBLAS handle and stream at the
    stream's first matrix product (32 MiB each on a Hopper GPU by default) through the caching allocator and
    keeps it for the process's life, so it is in every peak from then on, whatever the problem's size: a fixed
    cost the memory block names (stages/memory.py). Measured by letting them go (torch makes them again at
    the next product; their memory goes back in stream order, so no synchronisation is needed). 0 where the
    process's CUDA context fails (a candidate's error left in it): the memory report must still go out."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if device.type != "cuda" or clear is None:
        return 0
    try:
        before = held_bytes(device)
        clear()
        return max(0, before - held_bytes(device))
    except RuntimeError:  # (torch's CUDA errors) the fixed cost is then not measured, the peaks still reported
        return 0


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
        return {"unknown": exception_line(exc, 200)}
