"""The Ray backend on a local two-node cluster (ray.cluster_utils.Cluster): fake "GPU" resources, one
per node, the judge on the CPU, timing off. Verdicts equal the local pipeline's on the same batch; a
candidate that kills its judge, a judge killed from outside and a node killed mid-run lose nothing and
record nothing twice. About 60 s on 2 cores (the cluster starts once for the module)."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'kerneljudge[ray]'")

from ray.cluster_utils import Cluster  # noqa: E402

from kerneljudge import pipeline  # noqa: E402
from kerneljudge.batch.backend import Job  # noqa: E402
from kerneljudge.candidate import load_candidate  # noqa: E402
from kerneljudge.cluster.backend import JudgePool, RayBackend  # noqa: E402
from kerneljudge.cluster.task import JudgeTask  # noqa: E402
from kerneljudge.problem import load_problem  # noqa: E402

CANDIDATES = Path(__file__).parent / "candidates"
PROBLEM = str(load_problem("level2/51").path)


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


def _job(name: str, options, index: int = 0) -> Job:
    solution = CANDIDATES / name
    candidate = load_candidate(solution)
    return Job(id=f"{solution.stem}/{index}", problem=PROBLEM, solution=solution, options=options,
               key=f"{candidate.sha256}/{index}", kinds=candidate.kinds, sha256=candidate.sha256)


def _run(backend, jobs: list[Job]) -> dict[str, object]:
    """The scheduler's use of a backend, in short: build what compiles (a failed build is the result),
    then each lane takes the next job when free."""
    results, lock, todo = {}, threading.Lock(), list(jobs)

    def lane_loop(lane):
        while True:
            with lock:
                if not todo:
                    return
                job = todo.pop(0)
            outcome = backend.build(job) if job.needs_build else None
            result = lane.judge(job, lambda event: None) if outcome is None or outcome.ok else outcome
            with lock:
                assert job.key not in results, f"{job.id} recorded twice"
                results[job.key] = result

    with ThreadPoolExecutor(len(backend.lanes())) as threads:
        list(threads.map(lane_loop, backend.lanes()))
    return results


def _codes(result) -> list[str]:
    return [f.code for f in result.findings]


def test_verdicts_equal_the_local_pipeline(cluster, options):
    backend = RayBackend(options, address=None)
    assert len(backend.lanes()) == 2  # one judge per (fake) GPU
    jobs = [_job(name, options) for name in ("core/correct.py", "core/wrong.py", "isolation/segfault.py",
                                             "core/compile_error.py")]
    try:
        remote = _run(backend, jobs)
        assert backend.hardware().startswith("cpu:")
    finally:
        backend.close()
    node_ids = {n.node_id for n in cluster[1]}
    for job in jobs:
        result = remote[job.key]
        if job.needs_build and not hasattr(result, "verdict"):  # the build task's outcome: a compile error
            assert [f.code for f in result.findings] == ["compile-error"], job.id
            local = pipeline.evaluate(job.problem, job.solution, options)
            assert local.verdict == "error" and "compile-error" in _codes(local)
            continue
        local = pipeline.evaluate(job.problem, job.solution, options)
        assert (result.verdict, _codes(result)) == (local.verdict, _codes(local)), job.id
        assert result.device["node"]["node_id"] in node_ids  # judged on a GPU node, which it records
        assert result.candidate["path"] == str(job.solution)  # the driver's path, not the actor's copy
    assert [remote[j.key].verdict for j in jobs[:3]] == ["pass", "fail", "error"]


def test_a_candidate_that_kills_its_judge_is_an_error_and_the_run_goes_on(cluster, options):
    pool = JudgePool(ray, device="cpu", max_attempts=2)
    try:
        killer = JudgeTask.of("killer", PROBLEM, CANDIDATES / "ray/kills_judge.py", options)
        honest = JudgeTask.of("honest", PROBLEM, CANDIDATES / "core/correct.py", options)
        lost = pool.judge(killer)
        assert lost.verdict == "error" and _codes(lost) == ["judge-lost"]
        assert lost.findings[0].details["attempts"] == 2
        assert pool.judge(honest).verdict == "pass"  # the judges came back (Ray restarted them)
    finally:
        pool.stop()


def test_a_judge_killed_mid_evaluation_is_replaced_and_nothing_is_lost(cluster, options):
    pool = JudgePool(ray, device="cpu")
    try:
        task = JudgeTask.of("slow", PROBLEM, CANDIDATES / "ray/slow_correct.py", options)
        with ThreadPoolExecutor(1) as thread:
            future = thread.submit(pool.judge, task)
            time.sleep(3)  # the evaluation is in flight on one of the two judges: kill both
            pids = [info["pid"] for info in pool.where.values()]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            result = future.result(timeout=120)
        assert result.verdict == "pass", _codes(result)
        assert {info["pid"] for info in pool.where.values()}.isdisjoint(pids)  # judged by a restarted actor
    finally:
        pool.stop()


def test_a_node_killed_mid_run_loses_nothing(cluster, options):
    """Last in this module: it leaves one GPU node."""
    cluster_, nodes = cluster
    backend = RayBackend(options, address=None)
    jobs = [_job("ray/slow_correct.py", options, index) for index in range(3)]
    try:
        results: dict = {}
        running = threading.Thread(target=lambda: results.update(_run(backend, jobs)))
        running.start()
        time.sleep(3)  # two judged at once, one on each node
        cluster_.remove_node(nodes[0], allow_graceful=False)
        running.join(timeout=180)
        assert not running.is_alive()
    finally:
        backend.close()
    assert sorted(results) == sorted(j.key for j in jobs)  # every candidate, once
    assert all(r.verdict == "pass" for r in results.values()), {k: _codes(r) for k, r in results.items()}
    # each slow candidate outlives the kill, so the one that was on the lost node was judged again
    assert {r.device["node"]["node_id"] for r in results.values()} == {nodes[1].node_id}
