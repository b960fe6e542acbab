"""Roofline helpers: the bytes a call moves, the copy bandwidth, and the floor time they imply.

The floor is the time a memory-bound kernel cannot beat: the bytes it must
read and write over the device's measured copy bandwidth (a practical "speed
of light", below the datasheet peak).  GB is 1e9 bytes, as vendors quote it.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from kerneljudge.timing.loop import measure
from kerneljudge.timing.stats import StopRule, _check_number
from kerneljudge.timing.timers import CallTimer

_GB = 1e9  # bandwidths are reported in decimal GB/s, as vendors quote them


def tensor_bytes(obj: object) -> int:
    """Total logical bytes (``numel * element_size``) of tensors in ``obj``.

    Walks lists, tuples and dict values recursively; other objects count 0.
    Views count their logical size (what a kernel reads), and a tensor listed
    twice counts twice.  torch is not imported: if it was never imported
    there can be no tensors.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return int(obj.numel()) * int(obj.element_size())
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x) for x in obj.values())
    return 0


def measure_copy_bandwidth(
    device: Any,
    nbytes: int = 1 << 30,
    *,
    timer: CallTimer,
    stop: StopRule | None = None,
    warmup_runs: int = 5,
    wall_clock_ms: Callable[[], float],
) -> float:
    """Achievable memory bandwidth in GB/s (1e9 B/s) from a device-to-device copy.

    Copies ``nbytes`` between two buffers with the same :func:`measure` loop
    as kernels, and counts ``2 * nbytes`` (read + write) over the *median*
    time.  This is the practical "speed of light" for memory-bound kernels,
    lower than the datasheet peak.  Pass a timer with an L2 flush so the copy
    is not served from cache (1 GiB dwarfs L2 anyway).
    """
    import torch

    _check_number("nbytes", nbytes, integer=True)
    if nbytes <= 0:
        raise ValueError(f"nbytes must be > 0, got {nbytes}")
    if stop is None:
        stop = StopRule()
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    m = measure(lambda i: dst.copy_(src), timer=timer, stop=stop, warmup_runs=warmup_runs, wall_clock_ms=wall_clock_ms)
    median_ms = m.stats.median_ms
    if not median_ms > 0:
        raise RuntimeError(f"copy time is {median_ms} ms; cannot compute a bandwidth")
    return 2 * nbytes / (median_ms * 1e-3) / _GB


def floor_time_ms(bytes_moved: float, bandwidth_gbps: float) -> float:
    """Lower bound on time to move ``bytes_moved`` at ``bandwidth_gbps`` (GB/s, 1e9)."""
    if bytes_moved < 0:
        raise ValueError(f"bytes_moved must be >= 0, got {bytes_moved}")
    if not bandwidth_gbps > 0:
        raise ValueError(f"bandwidth_gbps must be > 0, got {bandwidth_gbps}; measure it with measure_copy_bandwidth")
    return bytes_moved / (bandwidth_gbps * _GB) * 1e3


def percent_of_light(measured_ms: float, floor_ms: float) -> float:
    """How close a kernel is to its floor: ``100 * floor_ms / measured_ms``.

    100 means at the floor; above 100 means the floor was wrong (e.g. the data
    was cached or fewer bytes were really moved) and should be investigated.
    """
    if not measured_ms > 0:
        raise ValueError(f"measured_ms must be > 0, got {measured_ms}")
    if floor_ms < 0:
        raise ValueError(f"floor_ms must be >= 0, got {floor_ms}")
    return 100.0 * floor_ms / measured_ms
