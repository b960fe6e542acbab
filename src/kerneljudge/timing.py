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

The module imports without torch.  GPU helpers import torch lazily.

Why the pieces look the way they do (what KernelBench / gpu-mode /
NVBench / ``triton.testing.do_bench`` taught us):

* Cache state: a kernel timed back-to-back on the same inputs reads them from
  L2 and looks faster than it will in a real model.  :class:`L2Flusher` writes
  a buffer of at least twice the L2 size *before* each timed call and outside
  the timed region (NVBench and do_bench do the same; do_bench uses a fixed
  256 MB).
* Timed region: flush work must not be inside the interval.  With CUDA events
  the flush is enqueued before ``start.record()``, so the GPU timestamps
  exclude it; a side benefit is that the host has time to enqueue the kernel
  while the flush runs, so the launch latency is hidden (as in do_bench).
* Stopping: a fixed number of runs is either wasteful (slow kernels) or noisy
  (fast kernels).  :class:`StopRule` stops when the relative standard error of
  the mean is small enough, but never before ``min_runs`` samples and
  ``min_time_ms`` of measured time, and always at ``max_runs`` / ``budget_ms``
  (NVBench's "noise criterion + min time + timeout" scheme).
* Launch-bound kernels: with per-call synchronisation their time is dominated
  by launch overhead.  :class:`CudaGraphTimer` replays a captured graph of
  several unrolled calls so the per-call GPU time can be seen (as in
  ``triton.testing.do_bench_cudagraph``).
"""

from __future__ import annotations

import ctypes
import glob
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, Sequence, runtime_checkable

__all__ = [
    "Stats",
    "StopRule",
    "STOP_CONVERGED",
    "STOP_MAX_RUNS",
    "STOP_BUDGET",
    "CallTimer",
    "EventLike",
    "IterationCall",
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

STOP_CONVERGED = "converged"
STOP_MAX_RUNS = "max-runs"
STOP_BUDGET = "budget"

_GB = 1e9  # bandwidths are reported in decimal GB/s, as vendors quote them


def _json_number(x: float) -> float | None:
    """JSON has no NaN/inf; map them to null so ``json.dumps`` output is strict."""
    return x if math.isfinite(x) else None


def perf_counter_ms() -> float:
    """Monotonic wall clock in ms, for callers to pass as ``wall_clock_ms``.

    Provided as a convenience; :func:`measure` never uses it implicitly.
    """
    return time.perf_counter_ns() / 1e6


# --------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------


def _quantile_sorted(xs: Sequence[float], q: float) -> float:
    """Quantile of sorted ``xs`` by linear interpolation between order statistics.

    This is the "type 7" definition (numpy's default, R's default): position
    ``h = (n - 1) * q``, interpolate between ``xs[floor(h)]`` and the next one.
    """
    n = len(xs)
    if n == 0:
        return math.nan
    h = (n - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


@dataclass(frozen=True)
class Stats:
    """Summary of timing samples, all in milliseconds.

    ``std_ms`` is the sample standard deviation (divisor n-1) because the
    samples estimate the spread of an unknown distribution; ``sem_ms`` is the
    standard error of the mean, ``std_ms / sqrt(n)``.  With fewer than two
    samples the spread is unknown and reported as NaN (not 0, which would
    wrongly read as "perfectly converged").
    """

    n: int
    mean_ms: float
    median_ms: float
    std_ms: float
    sem_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float

    @property
    def rel_sem(self) -> float:
        """SEM relative to the mean; ``inf`` when unknown, so it never converges."""
        if math.isnan(self.sem_ms) or math.isnan(self.mean_ms):
            return math.inf
        if self.mean_ms == 0.0:
            return 0.0 if self.sem_ms == 0.0 else math.inf
        return self.sem_ms / abs(self.mean_ms)

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float]) -> "Stats":
        """Compute statistics in pure Python (no numpy needed)."""
        xs = sorted(float(x) for x in samples_ms)
        n = len(xs)
        if n == 0:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan, nan, nan)
        mean = math.fsum(xs) / n
        if n >= 2:
            var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
            std = math.sqrt(var)
            sem = std / math.sqrt(n)
        else:
            std = sem = math.nan
        return cls(
            n=n,
            mean_ms=mean,
            median_ms=_quantile_sorted(xs, 0.5),
            std_ms=std,
            sem_ms=sem,
            min_ms=xs[0],
            max_ms=xs[-1],
            p10_ms=_quantile_sorted(xs, 0.1),
            p90_ms=_quantile_sorted(xs, 0.9),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain dict; non-finite values become ``None`` (strict JSON)."""
        return {
            "n": self.n,
            "mean_ms": _json_number(self.mean_ms),
            "median_ms": _json_number(self.median_ms),
            "std_ms": _json_number(self.std_ms),
            "sem_ms": _json_number(self.sem_ms),
            "min_ms": _json_number(self.min_ms),
            "max_ms": _json_number(self.max_ms),
            "p10_ms": _json_number(self.p10_ms),
            "p90_ms": _json_number(self.p90_ms),
            "rel_sem": _json_number(self.rel_sem),
        }


# --------------------------------------------------------------------------
# Stop rule
# --------------------------------------------------------------------------


def _check_number(name: str, value: object, *, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        want = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {want}, got {value!r}; pass {want}")
    if not integer and not math.isfinite(float(value)):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be finite, got {value!r}; pass a finite number")


@dataclass(frozen=True)
class StopRule:
    """When :func:`measure` may and must stop.

    Stopping as "converged" requires all of: at least ``min_runs`` samples,
    at least ``min_time_ms`` of *measured* time (sum of samples; this keeps
    very fast kernels running long enough for clocks/caches/boost to settle
    and for rare slow events to show up), and a relative SEM at most
    ``target_rel_sem``.  Regardless of convergence the loop stops at
    ``max_runs`` samples or when ``budget_ms`` of wall time (including host
    overhead and flushes) has been spent, so a noisy kernel cannot stall the
    judge.  ``target_rel_sem=0`` disables convergence (fixed-budget runs).
    """

    min_runs: int = 10
    max_runs: int = 10_000
    min_time_ms: float = 100.0
    budget_ms: float = 2000.0
    target_rel_sem: float = 0.005

    def __post_init__(self) -> None:
        _check_number("min_runs", self.min_runs, integer=True)
        _check_number("max_runs", self.max_runs, integer=True)
        _check_number("min_time_ms", self.min_time_ms)
        _check_number("budget_ms", self.budget_ms)
        _check_number("target_rel_sem", self.target_rel_sem)
        if self.min_runs < 1:
            raise ValueError(f"min_runs must be >= 1, got {self.min_runs}; pass min_runs=1 or more")
        if self.max_runs < self.min_runs:
            raise ValueError(
                f"max_runs ({self.max_runs}) is below min_runs ({self.min_runs}); "
                "raise max_runs or lower min_runs"
            )
        if self.min_time_ms < 0:
            raise ValueError(f"min_time_ms must be >= 0, got {self.min_time_ms}; pass 0 to disable it")
        if self.budget_ms <= 0:
            raise ValueError(f"budget_ms must be > 0, got {self.budget_ms}; pass a positive wall-time cap")
        if self.target_rel_sem < 0:
            raise ValueError(
                f"target_rel_sem must be >= 0, got {self.target_rel_sem}; "
                "pass e.g. 0.005 for 0.5%, or 0 to never stop early"
            )

    def should_stop(self, samples_ms: Sequence[float], elapsed_ms: float) -> str | None:
        """Return the stop reason, or ``None`` to keep measuring.

        Reasons are checked in the order ``"converged"``, ``"max-runs"``,
        ``"budget"`` so that a run which converged exactly at a cap is reported
        as converged (the more informative reason).
        """
        n = len(samples_ms)
        if (
            self.target_rel_sem > 0
            and n >= self.min_runs
            and math.fsum(samples_ms) >= self.min_time_ms
            and Stats.from_samples(samples_ms).rel_sem <= self.target_rel_sem
        ):
            return STOP_CONVERGED
        if n >= self.max_runs:
            return STOP_MAX_RUNS
        if elapsed_ms >= self.budget_ms:
            return STOP_BUDGET
        return None


# --------------------------------------------------------------------------
# Timers
# --------------------------------------------------------------------------


@runtime_checkable
class CallTimer(Protocol):
    """Times one call.

    ``time_call(fn)`` runs ``fn()`` (possibly after an untimed cache flush)
    and returns the duration of the call in milliseconds, excluding the flush.
    """

    def time_call(self, fn: Callable[[], object]) -> float: ...


def time_calls(timer: CallTimer, calls: Sequence["IterationCall"],
               before: Callable[[int], None] | None = None) -> list[float]:
    """Time `calls` in order with `timer`, running `before(index)` ahead of each call outside its timed
    interval: in one batch when the timer batches (:class:`CudaEventTimer` with ``batch > 1``), else one
    call at a time."""
    batched = getattr(timer, "time_calls", None)
    if batched is not None:
        return batched(calls, before)
    elapsed = []
    for call in calls:
        if before is not None:
            before(call.index)
        elapsed.append(timer.time_call(call))
    return elapsed


class EventLike(Protocol):
    """The subset of ``torch.cuda.Event`` the event timers use."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def elapsed_time(self, end: Any) -> float: ...


def _no_sync() -> None:
    """No-op synchronisation, for purely host-side work."""


@dataclass(frozen=True)
class IterationCall:
    """Zero-argument call of ``fn_for_iteration(index)``.

    :func:`measure` hands one of these to the timer, so timers that must
    recognise "the same work" across samples (:class:`CudaGraphTimer`, which
    caches captured graphs) can see the iteration index.
    """

    fn_for_iteration: Callable[[int], object]
    index: int

    def __call__(self) -> object:
        return self.fn_for_iteration(self.index)


class HostTimer:
    """Times a call with a host clock: flush, sync, t0, fn(), sync, t1.

    The flush runs *before* the first sync so that asynchronous flush work
    (e.g. a GPU memset) has completed before ``t0`` is read; the interval then
    contains only ``fn`` and the trailing sync.  For GPU work pass
    ``sync=torch.cuda.synchronize``; host timing then includes launch
    overhead, which is the point when you want end-to-end latency.
    """

    def __init__(
        self,
        clock_ns: Callable[[], int],
        sync: Callable[[], None] = _no_sync,
        flush: Callable[[], None] | None = None,
    ) -> None:
        if not callable(clock_ns):
            raise ValueError("clock_ns must be callable returning ns, e.g. time.perf_counter_ns")
        self._clock_ns = clock_ns
        self._sync = sync
        self._flush = flush

    def time_call(self, fn: Callable[[], object]) -> float:
        if self._flush is not None:
            self._flush()
        self._sync()
        t0 = self._clock_ns()
        fn()
        self._sync()
        t1 = self._clock_ns()
        return (t1 - t0) / 1e6


class CudaEventTimer:
    """Times calls with device events: flush; start.record(); fn(); end.record().

    Events time the GPU stream between the two records, so host-side Python
    overhead inside ``fn`` only counts if the GPU idles waiting for it.  The
    flush is enqueued before ``start`` and is therefore excluded.

    ``batch`` calls are enqueued back to back (each with its own flush and
    event pair) before the host waits once, as triton's do_bench does, and
    each still yields its own sample.  Waiting after every call leaves the
    GPU idle between calls, and its clocks then depend on those idle gaps:
    on an H200 five repeated measurements of a 1 GiB copy spread 3% waiting
    per call and under 0.2% in batches of four (docs/benchmarks.md, which
    also shows a power-limited matmul drifting 1-5% either way).  One
    sample's work still cannot overlap the next sample's flush: they are
    ordered on one stream.

    Caveat: events time the *current stream*.  Work that ``fn`` puts on other
    streams without joining them back is not timed; a judge that distrusts
    candidates should cross-check with a :class:`HostTimer` using a
    device-wide sync.

    ``hold`` (optional) enqueues device work once per batch, after the first
    flush and before the first ``start`` (a spin kernel, as NVBench's blocking
    kernel): while the device runs it, the host enqueues the batch, so the
    intervals hold the calls' device time and not the host's launch overhead,
    which callers then report separately.

    ``event_factory`` makes one event (``torch.cuda.Event(enable_timing=True)``
    on a GPU, a fake in tests); ``2 * batch`` are created once and reused,
    which is safe because we synchronise on the last ``end`` before
    re-recording.  ``calls_per_fn`` divides the elapsed time when ``fn``
    performs several logical calls.
    """

    def __init__(
        self,
        event_factory: Callable[[], EventLike],
        flush: Callable[[], None] | None = None,
        *,
        calls_per_fn: int = 1,
        hold: Callable[[], None] | None = None,
        batch: int = 1,
    ) -> None:
        for name, value in (("calls_per_fn", calls_per_fn), ("batch", batch)):
            _check_number(name, value, integer=True)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self._events = [(event_factory(), event_factory()) for _ in range(batch)]
        self._flush = flush
        self._hold = hold
        self._calls_per_fn = calls_per_fn
        self.batch = batch

    def time_call(self, fn: Callable[[], object]) -> float:
        return self.time_calls([fn])[0]

    def time_calls(self, fns: Sequence[Callable[[], object]],
                   before: Callable[[int], None] | None = None) -> list[float]:
        """Enqueue up to ``batch`` calls back to back, wait once, return each call's time.
        ``before(fn.index)`` (for :class:`IterationCall` calls) runs ahead of each call's flush."""
        if not 1 <= len(fns) <= self.batch:
            raise ValueError(f"time_calls takes 1 to {self.batch} calls, got {len(fns)}")
        for k, (fn, (start, end)) in enumerate(zip(fns, self._events)):
            if before is not None:
                before(fn.index)
            if self._flush is not None:
                self._flush()
            if k == 0 and self._hold is not None:
                self._hold()
            start.record()
            fn()
            end.record()
        self._events[len(fns) - 1][1].synchronize()
        return [float(start.elapsed_time(end)) / self._calls_per_fn for start, end in self._events[: len(fns)]]


def cuda_event_timer(device: Any = None, flush: Callable[[], None] | None = None,
                     hold: Callable[[], None] | None = None, batch: int = 1) -> CudaEventTimer:
    """:class:`CudaEventTimer` wired to ``torch.cuda.Event(enable_timing=True)``.

    Events record on the current stream of the *current* device, so ``device``
    must be the current device; we refuse a mismatch instead of silently
    timing the wrong GPU.
    """
    import torch

    _require_current_cuda_device(torch, device)
    return CudaEventTimer(lambda: torch.cuda.Event(enable_timing=True), flush, hold=hold, batch=batch)


def _require_current_cuda_device(torch: Any, device: Any) -> None:
    if not torch.cuda.is_available():
        raise ValueError("CUDA is not available; use HostTimer for CPU timing")
    if device is None:
        return
    dev = torch.device(device)
    if dev.type != "cuda":
        raise ValueError(f"device {device!r} is not a CUDA device; use HostTimer for CPU timing")
    if dev.index is not None and dev.index != torch.cuda.current_device():
        raise ValueError(
            f"device {device!r} is not the current CUDA device ({torch.cuda.current_device()}); "
            f"call torch.cuda.set_device({dev.index}) first"
        )


class CudaGraphTimer:
    """Times replays of a captured CUDA graph, reporting time per logical call.

    For launch-bound kernels (a few microseconds of GPU work) per-call
    synchronisation measures launch latency, not the kernel.  This timer
    captures ``calls_per_replay`` unrolled calls of ``fn`` into one graph and
    times ``replays`` back-to-back replays between two events, after one
    untimed flush.  The result is divided by ``calls_per_replay * replays``.
    Note that only the first call of each group sees a cold L2; graph mode
    measures warm steady-state throughput, which is what matters for tiny,
    launch-bound kernels.

    ``capture(body) -> replay`` turns a zero-argument body into a zero-argument
    replay function (:func:`torch_graph_capture` on a GPU; a fake in tests).
    After each capture the graph is replayed once untimed, because the first
    launch of an instantiated graph also uploads it.

    Graph caching: capture is expensive and a graph bakes in tensor
    addresses, so graphs are cached per input set.  When ``fn`` is an
    :class:`IterationCall` (what :func:`measure` passes) the cache key is
    ``(fn_for_iteration, index % input_period)``; set ``input_period`` to the
    number of input sets the caller rotates through (1 when it does not
    rotate).  Any other callable is keyed by identity.  At most
    ``input_period`` graphs are kept.
    """

    def __init__(
        self,
        event_factory: Callable[[], EventLike],
        capture: Callable[[Callable[[], None]], Callable[[], object]],
        flush: Callable[[], None] | None = None,
        *,
        input_period: int,
        calls_per_replay: int = 20,
        replays: int = 5,
    ) -> None:
        for name, value in (
            ("input_period", input_period),
            ("calls_per_replay", calls_per_replay),
            ("replays", replays),
        ):
            _check_number(name, value, integer=True)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self._start = event_factory()
        self._end = event_factory()
        self._capture = capture
        self._flush = flush
        self._input_period = input_period
        self._calls_per_replay = calls_per_replay
        self._replays = replays
        # Strong references to keys keep ids from being reused by new objects.
        self._graphs: dict[Any, Callable[[], object]] = {}
        self.captures = 0  # exposed for tests / diagnostics

    def _key(self, fn: Callable[[], object]) -> Any:
        if isinstance(fn, IterationCall):
            return (fn.fn_for_iteration, fn.index % self._input_period)
        return fn

    def _replay_for(self, fn: Callable[[], object]) -> Callable[[], object]:
        key = self._key(fn)
        replay = self._graphs.get(key)
        if replay is None:
            n = self._calls_per_replay

            def body() -> None:
                for _ in range(n):
                    fn()

            replay = self._capture(body)
            replay()  # untimed first launch (graph upload)
            while len(self._graphs) >= self._input_period:
                self._graphs.pop(next(iter(self._graphs)))
            self._graphs[key] = replay
            self.captures += 1
        return replay

    def time_call(self, fn: Callable[[], object]) -> float:
        replay = self._replay_for(fn)
        if self._flush is not None:
            self._flush()
        self._start.record()
        for _ in range(self._replays):
            replay()
        self._end.record()
        self._end.synchronize()
        calls = self._calls_per_replay * self._replays
        return float(self._start.elapsed_time(self._end)) / calls


def torch_graph_capture(device: Any = None, *, warmup_calls: int = 3) -> Callable[[Callable[[], None]], Callable[[], object]]:
    """Return ``capture(body) -> replay`` using ``torch.cuda.CUDAGraph``.

    Follows the PyTorch CUDA-graph recipe: run ``body`` a few times on a side
    stream first (lazy initialisation, cuBLAS workspaces and allocator
    warm-up must not happen during capture), join the streams, then capture.
    The returned bound ``replay`` keeps the graph (and its memory pool) alive.
    """
    import torch

    def capture(body: Callable[[], None]) -> Callable[[], object]:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup_calls):
                body()
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            body()
        torch.cuda.synchronize(device)
        return graph.replay

    return capture


def cuda_graph_timer(
    device: Any = None,
    flush: Callable[[], None] | None = None,
    *,
    input_period: int,
    calls_per_replay: int = 20,
    replays: int = 5,
) -> CudaGraphTimer:
    """:class:`CudaGraphTimer` wired to torch events and :func:`torch_graph_capture`."""
    import torch

    _require_current_cuda_device(torch, device)
    return CudaGraphTimer(
        lambda: torch.cuda.Event(enable_timing=True),
        torch_graph_capture(device),
        flush,
        input_period=input_period,
        calls_per_replay=calls_per_replay,
        replays=replays,
    )


# --------------------------------------------------------------------------
# Cache flushers
# --------------------------------------------------------------------------


def find_persisting_l2_reset() -> tuple[Callable[[], None] | None, str]:
    """Find ``cudaCtxResetPersistingL2Cache``; return ``(fn_or_None, note)``.

    ``torch.cuda`` does not expose this call (checked on torch 2.13).  A
    candidate could set an access-policy window that pins its data in the
    persisting part of L2, which a plain buffer write does not evict, so we
    reset persisting lines before each timed call when we can.  We try
    cuda-python (``cuda.bindings.runtime`` or ``cuda.cudart``) and then the
    CUDA runtime library already loaded by torch through ctypes.  The reset
    applies to the runtime's current device.  If nothing is found, the note
    says so and only the buffer write flushes L2.
    """
    for modname in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            mod = __import__(modname, fromlist=["cudaCtxResetPersistingL2Cache"])
            fn = mod.cudaCtxResetPersistingL2Cache
        except (ImportError, AttributeError):
            continue

        def reset_cuda_python(fn: Any = fn) -> None:
            (err,) = fn()
            if int(err) != 0:
                raise RuntimeError(f"cudaCtxResetPersistingL2Cache failed: {err}")

        return reset_cuda_python, f"cudaCtxResetPersistingL2Cache via {modname}"

    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"]
    for pattern in ("nvidia/cuda_runtime/lib/libcudart.so*", "nvidia/cu13/lib/libcudart.so*"):
        for base in sys.path:
            names.extend(sorted(glob.glob(os.path.join(base, pattern))))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            fn = lib.cudaCtxResetPersistingL2Cache
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int

        def reset_ctypes(fn: Any = fn) -> None:
            err = fn()
            if err != 0:
                raise RuntimeError(f"cudaCtxResetPersistingL2Cache failed with cudaError {err}")

        return reset_ctypes, f"cudaCtxResetPersistingL2Cache via ctypes {name}"
    return None, "cudaCtxResetPersistingL2Cache not reachable (no cuda-python, no libcudart); persisting L2 lines are not reset"


class L2Flusher:
    """Evicts the device L2 cache by writing a buffer of ``multiple`` x L2 size.

    Call it before each timed call, outside the timed region (the timers do
    this).  Writing (not reading) is used so dirty lines of the previous call
    are evicted too, and the fill value changes on every call so no layer can
    treat the write as a no-op.  The write is enqueued on the current stream,
    so with CUDA events it is ordered before ``start.record()``.

    ``l2_cache_bytes`` defaults to ``get_device_properties(device).L2_cache_size``
    (needs CUDA); pass it explicitly to use the flusher on other devices, e.g.
    ``"cpu"`` in tests.  ``reset_persisting_l2`` is called first on each flush
    (see :func:`find_persisting_l2_reset`; :meth:`for_cuda_device` wires it).
    """

    def __init__(
        self,
        device: Any,
        *,
        l2_cache_bytes: int | None = None,
        multiple: int = 2,
        reset_persisting_l2: Callable[[], None] | None = None,
    ) -> None:
        import torch

        _check_number("multiple", multiple, integer=True)
        if multiple < 2:
            raise ValueError(f"multiple must be >= 2 to evict the whole L2, got {multiple}")
        if l2_cache_bytes is None:
            if not torch.cuda.is_available():
                raise ValueError("CUDA is not available; pass l2_cache_bytes=... or use CpuCacheFlusher")
            l2_cache_bytes = int(torch.cuda.get_device_properties(device).L2_cache_size)
        _check_number("l2_cache_bytes", l2_cache_bytes, integer=True)
        if l2_cache_bytes <= 0:
            raise ValueError(f"l2_cache_bytes must be > 0, got {l2_cache_bytes}")
        self.l2_cache_bytes = l2_cache_bytes
        n_words = -(-multiple * l2_cache_bytes // 4)  # ceil, int32 words
        self.buffer = torch.empty(n_words, dtype=torch.int32, device=device)
        self.buffer_bytes = self.buffer.numel() * self.buffer.element_size()
        self._reset = reset_persisting_l2
        self.persisting_l2_note = "not requested" if reset_persisting_l2 is None else "enabled"
        self._value = 0
        self.flushes = 0

    @classmethod
    def for_cuda_device(cls, device: Any = None, *, multiple: int = 2) -> "L2Flusher":
        """Flusher for a CUDA device, resetting persisting L2 lines if possible.

        The reset is probed once; if the probe fails it is disabled and
        ``persisting_l2_note`` records why.
        """
        import torch

        _require_current_cuda_device(torch, device)
        reset, note = find_persisting_l2_reset()
        if reset is not None:
            try:
                reset()
            except RuntimeError as exc:
                reset, note = None, f"probe failed, persisting L2 not reset: {exc}"
        flusher = cls(device, multiple=multiple, reset_persisting_l2=reset)
        flusher.persisting_l2_note = note
        return flusher

    def __call__(self) -> None:
        if self._reset is not None:
            self._reset()
        self._value = (self._value + 1) & 0x7FFFFFFF
        self.buffer.fill_(self._value)
        self.flushes += 1


def _parse_cache_size(text: str) -> int:
    """Parse sysfs cache sizes like ``"32768K"``, ``"1M"``, ``"512"`` into bytes."""
    s = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    digits = s[:-1] if s[-1:] in "KMG" else s
    return int(digits) * mult


def last_level_cache_bytes(
    sysfs_cpu0_cache: str = "/sys/devices/system/cpu/cpu0/cache",
    fallback_bytes: int = 32 << 20,
) -> int:
    """Largest cache size listed for cpu0 in sysfs (the LLC); ``fallback_bytes`` if unreadable."""
    sizes = []
    for path in glob.glob(os.path.join(sysfs_cpu0_cache, "index*", "size")):
        try:
            with open(path) as fh:
                sizes.append(_parse_cache_size(fh.read()))
        except (OSError, ValueError):
            continue
    return max(sizes) if sizes else fallback_bytes


class CpuCacheFlusher:
    """Evicts CPU caches by writing a buffer of ``multiple`` x LLC size.

    Uses ``ctypes.memset`` on a private buffer (no torch, no Python loop), with
    a value that changes per call.  Optional for CPU timing: pass it as
    ``HostTimer(flush=...)``.  ``cache_bytes`` defaults to
    :func:`last_level_cache_bytes` (sysfs, else 32 MiB).
    """

    def __init__(self, *, cache_bytes: int | None = None, multiple: int = 2) -> None:
        _check_number("multiple", multiple, integer=True)
        if multiple < 2:
            raise ValueError(f"multiple must be >= 2 to evict the whole cache, got {multiple}")
        if cache_bytes is None:
            cache_bytes = last_level_cache_bytes()
        _check_number("cache_bytes", cache_bytes, integer=True)
        if cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be > 0, got {cache_bytes}")
        self.buffer_bytes = multiple * cache_bytes
        self.buffer = (ctypes.c_ubyte * self.buffer_bytes)()
        self._value = 0
        self.flushes = 0

    def __call__(self) -> None:
        self._value = (self._value + 1) & 0xFF
        ctypes.memset(self.buffer, self._value, self.buffer_bytes)
        self.flushes += 1


# --------------------------------------------------------------------------
# The measurement loop
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """Raw samples plus their statistics and how the loop ended.

    ``loop_wall_ms`` is the wall time of the measured phase (what the budget
    caps), ``warmup_wall_ms`` that of the warm-up phase.
    """

    samples_ms: tuple[float, ...]
    stats: Stats
    stop_reason: str
    warmup_runs: int
    loop_wall_ms: float
    warmup_wall_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "samples_ms": [_json_number(x) for x in self.samples_ms],
            "stats": self.stats.to_json(),
            "stop_reason": self.stop_reason,
            "warmup_runs": self.warmup_runs,
            "loop_wall_ms": _json_number(self.loop_wall_ms),
            "warmup_wall_ms": _json_number(self.warmup_wall_ms),
        }


def measure(
    fn_for_iteration: Callable[[int], object],
    *,
    timer: CallTimer,
    stop: StopRule,
    warmup_runs: int,
    wall_clock_ms: Callable[[], float],
    warmup_ms: float = 0.0,
    before: Callable[[int], None] | None = None,
    after: Callable[[int], None] | None = None,
) -> Measurement:
    """The one measurement loop.

    Runs unrecorded warm-up calls (at least ``warmup_runs`` of them and at least ``warmup_ms`` of wall
    time: GPU clocks ramp up from idle over milliseconds), then timed calls until
    ``stop.should_stop`` gives a reason.  Call ``i`` (counting from 0 in each
    phase) runs ``fn_for_iteration(i)``, so callers can rotate among input sets
    with ``inputs[i % len(inputs)]`` (defeats caching of results/inputs across
    calls).  Warm-up goes through ``timer`` too, so timer set-up (graph
    capture, first flush, event creation) happens before the first sample.

    Calls go to the timer in batches of ``timer.batch`` (1 unless the timer
    batches; see :class:`CudaEventTimer`); the stop rule is consulted after
    each batch and the samples are cut at ``stop.max_runs``.  ``before(i)``
    runs ahead of call ``i`` and ``after(i)`` once its batch has finished,
    both outside the timed intervals (the judge refills inputs and checks
    outputs there).

    ``wall_clock_ms`` drives the budget and the reported wall times; it is a
    parameter so tests can use a fake clock.  Every variant (host, events,
    graphs) is this same loop with a different ``timer``.
    """
    _check_number("warmup_runs", warmup_runs, integer=True)
    if warmup_runs < 0:
        raise ValueError(f"warmup_runs must be >= 0, got {warmup_runs}; pass 0 to skip warm-up")
    if not isinstance(stop, StopRule):
        raise ValueError(f"stop must be a StopRule, got {type(stop).__name__}; pass StopRule(...)")
    if not callable(getattr(timer, "time_call", None)):
        raise ValueError("timer must have time_call(fn) -> ms; pass HostTimer/CudaEventTimer/CudaGraphTimer")
    batch = getattr(timer, "batch", 1)

    def run_batch(first: int) -> list[float]:
        calls = [IterationCall(fn_for_iteration, first + k) for k in range(batch)]
        elapsed = time_calls(timer, calls, before)
        if after is not None:
            for call in calls:
                after(call.index)
        return elapsed

    w0 = wall_clock_ms()
    i = 0
    while i < warmup_runs or wall_clock_ms() - w0 < warmup_ms:  # both a count and a time (clocks ramp up)
        run_batch(i)
        i += batch
    warmed = i
    t0 = wall_clock_ms()

    samples: list[float] = []
    i = 0
    while True:
        for ms in run_batch(i):
            ms = float(ms)
            if not (ms >= 0.0 and math.isfinite(ms)):
                raise RuntimeError(f"timer returned an invalid duration {ms!r} ms at iteration {i}")
            samples.append(ms)
            i += 1
        reason = stop.should_stop(samples, wall_clock_ms() - t0)
        if reason is not None:
            del samples[stop.max_runs:]
            break
    t1 = wall_clock_ms()
    return Measurement(
        samples_ms=tuple(samples),
        stats=Stats.from_samples(samples),
        stop_reason=reason,
        warmup_runs=warmed,
        loop_wall_ms=t1 - t0,
        warmup_wall_ms=t0 - w0,
    )


# --------------------------------------------------------------------------
# Holding the stream while the host enqueues (device time without launch overhead)
# --------------------------------------------------------------------------


#: The host's overhead per call is measured over this many calls, with the device held this long: a
#: launch-bound call enqueues in microseconds, so the calls finish enqueueing long before the hold ends
#: unless they wait for the device (a sync inside the call), and then no hold can help them.
OVERHEAD_PROBE_CALLS = 10
OVERHEAD_PROBE_HOLD_MS = 30.0


def host_overhead_ms(fn: Callable[[int], object], *, clock_ns: Callable[[], int], sync: Callable[[], None],
                     calls: int = OVERHEAD_PROBE_CALLS, hold: Callable[[], None] | None = None) -> float:
    """Host time of one call that does not wait for the device (Python and launch overhead), averaged
    over ``calls`` calls made back to back after a sync. With ``hold`` (a device spin that outlasts the
    enqueueing) the calls queue behind it, so the device's own time cannot leak into the figure when its
    queue pushes back: without one, an 8192^3 bf16 matmul on an H200 showed 5.8 ms of "host overhead"
    per 1.6 ms call; with one, 0.021 ms."""
    sync()
    if hold is not None:
        hold()
    started = clock_ns()
    for i in range(calls):
        fn(i)
    elapsed_ms = (clock_ns() - started) / 1e6 / calls
    sync()
    return elapsed_ms


def spin_cycles_per_ms(device: Any = None) -> float:
    """How many cycles of ``torch.cuda._sleep`` (a spin kernel) take one millisecond on ``device``."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)  # first launch outside the measurement
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / max(float(start.elapsed_time(end)), 1e-3)


def spin_hold(hold_ms: float, cycles_per_ms: float) -> Callable[[], None]:
    """A ``hold`` for :class:`CudaEventTimer`: a spin kernel of about ``hold_ms`` on the current stream."""
    import torch

    cycles = max(1, int(hold_ms * cycles_per_ms))
    return lambda: torch.cuda._sleep(cycles)


class HeldTimer(NamedTuple):
    """A CUDA event timer as the judge builds it, with what it found out about the call."""

    timer: CudaEventTimer
    host_overhead_ms: float  # host time per call, the device held (not waiting for it)
    hold_ms: float  # the spin per batch; 0 when the calls wait for the device


def held_event_timer(device: Any, flush: Callable[[], None] | None, fn_for_iteration: Callable[[int], object], *,
                     batch: int, clock_ns: Callable[[], int], sync: Callable[[], None],
                     cycles_per_ms: float | None = None) -> HeldTimer:
    """How the judge times on a GPU: events in batches of ``batch`` calls, the stream held by a spin of
    ``hold_for(overhead, batch)`` while the host enqueues each batch. The overhead is measured with the
    device held (see :func:`host_overhead_ms`). ``cycles_per_ms`` of the spin is measured if not given."""
    cycles = cycles_per_ms or spin_cycles_per_ms(device)
    overhead_ms = host_overhead_ms(fn_for_iteration, clock_ns=clock_ns, sync=sync,
                                   hold=spin_hold(OVERHEAD_PROBE_HOLD_MS, cycles))
    hold_ms = hold_for(overhead_ms, batch)
    timer = cuda_event_timer(device, flush, spin_hold(hold_ms, cycles) if hold_ms else None, batch=batch)
    return HeldTimer(timer, overhead_ms, hold_ms)


def hold_for(overhead_ms: float, calls: int = 1) -> float:
    """How long to hold the stream while the host enqueues ``calls`` calls whose host overhead,
    measured as :func:`held_event_timer` does, is ``overhead_ms`` each: twice that plus 20 us per call,
    at most 2 ms per call; none for calls that did not finish enqueueing within the probe's hold (they
    wait for the device, and a hold cannot help them). The overhead must be measured with the device
    held: a hold sized from a figure that includes device time leaves the GPU idle, and a power-limited
    kernel then runs at higher clocks (an 8192^3 bf16 matmul measured 15% faster behind an 8 ms hold
    per batch than back to back; docs/benchmarks.md)."""
    if overhead_ms * OVERHEAD_PROBE_CALLS >= OVERHEAD_PROBE_HOLD_MS:
        return 0.0
    return calls * min(2.0, 2 * overhead_ms + 0.02)


# --------------------------------------------------------------------------
# Roofline helpers
# --------------------------------------------------------------------------


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
