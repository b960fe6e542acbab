"""Pre-started workers: every evaluation still gets a fresh process, and the spare is started ahead."""

from __future__ import annotations

from conftest import CANDIDATES, SEED

from kerneljudge import api, protocol
from kerneljudge.isolation import REFEREE, WORKER, WorkerPool


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
    with first, second:
        assert first.call(protocol.Ping("cpu"))["device"]["type"] == "cpu"
        assert second.call(protocol.Ping("cpu"))["device"]["type"] == "cpu"
        assert first.process.pid != second.process.pid


def test_evaluations_through_a_pool_never_share_a_process(fast):
    good = CANDIDATES / "core" / "correct.py"
    crash = CANDIDATES / "isolation" / "segfault.py"
    with WorkerPool() as pool:
        results = [api.check(SEED, path, fast, pool=pool) for path in (crash, good, good)]
    assert [r.verdict for r in results] == ["error", "pass", "pass"]
    assert results[0].findings and any(f.code == "worker-crashed" for f in results[0].findings)
