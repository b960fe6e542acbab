"""One device shared by several lanes: their checks run side by side, a timing runs alone.

Each lane on a device holds the device's gate while its evaluation uses it: shared for the stages
that run code there (starting the processes, build, check, probes), exclusive for those that time (the
reference's baselines, before the candidate is loaded; the candidate's timing). A lane that
asks for the timing waits until no other lane's stage is running, and stages that start meanwhile wait
for the timing to end (a waiting timing goes first, so it is never starved). So the stages of the next
candidates overlap with each other, and with nothing of a timing. The lane learns where its evaluation
is from the pipeline's progress events (`Holder.on_stage`), which the pipeline sends at the start of each
stage and before it takes the timing lock. When the evaluation's processes end ("closing"), a timing's hold
becomes a shared one at once: the other lanes' checks go on beside the ending of its processes (150-300 ms on
the H200: the referee's and the worker's exit, their CUDA contexts freed), a timing still waits for it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

from kerneljudge.progress import CLOSING

#: Stages of an evaluation that run nothing on the device.
HOST_ONLY = frozenset({"load"})
#: Stages that time: each runs alone on the device.
TIMED = frozenset({"baselines", "timing"})


class DeviceGate:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.condition = threading.Condition()
        self.sharing = 0
        self.timing = False
        self.timings_waiting = 0
        self.stopped = False  # the batch is stopping: nobody waits any more
        self.clock = clock

    def stop(self) -> None:
        with self.condition:
            self.stopped = True
            self.condition.notify_all()

    def share(self) -> float:
        """Wait for no timing (running or waiting); the seconds waited."""
        started = self.clock()
        with self.condition:
            while (self.timing or self.timings_waiting) and not self.stopped:
                self.condition.wait()
            self.sharing += 1
        return self.clock() - started

    def unshare(self) -> None:
        with self.condition:
            self.sharing -= 1
            self.condition.notify_all()

    def take(self) -> float:
        """Wait until the device is free; the seconds waited."""
        started = self.clock()
        with self.condition:
            self.timings_waiting += 1
            while (self.timing or self.sharing) and not self.stopped:
                self.condition.wait()
            self.timings_waiting -= 1
            self.timing = True
        return self.clock() - started

    def give_back(self) -> None:
        with self.condition:
            self.timing = False
            self.condition.notify_all()

    def share_after_timing(self) -> None:
        """The timing's hold becomes a shared one without a wait (a waiting timing still waits for it)."""
        with self.condition:
            self.timing = False
            self.sharing += 1
            self.condition.notify_all()


class Holder:
    """One evaluation's hold on a gate, moved along by its stages; `release` when the evaluation ends.
    `on_wait(seconds)` is told each wait (the lane gives it back to the worker's time limit)."""

    def __init__(self, gate: DeviceGate, on_wait: Callable[[float], None] = lambda seconds: None):
        self.gate = gate
        self.on_wait = on_wait
        self.stage: str | None = None
        self.held: str | None = None  # None, "shared" or "timing"

    def on_stage(self, stage: str) -> None:
        if stage == self.stage or stage in HOST_ONLY:
            return
        self.stage = stage
        if stage == CLOSING and self.held == "timing":
            self.gate.share_after_timing()
            self.held = "shared"
        elif stage in TIMED and self.held != "timing":
            self.release()
            self.on_wait(self.gate.take())
            self.held = "timing"
        elif stage not in TIMED and self.held != "shared":  # after the baselines, the build runs beside the others
            self.release()
            self.on_wait(self.gate.share())
            self.held = "shared"

    def release(self) -> None:
        if self.held == "shared":
            self.gate.unshare()
        elif self.held == "timing":
            self.gate.give_back()
        self.held = None
