"""One device shared by several lanes: their requests run side by side, a timing runs alone.

Each lane on a device holds the device's gate while its evaluation uses it: exclusive for the stages that
time (the reference's baselines, before the candidate is loaded; the candidate's timing); otherwise shared,
by each request its processes are sent (CUDA's start, the build's import, a check call, a probe's) until the
reply is taken (`Holder.admit`: a request's reply comes once the device is synchronised). A lane that asks
for the timing waits until no other lane's request is in flight, and requests sent meanwhile wait for the
timing to end (a waiting timing goes first, so it is never starved). So the next candidates' requests
overlap with each other and with nothing of a timing, and a timing waits for the requests in flight, not
for the other lanes' whole checks and probes (held by stage, a lane waited 1.4 s a candidate for the gate
at three lanes on the H200, fifteenth session). Between its requests a lane's processes run nothing of the
judge's on the device. The lane learns where its evaluation is from the pipeline's progress events
(`Holder.on_stage`), which the pipeline sends at the start of each stage and before it takes the timing
lock. When the evaluation's processes end ("closing") the lane holds the gate shared for the whole stage
(their exit frees their CUDA contexts: 150-300 ms on the H200), a timing's hold becoming a shared one at
once: the other lanes' requests go on beside it, a timing still waits for it.
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


#: What a device's gate can be doing, as `DeviceGate.spent_s` accounts its time.
STATES = ("timing", "draining", "shared", "idle")


class DeviceGate:
    """The gate of one device (module docstring). It accounts the seconds it spends in each of STATES: a lane
    timing; a timing waiting for the requests in flight (no new one goes, so the other lanes stall); requests in
    flight side by side; nothing (`spent_s`): where a batch's rate is bound by the timings, not by the lanes' own
    work, the first two show it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.condition = threading.Condition()
        self.sharing = 0
        self.timing = False
        self.timings_waiting = 0
        self.stopped = False  # the batch is stopping: nobody waits any more
        self.clock = clock
        self._spent = dict.fromkeys(STATES, 0.0)
        self._since = clock()
        self._freed_by: str | None = None  # what ended last while a timing waited (a hold, or another timing)
        self._waited_for: dict[str, float] = {}  # the timings' waits, by what ended last before each went

    def waited_for_s(self) -> dict[str, float]:
        """The seconds timings waited for the device, by what ended last before each went: a request's kind
        ("make-inputs", "ping", ...), "closing" (a lane's processes ending), "warm-up" (spares starting CUDA), or
        "timing" (another lane's): what to shorten where the timings' waits bound a batch's rate."""
        with self.condition:
            return dict(self._waited_for)

    def spent_s(self) -> dict[str, float]:
        """The seconds spent in each of STATES so far."""
        with self.condition:
            self._account()
            return dict(self._spent)

    def _account(self) -> None:
        """The time since the last change to the state it was in (called, under the lock, before each change)."""
        now = self.clock()
        state = "timing" if self.timing else "draining" if self.timings_waiting else \
            "shared" if self.sharing else "idle"
        self._spent[state] += now - self._since
        self._since = now

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
            self._account()
            self.sharing += 1
        return self.clock() - started

    def share_more(self) -> None:
        """One more request of a lane that shares the device already: no wait, even for a waiting timing. The
        lane may take the reply the timing waits for only after this request's (the referee's setup, sent
        before the worker's build and collected after it): waiting here would wait for itself."""
        with self.condition:
            self._account()
            self.sharing += 1

    def unshare(self, what: str = "request") -> None:
        """One hold ends; `what` it was (`waited_for_s`)."""
        with self.condition:
            self._account()
            self.sharing -= 1
            if self.timings_waiting and not self.sharing:
                self._freed_by = what
            self.condition.notify_all()

    def take(self) -> float:
        """Wait until the device is free; the seconds waited."""
        started = self.clock()
        with self.condition:
            self._account()
            self.timings_waiting += 1
            while (self.timing or self.sharing) and not self.stopped:
                self.condition.wait()
            self._account()
            self.timings_waiting -= 1
            self.timing = True
            waited = self.clock() - started
            if waited > 0 and self._freed_by is not None:
                self._waited_for[self._freed_by] = self._waited_for.get(self._freed_by, 0.0) + waited
            self._freed_by = None
        return waited

    def give_back(self) -> None:
        with self.condition:
            self._account()
            self.timing = False
            if self.timings_waiting:
                self._freed_by = "timing"
            self.condition.notify_all()

    def share_after_timing(self) -> None:
        """The timing's hold becomes a shared one without a wait (a waiting timing still waits for it)."""
        with self.condition:
            self._account()
            self.timing = False
            self.sharing += 1
            self.condition.notify_all()


class Holder:
    """One evaluation's hold on a gate, moved along by its stages and its requests; `release` when the
    evaluation ends. `on_wait(seconds)` is told each wait (the lane gives it back to the worker's time limit)."""

    def __init__(self, gate: DeviceGate, on_wait: Callable[[float], None] = lambda seconds: None):
        self.gate = gate
        self.on_wait = on_wait
        self.stage: str | None = None
        self.held: str | None = None  # the evaluation's own hold: None, "shared" (closing) or "timing"
        self.requests: dict[int, str] = {}  # its requests in flight, each sharing the gate (`admit`), and their kinds
        self._sent = 0

    def on_stage(self, stage: str) -> None:
        if stage == self.stage or stage in HOST_ONLY:
            return
        self.stage = stage
        if stage == CLOSING:
            if self.held == "timing":
                self.gate.share_after_timing()
            elif self.held is None:
                self._share()
            self.held = "shared"
        elif stage in TIMED and self.held != "timing":
            self.release()
            self.on_wait(self.gate.take())
            self.held = "timing"
        elif stage not in TIMED and self.held is not None:
            self.release()  # after a timing, each request shares the gate again

    def admit(self, what: str = "request") -> Callable[[], None]:
        """A request (of kind `what`) of the evaluation's processes is about to be sent: unless the evaluation
        holds the gate, wait to share it (not while another of its requests is in flight:
        `DeviceGate.share_more`). Returns what to call when the reply is taken (or the request failed)."""
        if self.held is not None:
            return _nothing
        self._share()
        self._sent += 1
        request = self._sent
        self.requests[request] = what

        def replied() -> None:
            if request in self.requests:  # not dropped by `release` meanwhile
                self.gate.unshare(self.requests.pop(request))
        return replied

    def _share(self) -> None:
        """Share the gate: at once while a request of the evaluation's is in flight, else after waiting."""
        if self.requests:
            self.gate.share_more()
        else:
            self.on_wait(self.gate.share())

    def release(self) -> None:
        """Let go of every hold: the evaluation's own, and its requests' (a timing does not wait for its own)."""
        for what in self.requests.values():
            self.gate.unshare(what)
        self.requests.clear()
        if self.held == "shared":
            self.gate.unshare(CLOSING)
        elif self.held == "timing":
            self.gate.give_back()
        self.held = None


def _nothing() -> None:
    pass
