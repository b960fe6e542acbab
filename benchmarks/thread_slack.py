"""Why does a candidate that leaves torch's thread count at 1 leave more time unexplained per timed call?
The referee timing the reference, and two candidate workers with the same honest forward, one of them
setting `torch.set_num_threads(1)` at import, timed in turns (one batch each, a round at a time, so machine
load falls on all alike; the order turns each round), with a second referee as the control; per process the median slack per call (the judge's time for a batch minus the
times the process claims), and the median of the paired differences with the referee's. Usage: PYTHONPATH=src python benchmarks/thread_slack.py [ROUNDS] [REST_MS]   (REST_MS 0: no pause)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from kerneljudge import protocol, timing
from kerneljudge.candidate import load_candidate
from kerneljudge.isolation import REFEREE, WorkerProcess
from kerneljudge.options import WorkerOptions
from kerneljudge.problem import load_problem
from kerneljudge.seeds import fresh_seed
from kerneljudge.stages.measure import CPU_FLUSH_REST_MS, Pacer, RemoteTimer

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = {"threads default": ROOT / "tests/candidates/integrity/honest.py",
              "threads 1 at import": ROOT / "tests/candidates/referee/threads_at_import.py"}


def referee(problem) -> WorkerProcess:
    process = WorkerProcess(WorkerOptions(), module=REFEREE).__enter__()
    process.call(protocol.Ping("cpu"))
    data = {"path": str(problem.path), "source": problem.source, "constants": problem.constants}
    process.call(protocol.Setup(data, 1, 2))
    process.call(protocol.TimeSetup("calibration", [fresh_seed() for _ in range(4)], "host-clock"))
    return process


def started(path: Path, problem) -> WorkerProcess:
    worker = WorkerProcess(WorkerOptions()).__enter__()
    worker.call(protocol.Ping("cpu"))
    candidate = load_candidate(path)
    data = {"path": str(problem.path), "source": problem.source, "constants": problem.constants}
    worker.call(protocol.Build("cpu", data, {"path": str(candidate.path),
                "sha256": candidate.sha256, "kinds": list(candidate.kinds)}))
    worker.call(protocol.Construct(1, 2, None))
    worker.call(protocol.TimeSetup("candidate", [fresh_seed() for _ in range(4)], "host-clock"))
    return worker


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    rest_ms = float(sys.argv[2]) if len(sys.argv) > 2 else CPU_FLUSH_REST_MS
    problem = load_problem("level2/51", small_if_builtin=True)
    clock_ms = lambda: time.perf_counter_ns() / 1e6  # noqa: E731
    workers = {"referee (reference)": referee(problem), "second referee": referee(problem)}
    workers.update({name: started(path, problem) for name, path in CANDIDATES.items()})
    pacer = Pacer(rest_ms, clock_ms)  # the judge's pause before each request (0: none, as before the fix)
    timers = {name: RemoteTimer(w, 1, clock_ms, pacer) for name, w in workers.items()}
    claims: dict[str, list[float]] = {name: [] for name in workers}
    for index in range(rounds + 5):
        order = list(timers)[index % len(timers):] + list(timers)[:index % len(timers)]  # no process always first
        for name in order:
            timer = timers[name]
            timer.refills[index] = fresh_seed()
            claims[name] += timer.time_calls([timing.IterationCall(lambda i: None, index)])
    for timer in timers.values():
        del timer.slacks_ms[:5]  # first-call costs
    names = list(timers)
    print(f"the judge's rest before each request: {rest_ms} ms")
    for name in names:
        print(f"{name:22} slack per call median {statistics.median(timers[name].slacks_ms):8.3f} ms   "
              f"claimed median {statistics.median(claims[name][5:]):8.3f} ms")
    for name in names[1:]:
        paired = [b - a for a, b in zip(timers[names[0]].slacks_ms, timers[name].slacks_ms)]
        print(f"paired difference ({name} - referee): median {statistics.median(paired):.3f} ms over {len(paired)}")
    for worker in workers.values():
        worker.__exit__(None, None, None)


if __name__ == "__main__":
    main()
