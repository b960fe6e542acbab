"""Holding the stream while the host enqueues: the timer the judge used before the referee split.

Until the judge split into judge, candidate worker and referee, it timed a GPU call with CUDA events in
batches and a spin kernel (`torch.cuda._sleep`, as NVBench's blocking kernel) holding the stream while
the host enqueued each batch, so the intervals held the calls' device time and not the host's launch
overhead, which it reported separately. The judge no longer does this (its timed side is
src/kerneljudge/proc/timed.py), so the machinery lives here, for the measurement scripts that studied
it (timer_check.py, timer_variants.py, hold_effect.py, seed_table.py; results in docs/benchmarks.md).
Import it from a script in this folder (`from stream_hold import ...`); torch is imported lazily.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

from kerneljudge import timing

#: The host's overhead per call is measured over this many calls, with the device held this long: a
#: launch-bound call enqueues in microseconds, so the calls finish enqueueing long before the hold ends
#: unless they wait for the device (a sync inside the call), and then no hold can help them.
OVERHEAD_PROBE_CALLS = 10
OVERHEAD_PROBE_HOLD_MS = 30.0


class HeldEventTimer:
    """A :class:`kerneljudge.timing.CudaEventTimer` that runs ``hold`` once per batch, after the batch's
    first flush and before its first ``start.record()``: while the device runs it, the host enqueues
    the batch. The hold rides on the timer's flush, so the order is the timer's own: before, flush,
    hold, start, call, end."""

    def __init__(self, device: Any, flush: Callable[[], None] | None, hold: Callable[[], None], *,
                 batch: int = 1) -> None:
        self._flush, self._hold, self._armed = flush, hold, False
        self._timer = timing.cuda_event_timer(device, self._flush_then_hold, batch=batch)
        self.batch = batch

    def _flush_then_hold(self) -> None:
        if self._flush is not None:
            self._flush()
        if self._armed:
            self._armed = False
            self._hold()

    def time_call(self, fn: Callable[[], object]) -> float:
        return self.time_calls([fn])[0]

    def time_calls(self, fns: Sequence[Callable[[], object]],
                   before: Callable[[int], None] | None = None) -> list[float]:
        self._armed = True
        try:
            return self._timer.time_calls(fns, before)
        finally:
            self._armed = False


def held_cuda_event_timer(device: Any, flush: Callable[[], None] | None, hold: Callable[[], None] | None,
                          *, batch: int = 1) -> timing.CallTimer:
    """Event timer in batches of ``batch``, the stream held by ``hold`` per batch (none: a plain one)."""
    if hold is None:
        return timing.cuda_event_timer(device, flush, batch=batch)
    return HeldEventTimer(device, flush, hold, batch=batch)


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
    """A ``hold`` for :class:`HeldEventTimer`: a spin kernel of about ``hold_ms`` on the current stream."""
    import torch

    cycles = max(1, int(hold_ms * cycles_per_ms))
    return lambda: torch.cuda._sleep(cycles)


class HeldTimer(NamedTuple):
    """A CUDA event timer as the judge built it, with what it found out about the call."""

    timer: timing.CallTimer
    host_overhead_ms: float  # host time per call, the device held (not waiting for it)
    hold_ms: float  # the spin per batch; 0 when the calls wait for the device


def held_event_timer(device: Any, flush: Callable[[], None] | None, fn_for_iteration: Callable[[int], object], *,
                     batch: int, clock_ns: Callable[[], int], sync: Callable[[], None],
                     cycles_per_ms: float | None = None) -> HeldTimer:
    """How the judge timed on a GPU: events in batches of ``batch`` calls, the stream held by a spin of
    ``hold_for(overhead, batch)`` while the host enqueues each batch. The overhead is measured with the
    device held (see :func:`host_overhead_ms`). ``cycles_per_ms`` of the spin is measured if not given."""
    cycles = cycles_per_ms or spin_cycles_per_ms(device)
    overhead_ms = host_overhead_ms(fn_for_iteration, clock_ns=clock_ns, sync=sync,
                                   hold=spin_hold(OVERHEAD_PROBE_HOLD_MS, cycles))
    hold_ms = hold_for(overhead_ms, batch)
    timer = held_cuda_event_timer(device, flush, spin_hold(hold_ms, cycles) if hold_ms else None, batch=batch)
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
