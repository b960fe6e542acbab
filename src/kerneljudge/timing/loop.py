"""The one measurement loop, :func:`measure`, and its result, :class:`Measurement`.

There is exactly ONE measurement loop.  Host timing, CUDA event timing and
CUDA-graph timing differ only in the :class:`~kerneljudge.timing.timers.CallTimer`
passed to it, so a fix to the loop (warm-up, stop rule, bookkeeping) applies
to every mode.  Results keep their raw samples (:attr:`Measurement.samples_ms`)
next to the summary (:class:`~kerneljudge.timing.stats.Stats`) so a judge can
re-analyse or audit a number later.  The wall clock that enforces the budget
is a parameter (``wall_clock_ms``); :func:`perf_counter_ms` is the real one.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from kerneljudge.timing.stats import Stats, StopRule, _check_number, _json_number
from kerneljudge.timing.timers import CallTimer, IterationCall, time_calls


def perf_counter_ms() -> float:
    """Monotonic wall clock in ms, for callers to pass as ``wall_clock_ms``.

    Provided as a convenience; :func:`measure` never uses it implicitly.
    """
    return time.perf_counter_ns() / 1e6


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
    on_measuring: Callable[[], None] | None = None,
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

    A timer may answer ``None`` for a call it ran as a check rather than a
    measurement (the judge's watched calls on a GPU, whose inputs are written
    right before them): the call is not a sample.  The loop ends with one
    sample at least, whatever the budget.

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
    if on_measuring is not None:  # the warm-up is over (a caller that keeps per-batch figures resets here)
        on_measuring()
    t0 = wall_clock_ms()

    samples: list[float] = []
    i = 0
    while True:
        for ms in run_batch(i):
            i += 1
            if ms is None:
                continue
            ms = float(ms)
            if not (ms >= 0.0 and math.isfinite(ms)):
                raise RuntimeError(f"timer returned an invalid duration {ms!r} ms at iteration {i - 1}")
            samples.append(ms)
        reason = stop.should_stop(samples, wall_clock_ms() - t0) if samples else None  # one sample at least
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

