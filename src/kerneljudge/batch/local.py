"""The local backend: builds in worker processes on this host's CPUs, judging lanes on the devices.

Each lane judges through `pipeline.evaluate` with its own WorkerPool, so every candidate gets a fresh
worker and referee (a crash, a hang past the time limit or a poisoned CUDA context ends that
candidate only; the lane's next candidate starts clean). The lanes of one device (one per GPU by
default, `per_gpu` more; CPU lanes all share "cpu") share its gate (gate.py): their requests run side by
side, a timing runs alone; and its memo (stages/context.DeviceMemo: a problem's baselines are measured, and
its range probes planned, once per device and run). Timing also holds the device's timing lock (devicelock.py)
against other judges.

The next candidate's processes are pre-started while the current one is judged: on a GPU lane as soon
as the current candidate's worker has answered. Once they have imported torch, a thread of the lane has them do
what of taking the GPU runs on the host alone (`protocol.Prepare`: the driver's start, imports), then sends them
their first ping (CUDA's start: 0.75 s on an idle H100, half of it host work before the driver's start was
prepared; the `worker` stage it was the most of took 3.4-4.2 s of a lane's candidate beside four other lanes) while
sharing the device's gate, as any request does, so nothing of them runs on the GPU while a candidate is timed, and
timings wait only for the part that does; the lane waits for its spares' start to end
before each timing, the reference's and the candidate's (`WorkerPool.settle`), so none of them competes for the host's cores then either (on
the 16-core H200 host that made no difference that showed; on hosts with a few cores per GPU it would;
another lane's spares may still be starting). While a lane times, the workers of the device's other lanes are
stopped (`WorkerProcess.frozen`): they have no request in flight then (the gate), but candidate code already
loaded in them (a thread started at import) could run beside the timing and slow it, which in a batch scored
side by side (an RL group) would be a candidate's gain. On a CPU lane spares start only after an evaluation, as
WorkerPool does (a process importing torch would compete with a host-clock timing); with several CPU
lanes, another lane's spare may still be importing torch while a lane times.

Builds run in the devices' toolchain without touching a GPU: the target architecture is asked once of
a worker on the first GPU (or given with --arch), and builders run as CPU workers with that
architecture, so their cache keys are the ones the lanes' imports look up.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import weakref
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Sequence

from kerneljudge import builder, pipeline, protocol
from kerneljudge.batch.backend import Job
from kerneljudge.batch.gate import HOST_ONLY, TIMED, DeviceGate, Holder
from kerneljudge.isolation import WORKER, Frozen, WorkerFailure, WorkerPool, WorkerProcess, first_ping
from kerneljudge.options import Options, WorkerOptions
from kerneljudge.progress import ProgressEvent, ProgressObserver
from kerneljudge.records import Result
from kerneljudge.stages.context import DeviceMemo


WARM_UP = "warm-up"  # the spares' first pings, as the device's gate names their hold (gate.waited_for_s)
# Each spare's Prepare (the driver's start: 0.2-0.8 s on an H100) may take this long, counted from when its reply is
# awaited; past it the spare is stopped and the next evaluation starts its own (the lane's timings wait for the
# preparation, `settle`, not for a hang)
PREPARE_LIMIT = (30.0, "a spare's preparation of the GPU")


class _Tracked:
    """The processes started for a lane or the build pool, so that `stop` can end them from another thread."""

    def __init__(self):
        self.live: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()
        self.stopped = False
        self.lock = threading.Lock()

    def add(self, process: WorkerProcess) -> WorkerProcess:
        with self.lock:
            if self.stopped:
                process.dead = True  # its first call fails at once
            self.live.add(process)
        return process

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            processes = list(self.live)
        for process in processes:
            process.kill()


class _LanePool(WorkerPool):
    """A WorkerPool whose processes in use can be stopped (Ctrl-C) and that starts no spares once stopped; on a
    GPU lane its spares take the device ahead of their evaluation, each while sharing the device's gate (`warm`)."""

    def __init__(self, tracked: _Tracked):
        super().__init__()
        self.tracked = tracked
        self.admit: Callable[[str], Callable[[], None]] | None = None  # the judged evaluation's (Holder.admit)
        self.importing = threading.Lock()  # held while the warm-up waits for the spares' start: imports, Prepare
        self.warming: threading.Thread | None = None
        self.warmed: list[WorkerProcess] = []  # the spares the warm-up has (some out of `ready` while it asks them)
        self.closing = False

    def take(self, options: WorkerOptions, module: str = WORKER, device: str | None = None) -> WorkerProcess:
        process = self.tracked.add(super().take(options, module, device))
        process.admit = self.admit
        return process

    def fill(self, options: WorkerOptions | None = None, device: str | None = None) -> None:
        """Spares are not sent to the device at once (a CUDA start could fall in another lane's timing): `warm`.
        None are added during a warm-up (its spares, out of `ready` while asked, come back to it)."""
        warming = self.warming
        if not self.tracked.stopped and not (warming is not None and warming.is_alive()):
            super().fill(options)

    def warm(self, options: WorkerOptions, device: str, gate: DeviceGate) -> None:
        """On a thread: once the spares have imported torch and done what of taking `device` runs on the host
        alone (protocol.Prepare: not while sharing the gate, so no timing waits for it; the lane's own timings
        wait for it as for their imports, `settle`), each takes `device` (its first ping: CUDA's start, off the
        next evaluation's path: module docstring) while sharing `gate`, so never beside a timing; the
        evaluation's own first ping then finds the device taken. `ready_for_next` waits for it to end. The spares'
        pings go side by side in one hold: one at a time, each in a hold of its own, the timings waited no less and
        the rate did not move (thirty-second session, H100: a timing's wait for the requests in flight 0.18-0.34 s a
        candidate in five batches, against 0.23-0.24 s in two; the two processes' starts overlap)."""
        with self._lock:
            self.warmed = [p for ready in self.ready.values() for p in ready if p.first_device is None]
        if self.warmed:
            self.warming = threading.Thread(target=self._warm, args=(options, device, gate), daemon=True,
                                            name="kerneljudge-warm")
            self.warming.start()

    def _warm(self, options: WorkerOptions, device: str, gate: DeviceGate) -> None:
        taken: list[WorkerProcess] = []
        try:
            with self.importing:  # their start: the imports, then what of taking the device runs on the host
                super().settle()
                with self._lock:  # out of the pool while they are asked (as in `settle`)
                    spares = [p for p in self.warmed if p in self.ready[p.module] and not self.closing]
                    for spare in spares:
                        self.ready[spare.module].remove(spare)
                spares = self._asked(spares, lambda spare: protocol.Prepare(device), PREPARE_LIMIT)
            if not spares:
                return
            gate.share()
            try:
                for spare in self._asked(spares, lambda spare: first_ping(options, device, spare.module)):
                    spare.first_device = device
                    taken.append(spare)
            finally:
                gate.unshare(WARM_UP)
        finally:  # whatever ended it: each of its spares back in the pool, or ended
            with self._lock:
                lost = [p for p in self.warmed if p not in self.ready[p.module]]
                for spare in taken:
                    if not self.closing:
                        self.ready[spare.module].append(spare)
                        lost.remove(spare)
                self.warmed = []
            for spare in lost:  # killed first: closing waits for a live one to end
                spare.kill()
                spare.close()

    def _asked(self, spares: list[WorkerProcess], request_for: Callable[[WorkerProcess], protocol.Request],
               limit: tuple[float, str] | None = None) -> list[WorkerProcess]:
        """The spares that answered their request (within `limit`, where given), all sent at once (as an
        evaluation starts its processes); one that was stopped meanwhile, died or took too long is left out (the
        next evaluation starts its own)."""
        sent = []
        for spare in spares if not self.tracked.stopped else ():
            try:
                sent.append((spare, spare.submit(request_for(spare))))
            except WorkerFailure:
                pass
        answered = []
        for spare, pending in sent:
            try:
                spare.collect(pending, limit=limit)
            except WorkerFailure:
                continue
            answered.append(spare)
        return answered

    def settle(self, clock: Callable[[], float] = time.monotonic) -> float:
        """As WorkerPool's, the warm-up's wait for the spares' start included (their imports, then their Prepare:
        a spare it asks is not in `ready`)."""
        started = clock()
        with self.importing:
            super().settle(clock)
        return clock() - started

    def ready_for_next(self) -> float:
        """Wait for the warm-up to end (its spares back in the pool for the next evaluation); the seconds waited."""
        started = time.monotonic()
        warming, self.warming = self.warming, None
        if warming is not None:
            warming.join()
        return time.monotonic() - started

    def close(self) -> None:
        """Spares never ran candidate code: killed, not waited for (one still importing torch would not
        see its channel close for seconds); the warm-up's too, which then sends none to the device."""
        with self._lock:
            self.closing = True
            for spare in [*(p for ready in self.ready.values() for p in ready), *self.warmed]:
                spare.kill()
        self.ready_for_next()
        super().close()


