"""Watching the candidate while it is timed, from inside the timed batches (catalog rows 7, 8, 25).

A candidate can tell that it is being timed (the call stack, a call count, the phase), so the probes
alone cannot vouch for the timed calls. Two observations are made on the timed calls themselves, right
after each returns and before anything else of the candidate's runs:
- threads: every timed call, whether a Python thread is alive that was not when timing began (a count
  first, about 0.1 us; the names only when it changed); and when timing begins, any thread already running the
  candidate's own code (`running_candidate_code`: one started by an earlier call, which the count cannot see);
- streams (GPU): on the calls the judge chose secretly for this batch, the output is copied in the
  caller's stream order at once, and after the batch's device-wide synchronisation compared with the
  output then: work left running on another stream (not joined back) makes the two differ.
Both are claims of the candidate's process, like every observation made there (README: what the judge
trusts): they can fail a candidate, never clear one.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable

import torch

from kerneljudge.proc import tensorwire
from kerneljudge.proc.inputs import equal_bits


IDLE_PAUSE_S = 0.05  # how long threads in the candidate's code are watched with no call in flight
# first, this long for them to settle: a helper that handed a call its answer reaches its wait again (honest CPU time
# after the call's return, which the pause must not count)
SETTLE_S = 0.01


def running_candidate_code(source_file: str, pause_s: float = IDLE_PAUSE_S,
                           sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """The names of the threads, other than this one, with a frame of the candidate's file on their stack that used
    the CPU during a pause of `pause_s` with no call in flight: the candidate's code running outside the calls (a
    loop started at import or at an earlier call). A helper thread blocked between calls (on a queue, a lock) uses
    none and is left alone, as are the idle pool threads of runtimes, which hold no frame of the file."""
    names = {t.ident: t.name for t in threading.enumerate()}
    clocks = {}
    for ident, frame in sys._current_frames().items():
        while frame is not None and frame.f_code.co_filename != source_file:
            frame = frame.f_back
        if frame is not None and ident != threading.get_ident():
            clocks[ident] = _cpu_clock(ident)
    if not any(clock is not None for clock in clocks.values()):
        return []
    sleep(SETTLE_S)
    before = {ident: _cpu_ns(clock) for ident, clock in clocks.items()}
    sleep(pause_s)
    after = {ident: _cpu_ns(clock) for ident, clock in clocks.items()}
    return [names.get(ident, f"thread {ident}") for ident in clocks
            if before[ident] is not None and after[ident] is not None and after[ident] > before[ident]]


def _cpu_clock(ident: int) -> int | None:
    try:
        return time.pthread_getcpuclockid(ident)
    except OSError:  # (the thread ended)
        return None


def _cpu_ns(clock: int | None) -> int | None:
    """The CPU time a thread's clock says, None once the thread has ended."""
    if clock is None:
        return None
    try:
        return time.clock_gettime_ns(clock)
    except OSError:
        return None


class TimedWatch:
    def __init__(self, device: torch.device, source_file: str = ""):
        self.device = device
        self.threads_before = set(threading.enumerate())
        self.count_before = threading.active_count()
        # threads seen alive right after a timed call, not there before timing; or there, running candidate code
        # with no call in flight (a pause of IDLE_PAUSE_S, once per timing)
        self.threads: list[str] = running_candidate_code(source_file) if source_file else []
        self.chosen: set[int] = set()
        self.reads: dict[int, list[torch.Tensor]] = {}

    def start_batch(self, chosen: list[int]) -> None:
        self.chosen = set(chosen) if self.device.type == "cuda" else set()
        self.reads = {}

    def after_call(self, index: int, out: Any) -> None:
        if threading.active_count() != self.count_before:
            self.threads += [t.name for t in threading.enumerate()
                             if t not in self.threads_before and t.name not in self.threads]
        if index in self.chosen:
            self.reads[index] = [t.clone() for t in tensorwire.tensors_of(out)]

    def unjoined(self, outputs: dict[int, Any]) -> list[int]:
        """After the batch's synchronisation: the chosen calls whose output changed after the call returned."""
        return sorted(i for i, seen in self.reads.items()
                      if any(not equal_bits(a, b) for a, b in zip(seen, tensorwire.tensors_of(outputs.get(i)))))
