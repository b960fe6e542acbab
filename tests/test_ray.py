"""The Ray backend on a local two-node cluster (ray.cluster_utils.Cluster): fake "GPU" resources, one
per node, the judge on the CPU, timing off. The batch scheduler gives the same verdicts and resume keys
on it as on the local backend; a candidate that kills its judge, a judge killed from outside and a node
killed mid-run lose nothing and record nothing twice; the reward service scores with backpressure.

The module runs about 16 real evaluations (a worker and a referee each, the slow ones waiting at import
until their test's fault is made) and starts a 3-node cluster once; each test's candidates are the fewest
that show its fault."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'kerneljudge[ray]'")

from ray.cluster_utils import Cluster  # noqa: E402

from kerneljudge.batch.discover import Setting, entries_to_jobs  # noqa: E402
from kerneljudge.batch.journal import Journal  # noqa: E402
from kerneljudge.batch.keys import hardware  # noqa: E402
from kerneljudge.batch.runner import BatchRun  # noqa: E402
from kerneljudge.cluster.backend import JudgePool, RayBackend  # noqa: E402
from kerneljudge.cluster.reward import RewardService  # noqa: E402
from kerneljudge.cluster.task import JudgeTask  # noqa: E402

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = "level2/51"


@pytest.fixture(scope="module")
def cluster():
    """A head without GPUs and two nodes with one fake GPU each; node deaths noticed within ~2 s."""
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 0, "include_dashboard": False,
        "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 3}})
    nodes = [cluster.add_node(num_cpus=2, num_gpus=1) for _ in range(2)]
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    cluster.wait_for_nodes()
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def options(fast):
    return fast.replace(check={"trials": 2})


@pytest.fixture
def slow(tmp_path):
    """Correct candidates (distinct files) that, when imported, say so (a file in a folder the options make
    writable for the worker) and wait there until the test releases them (a file `go` in that folder; two
    minutes at most): a judge or a node is lost while they wait, and a candidate judged again after the release
    goes on at once, so no test sleeps longer than its fault takes."""
    said = tmp_path / "started"
    said.mkdir()
    go = said / "go"

    class Slow:
        def __call__(self, index: int = 0) -> Path:
            path = tmp_path / f"slow_correct_{index}.py"
            path.write_text(f"import time\nfrom pathlib import Path\n\nopen({str(said / str(index))!r}, 'w').close()\n"
                            f"_waited = time.monotonic() + 120\nwhile not Path({str(go)!r}).exists() and "
                            f"time.monotonic() < _waited:\n    time.sleep(0.02)\n\n"
                            + (CANDIDATES / "core/correct.py").read_text())
            return path

        def options(self, options):
            return options.replace(worker={"writable": (said,)})

        def wait_started(self, count: int) -> None:
            deadline = time.monotonic() + 120
            while len([path for path in said.iterdir() if path != go]) < count:
                assert time.monotonic() < deadline, "the slow candidates never started"
                time.sleep(0.05)

        def release(self) -> None:
            go.touch()

    return Slow()


def _jobs(names: list[str], options) -> list:
    setting = Setting(options, "cpu", hardware("cpu"))
    return entries_to_jobs([{"problem": PROBLEM, "solution": str(CANDIDATES / name), "id": f"{i}-{name}"}
                            for i, name in enumerate(names)], setting)


def _codes(result) -> list[str]:
    return [f.code for f in result.findings]


def test_the_batch_gives_the_local_backends_verdicts_and_keys(cluster, options, tmp_path):
    """The verdicts and codes the local backend gives these candidates (tests/test_batch.py judges the same
    kinds there; running them here too took a third of this module's time), and the local backend's keys."""
    jobs = _jobs(["core/correct.py", "core/wrong.py", "isolation/segfault.py", "core/compile_error.py"], options)
    backend = RayBackend(options, address="auto")
    assert len(backend.lanes()) == 2  # one judge per (fake) GPU
    try:
        assert backend.hardware() == hardware("cpu")  # so the resume keys are the local backend's
        journal = Journal(tmp_path)
        there = {f.job.id: (f.result, f.lane) for f, _ in BatchRun(jobs, backend, journal=journal,
                                                                   store_path=tmp_path / "r.sqlite")}
    finally:
        backend.close()
    verdicts = [(there[j.id][0].verdict, _codes(there[j.id][0])) for j in jobs]
    assert [v for v, _ in verdicts] == ["pass", "fail", "error", "error"], verdicts
    assert "pytorch-rewrite" in verdicts[0][1] and "wrong-output" in verdicts[1][1], verdicts
    assert "worker-crashed" in verdicts[2][1] and verdicts[3][1] == ["compile-error"], verdicts
    node_ids = {n.node_id for n in cluster[1]}
    for job in jobs:
        result, lane = there[job.id]
        if lane is not None:  # judged (the compile error ended in the build task)
            assert result.device["node"]["node_id"] in node_ids  # the GPU node it ran on is recorded
            assert result.candidate["path"] == str(job.solution)  # the driver's path, not the actor's copy
    assert there[jobs[3].id][1] is None
    assert sorted(Journal(tmp_path).done) == sorted(j.key for j in jobs)
    assert sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT COUNT(*) FROM results").fetchone()[0] == 4


def test_a_candidate_that_kills_its_judge_is_an_error_and_the_run_goes_on(cluster, options):
    pool = JudgePool(ray, device="cpu", max_attempts=2)
    try:
        # with the PID namespace on, the candidate could not even see its judge (the sandbox's protection)
        killer = JudgeTask.of("killer", PROBLEM, CANDIDATES / "ray/kills_judge.py",
                              options.replace(worker={"sandbox_off": ("pid",)}))
        honest = JudgeTask.of("honest", PROBLEM, CANDIDATES / "core/correct.py", options)
        lost = pool.judge(killer)
        assert lost.verdict == "error" and _codes(lost) == ["judge-lost"], _codes(lost)
        assert lost.findings[0].details["attempts"] == 2
        assert pool.judge(honest).verdict == "pass"  # the judges came back (Ray restarted them)
    finally:
        pool.stop()


def test_a_judge_killed_mid_evaluation_is_replaced_and_nothing_is_lost(cluster, options, slow):
    pool = JudgePool(ray, device="cpu")
    try:
        task = JudgeTask.of("slow", PROBLEM, slow(), slow.options(options))
        with ThreadPoolExecutor(1) as thread:
            future = thread.submit(pool.judge, task)
            slow.wait_started(1)  # the evaluation is in flight on one of the two judges: kill both
            pids = [info["pid"] for info in pool.where.values()]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            slow.release()
            result = future.result(timeout=120)
        assert result.verdict == "pass", _codes(result)
        assert result.device["node"]["pid"] not in pids  # judged by a restarted actor
    finally:
        pool.stop()


def test_the_reward_service_scores_rollouts_with_backpressure(cluster, options):
    correct, wrong = ((CANDIDATES / name).read_text() for name in ("core/correct.py", "core/wrong.py"))

    async def scenario(service):
        first = await service.submit(correct)  # room at once
        second = asyncio.ensure_future(service.submit(wrong))
        await asyncio.sleep(0.2)
        assert first.done() or not second.done()  # max_pending=1: admitted only once the first is done
        scored = [await first, await (await second)]
        assert service.pending == 0
        return scored + await service.score_many([wrong, correct])

    service = RewardService(PROBLEM, options=options, max_pending=1, pool=JudgePool(ray, device="cpu"))
    try:
        scored = asyncio.run(scenario(service))
    finally:
        service.close()
    # KernelEnv's reward, untimed: correct = compile 0.1 + correct 0.3; wrong keeps the compile reward
    assert [s.reward for s in scored] == pytest.approx([0.4, 0.1, 0.1, 0.4])
    assert [s.result.verdict for s in scored] == ["pass", "fail", "fail", "pass"]


def test_a_node_killed_mid_run_loses_nothing_and_records_nothing_twice(cluster, options, slow, tmp_path):
    """Last in this module: it leaves one GPU node."""
    cluster_, nodes = cluster
    jobs = _jobs([str(slow(i)) for i in range(3)], slow.options(options))
    backend = RayBackend(options, address="auto")
    finished: list = []
    try:
        batch = BatchRun(jobs, backend, store_path=tmp_path / "r.sqlite", run_id="node-kill")
        running = threading.Thread(target=lambda: finished.extend(f for f, _ in batch))
        running.start()
        slow.wait_started(2)  # two judged at once, one on each node
        cluster_.remove_node(nodes[0], allow_graceful=False)
        slow.release()
        running.join(timeout=180)
        assert not running.is_alive()
    finally:
        backend.close()
    assert sorted(f.job.id for f in finished) == sorted(j.id for j in jobs)  # every candidate, once
    assert all(f.result.verdict == "pass" for f in finished), [_codes(f.result) for f in finished]
    # each slow candidate waited past the kill, so the one that was on the lost node was judged again
    assert {f.result.device["node"]["node_id"] for f in finished} == {nodes[1].node_id}
    rows = sqlite3.connect(tmp_path / "r.sqlite").execute("SELECT run_id FROM results").fetchall()
    assert rows == [("node-kill",)] * 3