class _Neighbours:
    """The workers of the device's other lanes, stopped while a lane times (`stop`, until `go`). One that kept
    running or ran meanwhile is told to its own evaluation (`WorkerProcess.ran_while_stopped`: `tampering`
    there); the time stopped is not its worker's."""

    def __init__(self, lanes: "list[LocalLane]"):
        self.lanes = lanes
        self.stopped: ExitStack | None = None
        self.seen: list[tuple[WorkerProcess, Frozen]] = []

    def stop(self) -> None:
        if self.stopped is not None:
            return
        self.stopped = ExitStack()
        for lane in self.lanes:
            with lane.tracked.lock:  # its thread adds to it
                processes = list(lane.tracked.live)
            for process in processes:
                if process.role == "worker" and process.process is not None and not process.dead and \
                        process.process.poll() is None:  # one that ended (its evaluation closed) has nothing to stop
                    self.seen.append((process, self.stopped.enter_context(process.frozen())))

    def go(self) -> None:
        """Continue them; one that kept running or ran while stopped is told to its own evaluation (tampering)."""
        if self.stopped is not None:
            stopped, self.stopped = self.stopped, None
            stopped.close()
            for process, seen in self.seen:
                process.ran_while_stopped.extend(seen.running or seen.ran)
            self.seen = []


