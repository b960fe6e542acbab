"""Timers: each times one call (or a batch of calls) and returns milliseconds.

Host timing, CUDA event timing and CUDA-graph timing differ only in the
:class:`CallTimer` handed to :func:`kerneljudge.timing.loop.measure`; the
clock (``clock_ns``) or the events (``event_factory``) are parameters, so
tests pass fakes.

* Timed region: flush work must not be inside the interval.  With CUDA events
  the flush is enqueued before ``start.record()``, so the GPU timestamps
  exclude it; a side benefit is that the host has time to enqueue the kernel
  while the flush runs, so the launch latency is hidden (as in do_bench).
* Launch-bound kernels: with per-call synchronisation their time is dominated
  by launch overhead.  :class:`CudaGraphTimer` replays a captured graph of
  several unrolled calls so the per-call GPU time can be seen (as in
  ``triton.testing.do_bench_cudagraph``).

torch is imported lazily, by the helpers that wire the timers to a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from kerneljudge.timing.stats import _check_number


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
        batch: int = 1,
    ) -> None:
        for name, value in (("calls_per_fn", calls_per_fn), ("batch", batch)):
            _check_number(name, value, integer=True)
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        self._events = [(event_factory(), event_factory()) for _ in range(batch)]
        self._flush = flush
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
        for fn, (start, end) in zip(fns, self._events):
            if before is not None:
                before(fn.index)
            if self._flush is not None:
                self._flush()
            start.record()
            fn()
            end.record()
        self._events[len(fns) - 1][1].synchronize()
        return [float(start.elapsed_time(end)) / self._calls_per_fn for start, end in self._events[: len(fns)]]


def cuda_event_timer(device: Any = None, flush: Callable[[], None] | None = None, *,
                     batch: int = 1) -> CudaEventTimer:
    """:class:`CudaEventTimer` wired to ``torch.cuda.Event(enable_timing=True)``.

    Events record on the current stream of the *current* device, so ``device``
    must be the current device; we refuse a mismatch instead of silently
    timing the wrong GPU.
    """
    import torch

    _require_current_cuda_device(torch, device)
    return CudaEventTimer(lambda: torch.cuda.Event(enable_timing=True), flush, batch=batch)


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

