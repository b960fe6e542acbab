"""What a torch process of the judge runs on: the device it describes, the versions it reports, and the
process settings it makes for itself before any candidate code is imported (a memory limit on CPU runs,
Triton's interpreter for Triton candidates on a CPU)."""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any

import torch

from kerneljudge import timing
from kerneljudge.options import memory_limit_bytes


def interpret_triton(device: torch.device, kinds: list[str]) -> None:
    """Triton kernels on a CPU run through Triton's interpreter (set before triton is imported)."""
    if device.type == "cpu" and "triton" in kinds:
        os.environ["TRITON_INTERPRET"] = "1"


def limit_memory(limit_mb: int | None) -> None:
    """An address-space limit for CPU runs (options.memory_limit_bytes): a runaway allocation fails with an
    out-of-memory error instead of taking the machine down. Not on GPUs: CUDA maps far more virtual
    memory than it uses."""
    import resource

    limit = memory_limit_bytes(limit_mb)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def describe_device(device: torch.device) -> dict[str, Any]:
    """Name and size of the device (CPU: processor and torch's thread count)."""
    import platform

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return {"type": "cuda", "name": props.name, "index": device.index or 0,
                "capability": f"{props.major}.{props.minor}", "memory_gb": round(props.total_memory / 1e9, 1),
                "multiprocessors": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None)}
    return {"type": "cpu", "name": platform.processor() or platform.machine(), "threads": torch.get_num_threads()}


def versions() -> dict[str, str]:
    """kerneljudge, Python, torch, CUDA and (if installed) Triton versions."""
    import platform

    import kerneljudge

    found = {"kerneljudge": kerneljudge.__version__, "python": platform.python_version(), "torch": torch.__version__,
             "cuda": str(torch.version.cuda)}
    try:  # not `import triton`: TRITON_INTERPRET must be set before triton is first imported
        found["triton"] = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        pass
    return found


def warm_libraries(device: torch.device) -> None:
    """cuBLAS's set-up (its handle, its workspace, its library's first kernels) done when a process takes its
    GPU: a spare process (isolation.WorkerPool) takes it before its evaluation arrives, so the reference's
    first call in the check no longer pays it (H200, level2/51's reference: 404 ms for the first float32 call
    of a fresh process, 65 ms for the first float64 one, against 6 and 9 ms later; docs/benchmarks.md)."""
    try:
        for dtype in (torch.float32, torch.float64):
            square = torch.ones(8, 8, dtype=dtype, device=device)
            square @ square
        torch.cuda.synchronize(device)
    except RuntimeError:  # a set-up only: a problem that needs cuBLAS meets the error itself, in its own stage
        return
    # its workspace goes back to the allocator's cache and the peak is forgotten: a problem that never calls
    # cuBLAS neither holds it nor has it in its memory block (allocated bytes and their peaks), and one that
    # does takes it again at its first matrix product
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
    torch.cuda.reset_peak_memory_stats(device)


def prepare_device(name: str) -> None:
    """What of `take_device` runs on the host alone, done ahead (protocol.Prepare): the CUDA driver started
    (`torch.cuda.init`: no context is made, nothing runs on the GPU) and the persisting-L2 reset looked up. A CPU
    device has nothing to prepare. Best effort: where the driver fails, `take_device` meets it and says so."""
    if not name.startswith("cuda"):
        return
    try:
        torch.cuda.init()
    except (RuntimeError, AssertionError):  # (torch raises either where CUDA cannot start)
        return
    timing.find_persisting_l2_reset()


def take_device(name: str, memory_limit_mb: int | None,
                gpu_memory_share: float | None = None) -> tuple[torch.device, str | None]:
    """The device a process is asked to use, made current (CUDA; torch's allocator capped at
    `gpu_memory_share` of it when given) or with this process's memory limit (CPU); the usage error when it
    is not there. The first request of the referee and of the worker alike."""
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return device, f"device {device} requested, but torch {torch.__version__} here sees no CUDA GPU"
        if (device.index or 0) >= torch.cuda.device_count():
            return device, f"device {device}: only {torch.cuda.device_count()} GPU(s) visible"
        torch.cuda.set_device(device.index or 0)
        if gpu_memory_share is not None and gpu_memory_share < 1:
            torch.cuda.set_per_process_memory_fraction(gpu_memory_share, device.index or 0)
        timing.find_persisting_l2_reset()  # looked up now, before candidate code and measurements (see there)
        warm_libraries(device)
    else:
        limit_memory(memory_limit_mb)
    return device, None