class LocalLane:
    """Judges on one local device ("cuda:1", or "cpu"), sharing it with the device's other lanes through
    `gate` (gate.py) and what they work out once per problem through `memo` (the baselines, the range plans)."""

    def __init__(self, name: str, device: str, gate: DeviceGate, memo: DeviceMemo):
        self.name = name
        self.device = device
        self.gate = gate
        self.memo = memo
        self.tracked = _Tracked()
        self.pool = _LanePool(self.tracked)
        self.prestart = device.startswith("cuda")
        self.neighbours: list[LocalLane] = []  # the device's other lanes (LocalBackend sets them)

    def judge(self, job: Job, on_progress: ProgressObserver) -> Result:
        options = job.options.replace(device=self.device, store_path=None)
        waits_ms = {"gate-wait": 0.0, "spares-wait": 0.0}

        def waited(what: str, seconds: float) -> None:
            waits_ms[what] += seconds * 1e3
            self._not_counted(seconds)

        waited("spares-wait", self.pool.ready_for_next())  # (its spares' warm-up, mostly long done)
        holder = Holder(self.gate, on_wait=lambda seconds: waited("gate-wait", seconds))
        self.pool.admit = holder.admit
        started = {"done": False, "settled": set()}
        neighbours = _Neighbours(self.neighbours)

        def observe(event: ProgressEvent) -> None:
            if self.prestart and event.stage in TIMED and event.stage not in started["settled"]:
                started["settled"].add(event.stage)  # no spare still importing torch beside a timing (docstring)
                waited("spares-wait", self.pool.settle())
            if event.stage not in TIMED and event.stage not in HOST_ONLY:
                neighbours.go()  # continued before the gate lets their requests go
            holder.on_stage(event.stage)
            if event.stage in TIMED:
                neighbours.stop()
            if self.prestart and not started["done"] and event.stage == "build":
                started["done"] = True
                self.pool.fill(options.worker_options())  # the next candidate's processes, while this one builds
                self.pool.warm(options.worker_options(), self.device, self.gate)
            on_progress(event)

        try:
            result = pipeline.evaluate(job.problem, job.solution, options, verb=job.verb, pool=self.pool,
                                       on_progress=observe, memo=self.memo)
        finally:
            try:
                neighbours.go()
            finally:
                self.pool.admit = None
                holder.release()
        # the lane's waits are this candidate's time on the lane too (the batch's accounts: benchmarks/)
        return dataclasses.replace(result, stage_ms={**result.stage_ms, **{k: round(v, 3) for k, v in waits_ms.items()}})

    def _not_counted(self, waited_s: float) -> None:
        """Time spent waiting for the device's other lanes is not the candidate's (its worker's time limit)."""
        for process in list(self.tracked.live):
            if process.process is not None and not process.dead:
                process.extend_deadline(waited_s)

    def stop(self) -> None:
        self.gate.stop()
        self.tracked.stop()

    def close(self) -> None:
        self.pool.close()


