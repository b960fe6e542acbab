"""The batch scheduler: a build pool feeding judging lanes, each lane taking the next built candidate
as soon as it is free (no waves: no lane waits for another's slowest candidate).

    jobs --(compiles C++/CUDA?)--> build pool (backend.build_slots threads) --+
        \\--------------------------(nothing to compile)------------------------+--> ready --> lane 1..N
                                                                                            |
    Finished (one per job, in the order they end) <------------------------------------------+

Jobs that compile nothing are ready at once, so the lanes start judging while the pool builds. Jobs
with one candidate source share one build (the same source is never built twice at once; the build
cache keys extensions by what they compile, so identical extensions in different sources hit too).
A build that fails in a way judging would repeat (a compile error, an unreadable file, a timeout) is the
job's result, without a lane; any other build failure goes to a lane, which says what happened on its
device. Everything runs through a `Backend` (backend.py); this module starts no process itself.

`run(jobs)` is an iterator over Finished; leaving it early (an exception such as Ctrl-C in the
consumer, or `close()`) stops the backend's builds and evaluations in flight within seconds. Results of
evaluations cut short by a stop are dropped, never reported: a rerun judges them again.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

from kerneljudge.batch.backend import Backend, Finished, Job, Lane
from kerneljudge.builder import BuildOutcome
from kerneljudge.pipeline import resolve_device
from kerneljudge.progress import ProgressEvent
from kerneljudge.records import Candidate, Result, decide_verdict

#: Build findings after which judging would only repeat the failure.
ENDS_AT_BUILD = frozenset({"compile-error", "candidate-invalid", "timeout"})
POLL_S = 0.2  # how often a waiting thread looks at the stop flag


@dataclass
class Status:
    """What the batch is doing now, for a display: per lane and in the build pool."""

    total: int
    started_s: float
    done: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: {"pass": 0, "fail": 0, "error": 0})
    lanes: dict[str, str] = field(default_factory=dict)  # lane -> "job id: stage: message" or "idle"
    building: dict[str, str] = field(default_factory=dict)  # job id -> what is built
    builds_queued: int = 0
    ready: int = 0  # built and waiting for a lane


class _Ready:
    """Built jobs waiting for a lane, in the order they became ready; closed when no more will come."""

    def __init__(self, clock: Callable[[], float]):
        self.items: deque[tuple[Job, float, float]] = deque()  # job, build_ms, ready since
        self.open_feeds = 0
        self.stopped = False
        self.condition = threading.Condition()
        self.clock = clock

    def put(self, job: Job, build_ms: float) -> None:
        with self.condition:
            self.items.append((job, build_ms, self.clock()))
            self.condition.notify()

    def feed_done(self) -> None:
        with self.condition:
            self.open_feeds -= 1
            self.condition.notify_all()

    def stop(self) -> None:
        with self.condition:
            self.stopped = True
            self.condition.notify_all()

    def take(self) -> tuple[Job, float, float] | None:
        """The next ready job (build_ms, waited_ms), or None when stopped or none will come."""
        with self.condition:
            while not self.stopped and not self.items and self.open_feeds > 0:
                self.condition.wait(POLL_S)
            if self.stopped or not self.items:
                return None
            job, build_ms, since = self.items.popleft()
            return job, build_ms, (self.clock() - since) * 1e3

    def __len__(self) -> int:
        return len(self.items)


class Scheduler:
    """Runs jobs on a backend. `on_change(status)` is called (from the scheduler's threads) whenever
    something starts or ends; `clock` is in seconds."""

    def __init__(self, backend: Backend, *, on_change: Callable[[Status], None] = lambda status: None,
                 clock: Callable[[], float] = time.monotonic):
        self.backend = backend
        self.on_change = on_change
        self.clock = clock
        self.status = Status(0, clock())
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    def stop(self) -> None:
        """End everything in flight (from any thread)."""
        if not self._stopping.is_set():
            self._stopping.set()
            self.backend.stop()

    def run(self, jobs: Sequence[Job]) -> Iterator[Finished]:
        jobs = list(jobs)
        self.status = Status(len(jobs), self.clock())
        out: queue.Queue = queue.Queue()
        ready = _Ready(self.clock)
        self.ready = ready
        groups: dict[str, list[Job]] = {}
        for job in jobs:
            if job.needs_build:
                groups.setdefault(job.sha256, []).append(job)
            else:
                ready.put(job, 0.0)
        builds: queue.Queue = queue.Queue()
        for group in groups.values():
            builds.put(group)
        self.status.builds_queued = len(groups)
        builders = min(self.backend.build_slots, len(groups))
        ready.open_feeds = builders
        threads = [threading.Thread(target=self._builder, args=(builds, ready, out), daemon=True,
                                    name=f"kj-build-{i}") for i in range(builders)]
        threads += [threading.Thread(target=self._lane, args=(lane, ready, out), daemon=True,
                                     name=f"kj-lane-{lane.name}") for lane in self.backend.lanes()]
        for thread in threads:
            thread.start()
        self._changed()
        remaining = len(jobs)
        try:
            while remaining and not self._stopping.is_set():
                try:
                    item = out.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                if isinstance(item, BaseException):
                    raise item
                remaining -= 1
                with self._lock:
                    self.status.done += 1
                    self.status.verdicts[item.result.verdict] += 1
                self._changed()
                yield item
        finally:
            ready.stop()
            if remaining:
                self.stop()
            for thread in threads:
                thread.join(timeout=5)

    # ---- the threads -------------------------------------------------------------------------------
    def _builder(self, builds: queue.Queue, ready: _Ready, out: queue.Queue) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    group = builds.get_nowait()
                except queue.Empty:
                    return
                first = group[0]
                with self._lock:
                    self.status.builds_queued -= 1
                    self.status.building[first.id] = "+".join(first.kinds)
                self._changed()
                started = self.clock()
                try:
                    outcome = self.backend.build(first)
                except BaseException as exc:  # noqa: BLE001 - a backend's own failure ends the batch
                    out.put(exc)
                    return
                build_ms = (self.clock() - started) * 1e3
                with self._lock:
                    self.status.building.pop(first.id, None)
                if self._stopping.is_set():
                    return
                ended = {f.code for f in outcome.findings if f.blocking} & ENDS_AT_BUILD
                for job in group:
                    if ended:
                        out.put(Finished(job, build_result(job, outcome, build_ms), None, build_ms, 0.0, 0.0))
                    else:
                        ready.put(job, build_ms)
                self._changed()
        finally:
            ready.feed_done()

    def _lane(self, lane: Lane, ready: _Ready, out: queue.Queue) -> None:
        while not self._stopping.is_set():
            self._set_lane(lane.name, "idle")
            taken = ready.take()
            if taken is None:
                self._set_lane(lane.name, "done")
                return
            job, build_ms, waited_ms = taken

            def observe(event: ProgressEvent, job_id: str = job.id) -> None:
                self._set_lane(lane.name, f"{job_id}: {event.text()}")

            started = self.clock()
            try:
                result = lane.judge(job, observe)
            except BaseException as exc:  # noqa: BLE001 - a usage error (no such device) ends the batch
                if not self._stopping.is_set():
                    out.put(exc)
                return
            if self._stopping.is_set():
                return  # cut short by the stop: judged again on the next run
            out.put(Finished(job, result, lane.name, build_ms, (self.clock() - started) * 1e3, waited_ms))

    def _set_lane(self, name: str, doing: str) -> None:
        with self._lock:
            self.status.lanes[name] = doing
            self.status.ready = len(self.ready)
        self._changed()

    def _changed(self) -> None:
        self.on_change(self.status)


def build_result(job: Job, outcome: BuildOutcome, build_ms: float) -> Result:
    """The result of a job whose build failed for good: the build's findings, nothing judged."""
    candidate = Candidate(path=job.solution, source="", sha256=job.sha256, kinds=job.kinds) if job.kinds else None
    return Result(verdict=decide_verdict(outcome.findings, ()), findings=outcome.findings, trials=(),
                  problem=job.problem_json, candidate=candidate.to_json() if candidate else {"path": str(job.solution)},
                  device={"type": resolve_device(job.options.device).split(":")[0]}, versions={},
                  protocol=job.options.protocol, build=outcome.build, stage_ms={"build": round(build_ms, 3)})
