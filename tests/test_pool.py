"""Pre-started workers: every evaluation still gets a fresh process, and the spare is started ahead."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest

from conftest import CANDIDATES, SEED

from kerneljudge import api, protocol
from kerneljudge.isolation import REFEREE, WORKER, WorkerPool, WorkerProcess


def test_pool_hands_out_fresh_pre_started_workers(fast):
    options = fast.worker_options()  # what an evaluation asks for (its sandbox's writable caches)
    with WorkerPool() as pool:
        first = pool.take(options)
        assert first.process is None and not pool.ready[WORKER]  # nothing was waiting: started on use
        pool.fill(options)  # what an evaluation does when it ends
        spare, referee = pool.ready[WORKER][0], pool.ready[REFEREE][0]
        assert spare.process is not None and spare.process.poll() is None  # started ahead, alive
        assert referee.module == REFEREE and referee.process.poll() is None  # a referee is kept ready too
        second = pool.take(options)
        assert second is spare and not pool.ready[WORKER]  # handed out; no new one during the evaluation
        with pool.take(options, REFEREE) as taken:
            assert taken is referee
        pool.fill(options)
        third = pool.ready[WORKER][0]
        assert third is not spare
    assert third.process.poll() is not None or third.process.wait(timeout=10) is not None  # closed with the pool
    with WorkerPool() as pool:  # a spare started for another sandbox (writable caches, layers) is not used
        pool.fill(options)
        other = pool.take(fast.replace(cache_dir=fast.cache_dir / "other").worker_options())
        assert other.process is None and not pool.ready[WORKER]
        pool.fill(options)  # nor one whose memory cgroup was made for another limit
        capped = pool.take(fast.replace(worker={"memory_limit_mb": 1500}).worker_options())
        assert capped.process is None and not pool.ready[WORKER]
    with first, second:
        assert first.call(protocol.Ping("cpu"))["device"]["type"] == "cpu"
        assert second.call(protocol.Ping("cpu"))["device"]["type"] == "cpu"
        assert first.process.pid != second.process.pid


def test_spares_take_the_device_ahead_and_one_for_another_device_is_not_used(fast):
    """Given the next evaluation's likely device, each spare is sent its first ping at once (on a GPU, CUDA's
    start); the evaluation's own ping takes that answer first. A spare that took another device is not
    handed out (a CPU run's memory limit would bind a process that started CUDA)."""
    options = fast.worker_options()
    with WorkerPool() as pool:
        pool.fill(options, "cpu")
        spare, referee = pool.ready[WORKER][0], pool.ready[REFEREE][0]
        assert spare.pending is not None and spare.pending.op == "ping" and spare.first_device == "cpu"
        elsewhere = pool.take(options, WORKER, "cuda:0")
        assert elsewhere is not spare and elsewhere.process is None and not pool.ready[WORKER]
        assert spare.process.poll() is not None or spare.process.wait(timeout=10) is not None  # closed, not kept
        with pool.take(options, REFEREE, "cpu") as taken:
            assert taken is referee
            assert taken.call(protocol.Ping("cpu"))["device"]["type"] == "cpu"  # the first answer taken first
            assert taken.pending is None


def test_evaluations_through_a_pool_never_share_a_process(fast):
    good = CANDIDATES / "core" / "correct.py"
    crash = CANDIDATES / "isolation" / "segfault.py"
    with WorkerPool() as pool:
        results = [api.check(SEED, path, fast, pool=pool) for path in (crash, good, good)]
    assert [r.verdict for r in results] == ["error", "pass", "pass"]
    assert results[0].findings and any(f.code == "worker-crashed" for f in results[0].findings)


def test_settle_waits_for_the_spares_to_answer_and_drops_a_dead_one(fast):
    options = fast.worker_options()
    with WorkerPool() as pool:
        pool.fill(options)
        spare, referee = pool.ready[WORKER][0], pool.ready[REFEREE][0]
        os.kill(referee.process.pid, signal.SIGKILL)
        referee.process.wait(timeout=10)
        pool.settle()
        assert pool.ready[WORKER] == [spare] and pool.ready[REFEREE] == []  # the dead one is gone
        assert spare.process.poll() is None  # the live one answered and is still the spare handed out next
        assert pool.take(options) is spare


def test_a_prestarting_lane_waits_for_its_spares_and_stops_its_neighbours_before_the_timing(fast, monkeypatch):
    """A GPU lane starts the next candidate's processes while this one is judged; one still importing torch
    beside the timing inflated the candidate's host time per call (H200). The lane settles them before each
    stage that times, and sends them to the device (their first ping: CUDA's start) from a thread of its own,
    each while sharing the device's gate, never beside a timing. While it times, the workers of the lanes
    sharing its device are stopped (a thread a candidate started at import could run beside the timing and slow
    it), and continued before the gate lets any of their requests go; one that ran while stopped is told to its
    own evaluation."""
    from contextlib import contextmanager

    from kerneljudge.isolation import Frozen

    from kerneljudge.batch.backend import Job
    from kerneljudge.batch.gate import DeviceGate
    from kerneljudge.batch.local import LocalLane
    from kerneljudge.stages.context import DeviceMemo

    gate = DeviceGate()
    lane, other = LocalLane("cpu:0", "cpu", gate, DeviceMemo()), LocalLane("cpu:1", "cpu", gate, DeviceMemo())
    lane.prestart = True  # as on a GPU lane
    lane.neighbours = [other]
    plain_share, shares, warmed = gate.share, [], []

    def share():
        if threading.current_thread().name == "kerneljudge-warm":
            waited = plain_share()
            warmed.append((gate.timing, gate.timings_waiting))  # as the spares' pings go out
            return waited
        shares.append((stages or ["-"])[-1])
        return plain_share()

    monkeypatch.setattr(gate, "share", share)
    plain_submit, asked = WorkerProcess.submit, []

    def submit(process, request, blobs=()):
        if threading.current_thread().name == "kerneljudge-warm":
            # whether the warm-up shared the gate yet, and whether it held the spares' start (the lane's timings
            # wait for that: `settle`)
            asked.append((request.op, process.module, bool(warmed), lane.pool.importing.locked()))
        return plain_submit(process, request, blobs)

    monkeypatch.setattr(WorkerProcess, "submit", submit)
    stages: list[str] = []
    settled: list[tuple[str, int]] = []

    def settle():
        with lane.pool._lock:  # the lane's spares: waiting in the pool, or out of it while the warm-up asks them
            spares = {id(p) for p in [*lane.pool.ready[WORKER], *lane.pool.warmed] if p.module == WORKER}
        settled.append((stages[-1], len(spares)))
        return 0.0

    monkeypatch.setattr(lane.pool, "settle", settle)
    seen: list[tuple[str, bool]] = []

    class Running:
        def poll(self):
            return None

    class Neighbour:
        """The other lane's worker as the lane sees it (a stand-in: its stop and start are recorded; its
        process 4242 keeps running through the first stop, as one continued by another would)."""
        role, process, dead = "worker", Running(), False

        def __init__(self):
            self.ran_while_stopped: list[int] = []

        @contextmanager
        def frozen(self):
            seen.append(("stopped", gate.timing))
            yield Frozen(running=[] if len(seen) > 1 else [4242])
            seen.append(("continued", gate.timing))

    neighbour = other.tracked.add(Neighbour())
    options = fast.replace(timing={"enabled": True, "budget_ms": 20.0, "baselines": False}, probes=False)
    job = Job(id="one", problem=str(SEED), solution=CANDIDATES / "core" / "correct.py", options=options, key="k")
    try:
        result = lane.judge(job, lambda event: stages.append(event.stage))
        spares = [spare.first_device for ready in lane.pool.ready.values() for spare in ready]
    finally:
        lane.close()
    assert result.verdict == "pass" and result.timing
    assert spares and spares == ["cpu"] * len(spares)  # started, then sent to the device
    assert warmed == [(False, 0)]  # at once, while sharing the gate: no timing then, none waiting
    # each spare did the host's part of taking the device before the warm-up shared the gate, then its ping
    ops = [(op, shared, starting) for op, _, shared, starting in asked if op != "ready"]
    assert ops == [("prepare", False, True)] * 2 + [("ping", True, False)] * 2, asked
    assert {module for op, module, _, _ in asked if op == "prepare"} == {WORKER, REFEREE}
    # the evaluation's processes shared the device's gate request by request (batch/gate.py), never while
    # timing, and let go of all of it at the end
    assert shares.count("check") >= 2 and not {"baselines", "timing"} & set(shares), shares
    assert not gate.sharing and not gate.timing
    # before each timing: the reference's (before the candidate's build, which starts the spare) and the candidate's
    assert settled == [("reference", 0), ("probes" if "probes" in stages else "check", 1)]
    assert stages.index("timing") > stages.index("build")
    # the neighbour stopped once the lane holds the device alone, for each timed stage, continued while it still does
    assert seen == [("stopped", True), ("continued", True)] * 2
    assert neighbour.ran_while_stopped == [4242]  # its pipeline turns it into `tampering` (pipeline._sandbox_checks)


def _spares(lane) -> dict[str, list[tuple[str | None, int | None]]]:
    """A lane's spares by module: the device each took (None: not yet), and whether its process ended (None: alive)."""
    return {module: [(p.first_device, p.process.poll()) for p in ready] for module, ready in lane.pool.ready.items()}


def test_a_lanes_warm_up_keeps_its_spares_and_closing_ends_them(fast, monkeypatch):
    """The warm-up holds the spares out of the pool while it waits for the gate (other lanes timing); a candidate
    that fails meanwhile ends its evaluation, whose end fills the pool: no second pair is started beside the
    held one, the next evaluation takes the warmed pair, and closing the lane ends every spare."""
    from kerneljudge.batch.backend import Job
    from kerneljudge.batch.gate import DeviceGate
    from kerneljudge.batch.local import LocalLane
    from kerneljudge.stages.context import DeviceMemo

    gate = DeviceGate()
    lane = LocalLane("cpu:0", "cpu", gate, DeviceMemo())
    lane.prestart = True  # as on a GPU lane
    plain_share = gate.share

    def share():
        if threading.current_thread().name == "kerneljudge-warm":
            time.sleep(3)  # as behind other lanes' timings
        return plain_share()

    monkeypatch.setattr(gate, "share", share)
    job = Job(id="one", problem=str(SEED), solution=CANDIDATES / "core" / "wrong.py", options=fast, key="k")
    try:
        result = lane.judge(job, lambda event: None)
        lane.pool.ready_for_next()
        spares = _spares(lane)
        processes = [p for ready in lane.pool.ready.values() for p in ready]
    finally:
        lane.close()
    assert result.verdict == "fail"
    assert spares == {WORKER: [("cpu", None)], REFEREE: [("cpu", None)]}  # one pair, warmed, alive
    assert all(p.process.wait(timeout=30) is not None for p in processes)


@pytest.mark.parametrize("fault", ["dies", "hangs"])
def test_a_spare_that_fails_to_prepare_is_dropped_and_the_next_evaluation_starts_its_own(fast, monkeypatch, fault):
    """A spare that fails its Prepare (dead, or stopped past the limit) is ended, not handed to the next
    evaluation; the other spare goes on to its ping, and the next evaluation starts a worker of its own."""
    import dataclasses

    from kerneljudge.batch import local
    from kerneljudge.batch.backend import Job
    from kerneljudge.batch.gate import DeviceGate
    from kerneljudge.batch.local import LocalLane
    from kerneljudge.stages.context import DeviceMemo

    lane = LocalLane("cpu:0", "cpu", DeviceGate(), DeviceMemo())
    lane.prestart = True  # as on a GPU lane
    plain_submit, killed, stopped = WorkerProcess.submit, [], contextlib.ExitStack()
    monkeypatch.setattr(local, "PREPARE_LIMIT", (0.5, "a spare's preparation (the test's limit)"))

    def submit(process, request, blobs=()):
        if request.op == "prepare" and process.module == WORKER and not killed:
            if fault == "dies":
                process.kill()
            else:
                stopped.enter_context(process.frozen())  # every process of it stopped: it never answers
            killed.append(process)
        return plain_submit(process, request, blobs)

    monkeypatch.setattr(WorkerProcess, "submit", submit)
    job = Job(id="one", problem=str(SEED), solution=CANDIDATES / "core" / "correct.py", options=fast, key="k")
    try:
        first = lane.judge(job, lambda event: None)
        lane.pool.ready_for_next()
        spares = _spares(lane)
        assert killed[0] not in lane.pool.ready[WORKER]
        second = lane.judge(dataclasses.replace(job, id="two"), lambda event: None)
    finally:
        lane.close()
        stopped.close()
    assert first.verdict == second.verdict == "pass"
    assert len(killed) == 1 and killed[0].process.wait(timeout=30) is not None
    # the referee prepared and warmed, alive; a worker spare, if any, one the lane's end started afresh, not yet on
    # the device (the end starts none while the warm-up still runs)
    assert spares[REFEREE] == [("cpu", None)] and spares[WORKER] in ([], [(None, None)]), spares


def test_a_worker_that_ran_while_another_lane_stopped_it_is_tampering():
    """What a batch lane saw of a neighbour's worker while it timed (batch/local.py) ends that worker's own
    evaluation as `tampering`, once the worker has ended (pipeline._sandbox_checks)."""
    from types import SimpleNamespace

    from kerneljudge import pipeline

    worker = SimpleNamespace(sandbox=None, breaches=[], oom_kills=0, ran_while_stopped=[7, 7, 3],
                             package_read_only=True)
    judging = SimpleNamespace(findings=[])
    pipeline._sandbox_checks(SimpleNamespace(sandbox=None), worker, judging)
    (finding,) = judging.findings
    assert finding.code == "tampering" and finding.severity == "fail" and finding.details["pids"] == [3, 7]
    worker.ran_while_stopped = []
    judging.findings = []
    pipeline._sandbox_checks(SimpleNamespace(sandbox=None), worker, judging)
    assert judging.findings == []
