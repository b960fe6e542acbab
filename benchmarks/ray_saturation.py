"""Where the Ray backend saturates: the driver's and the store's throughput with a judge that answers at once.

    python benchmarks/ray_saturation.py [--results 10000] [--judges 8]

A stand-in actor returns a canned Result (the JSON of one real CPU evaluation of level2/51's shipped
solution) the moment it is asked, so everything measured is the driver's own work per candidate:
JudgeTask.of (read the problem and the candidate), the Ray round trip to an actor, Result.from_json,
and the SQLite store's one-transaction insert. Three figures, results per second:

  driver   10,000 tasks through JudgePool from one thread per judge (as the scheduler's lanes), no store
  store    10,000 Store.record calls, one thread (the driver records serially)
  both     the two together: the lanes' threads judge, each result recorded as it comes (one writer)

Ray runs locally (`ray.init`) with `--judges` fake GPUs; no GPU and no real evaluation is involved
beyond the one that makes the canned answer. docs/ray.md turns the figures into GPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import ray

from kerneljudge import pipeline
from kerneljudge.cluster.backend import JudgePool
from kerneljudge.cluster.task import JudgeTask
from kerneljudge.options import Options
from kerneljudge.problem import load_problem
from kerneljudge.records import Result
from kerneljudge.store import Store


class StandIn:
    """A judge actor that judges nothing: the canned Result's JSON (a class attribute, set by `main`), at once."""

    canned: dict = {}

    def ready(self, device: str) -> dict:
        return {"pid": os.getpid(), "hardware": "stand-in"}

    def judge(self, task: dict) -> dict:
        return self.canned


def canned_result(options: Options) -> Result:
    """One real evaluation (CPU, timing off): the size and shape of what actors send back."""
    return pipeline.evaluate("level2/51", None, options.replace(store_path=None))


def through_pool(pool: JudgePool, problem: str, solution: Path, options: Options, count: int,
                 on_result=lambda result: None) -> float:
    """Seconds to judge `count` tasks from one thread per judge, each result handed to `on_result`."""
    todo = iter(range(count))
    lock = threading.Lock()

    def lane() -> None:
        while True:
            with lock:
                index = next(todo, None)
            if index is None:
                return
            on_result(pool.judge(JudgeTask.of(f"k{index}", problem, solution, options)))

    started = time.perf_counter()
    with ThreadPoolExecutor(pool.count) as threads:
        for future in [threads.submit(lane) for _ in range(pool.count)]:
            future.result()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=10_000)
    parser.add_argument("--judges", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kj-saturation-") as folder:
        options = Options(device="cpu", store_path=None, cache_dir=Path(folder) / "cache").replace(
            timing={"enabled": False})
        canned = canned_result(options)
        problem = load_problem("level2/51")
        solution = pipeline.resolve_solution(None, problem, "cpu")  # the shipped solution the canned result judged
        problem = str(problem.path)
        size = len(json.dumps(canned.to_json()))
        cpus = args.judges + (os.cpu_count() or 1)  # logical: one per judge actor, as on a cluster
        ray.init(address="local", num_cpus=cpus, num_gpus=args.judges, log_to_driver=False, logging_level="ERROR")
        stand_in = type("StandIn", (StandIn,), {"canned": canned.to_json()})
        pool = JudgePool(ray, judges=args.judges, device="cpu", actor=stand_in)
        through_pool(pool, problem, solution, options, min(500, args.results))  # warm: actors up, imports done
        figures = {"driver": args.results / through_pool(pool, problem, solution, options, args.results)}

        store = Store(Path(folder) / "results.sqlite")
        source = solution.read_text()
        started = time.perf_counter()
        for _ in range(args.results):
            store.record(canned, verb="evaluate", source=source, options=options.to_json(), run_id="saturation")
        figures["store"] = args.results / (time.perf_counter() - started)

        writer = threading.Lock()

        def record(result: Result) -> None:
            with writer:
                store.record(result, verb="evaluate", source=source, options=options.to_json(), run_id="both")
        figures["both"] = args.results / through_pool(pool, problem, solution, options, args.results, record)
        pool.stop()
        ray.shutdown()
    print(f"{args.results} results, {args.judges} stand-in judges, result JSON {size / 1024:.1f} KiB, "
          f"{os.cpu_count()} CPUs")
    print(f"{'path':<8} {'results/s':>10}")
    for name, rate in figures.items():
        print(f"{name:<8} {rate:>10.0f}")


if __name__ == "__main__":
    main()
