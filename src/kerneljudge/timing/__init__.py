"""Careful, testable kernel timing.

Design (after ``torch.utils.benchmark.Timer``):

* Every source of non-determinism is a *parameter*: the clock that times a
  call (:class:`HostTimer` takes ``clock_ns``; :class:`CudaEventTimer` takes an
  ``event_factory``), the wall clock that enforces the budget
  (``wall_clock_ms`` of :func:`measure`), the synchronisation and the cache
  flush.  Tests pass fake clocks and fake events; nothing here picks a clock at
  import time and there is no module-level mutable state.
* There is exactly ONE measurement loop, :func:`measure`.  Host timing, CUDA
  event timing and CUDA-graph timing differ only in the :class:`CallTimer`
  passed to it, so a fix to the loop (warm-up, stop rule, bookkeeping) applies
  to every mode.
* Results keep their raw samples (:class:`Measurement.samples_ms`) next to the
  summary (:class:`Stats`) so a judge can re-analyse or audit a number later.
* Units are in names (``*_ms``, ``*_bytes``, ``*_gbps``).  GB is 1e9 bytes.
* Validation raises :class:`ValueError` whose message names the fix; ``assert``
  is never used for it (asserts vanish under ``python -O``).

The package imports without torch.  GPU helpers import torch lazily.

One module per concern; each says why its pieces look the way they do (what
KernelBench / gpu-mode / NVBench / ``triton.testing.do_bench`` taught us):

* ``stats``     -- :class:`Stats` of samples and the :class:`StopRule`
* ``timers``    -- :class:`HostTimer`, :class:`CudaEventTimer`, :class:`CudaGraphTimer`
* ``flush``     -- :class:`L2Flusher` and :class:`CpuCacheFlusher`, run before each timed call
* ``loop``      -- :func:`measure`, the one loop, and its :class:`Measurement`
* ``roofline``  -- bytes moved, copy bandwidth, floor time, percent of light

Callers use the names re-exported here (``timing.measure``, ``timing.StopRule``).
"""

from __future__ import annotations

from kerneljudge.timing.flush import CpuCacheFlusher, L2Flusher, find_persisting_l2_reset, last_level_cache_bytes
from kerneljudge.timing.loop import Measurement, measure, perf_counter_ms
from kerneljudge.timing.roofline import floor_time_ms, measure_copy_bandwidth, percent_of_light, tensor_bytes
from kerneljudge.timing.stats import STOP_BUDGET, STOP_CONVERGED, STOP_MAX_RUNS, Stats, StopRule
from kerneljudge.timing.timers import (
    CallTimer,
    CudaEventTimer,
    CudaGraphTimer,
    EventLike,
    HostTimer,
    IterationCall,
    cuda_event_timer,
    cuda_graph_timer,
    time_calls,
    torch_graph_capture,
)

__all__ = [
    "Stats",
    "StopRule",
    "STOP_CONVERGED",
    "STOP_MAX_RUNS",
    "STOP_BUDGET",
    "CallTimer",
    "EventLike",
    "IterationCall",
    "time_calls",
    "HostTimer",
    "CudaEventTimer",
    "cuda_event_timer",
    "CudaGraphTimer",
    "torch_graph_capture",
    "cuda_graph_timer",
    "L2Flusher",
    "find_persisting_l2_reset",
    "CpuCacheFlusher",
    "last_level_cache_bytes",
    "Measurement",
    "measure",
    "perf_counter_ms",
    "tensor_bytes",
    "measure_copy_bandwidth",
    "floor_time_ms",
    "percent_of_light",
]