class LocalBackend:
    """Builds on `build_slots` CPU workers; lanes on `devices` (one name each: cuda:0, cuda:1, or cpu)."""

    def __init__(self, devices: Sequence[str], options: Options, *, build_slots: int):
        self.options = options
        self.build_slots = max(1, build_slots)
        gates = {device: DeviceGate() for device in devices}
        memos = {device: DeviceMemo() for device in devices}
        self._lanes = [LocalLane(_lane_name(devices, i), device, gates[device], memos[device])
                       for i, device in enumerate(devices)]
        for lane in self._lanes:
            lane.neighbours = [other for other in self._lanes if other.gate is lane.gate and other is not lane]
        self.gpu = next((d for d in devices if d.startswith("cuda")), None)
        self.tracked = _Tracked()
        self._arch: str | None = options.arch
        self._arch_lock = threading.Lock()

    def lanes(self) -> Sequence[LocalLane]:
        return self._lanes

    def device_seconds(self) -> dict[str, dict[str, float]]:
        gates = {lane.device: lane.gate for lane in self._lanes}
        return {device: {f"{state}_s": round(seconds, 3) for state, seconds in gate.spent_s().items()}
                for device, gate in gates.items()}

    def build(self, job: Job) -> builder.BuildOutcome:
        options = job.options.replace(arch=self._target_arch(job.options))
        return builder.build_one(job.solution, options, "cpu", spawn=lambda o: self.tracked.add(WorkerProcess(o)))

    def _target_arch(self, options: Options) -> str | None:
        """The GPUs' architecture for CUDA builds (asked once of a worker on the first GPU), else None."""
        with self._arch_lock:
            if self._arch is None and self.gpu is not None:
                try:
                    with self.tracked.add(WorkerProcess(options.worker_options())) as worker:
                        hello = worker.call(protocol.Ping(self.gpu))
                    self._arch = (hello.get("device") or {}).get("capability")
                except WorkerFailure:
                    pass
            return self._arch

    def stop(self) -> None:
        self.tracked.stop()
        for lane in self._lanes:
            lane.stop()

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()



def _lane_name(devices: Sequence[str], i: int) -> str:
    """cuda:1; with several lanes on a GPU cuda:1#2; CPU lanes cpu:0, cpu:1, ..."""
    device = devices[i]
    if device == "cpu":
        return f"cpu:{i}"
    same = [k for k, d in enumerate(devices) if d == device]
    return device if len(same) == 1 else f"{device}#{same.index(i)}"


def local_devices(device: str, lanes: int | None, per_gpu: int = 1, environ: dict[str, str] | None = None,
                  gpus_folder: Path = Path("/proc/driver/nvidia/gpus")) -> list[str]:
    """The lanes' devices: `cuda:K` as given; on `cuda`, `lanes` GPUs (default: every visible one) as
    cuda:0..; `per_gpu` lanes on each GPU; on the CPU, `lanes` CPU lanes (default 1), all "cpu". Lanes on
    one device share it through its gate (gate.py): their timings run alone."""
    if device.startswith("cuda:"):
        return [device] * per_gpu
    if device == "cuda":
        visible = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES")
        count = len([v for v in visible.split(",") if v.strip()]) if visible is not None else \
            len(list(gpus_folder.glob("*")))
        return [f"cuda:{i}" for i in range(lanes or max(1, count)) for _ in range(per_gpu)]
    return ["cpu"] * (lanes or 1)
