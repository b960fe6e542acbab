#!/usr/bin/env python
"""Where the judge's own time goes: the worker's stages run in this process under cProfile.

Serves the same requests the pipeline sends (ping, build, check, probe, time) to an in-process worker
Server for one problem and solution, prints each stage's wall time and its most expensive calls.
Run: python benchmarks/judge_cost.py [PROBLEM] [SOLUTION]   (defaults: level2/51 @cuda on a GPU)
"""
from __future__ import annotations

import cProfile
import dataclasses
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kerneljudge.worker.guard import Guard  # noqa: E402

GUARD = Guard.bind()

from kerneljudge import pipeline  # noqa: E402
from kerneljudge.candidate import load_candidate  # noqa: E402
from kerneljudge.options import Options  # noqa: E402
from kerneljudge.problem import load_problem  # noqa: E402
from kerneljudge.worker.server import Server  # noqa: E402


def main() -> None:
    problem_ref = sys.argv[1] if len(sys.argv) > 1 else "level2/51"
    solution = sys.argv[2] if len(sys.argv) > 2 else "@cuda"
    options = Options()
    device = pipeline.resolve_device("auto")
    problem = load_problem(problem_ref, small_if_builtin=device == "cpu")
    candidate = load_candidate(pipeline.resolve_solution(solution, problem, device.split(":")[0]))
    server = Server(GUARD)
    GUARD.refresh()
    opts = dataclasses.asdict(options.timing)
    requests = [
        {"op": "ping", "device": device},
        {"op": "build", "device": device, "seed": 1, "cache_dir": str(options.cache_dir), "arch": None,
         "problem": {"path": str(problem.path), "source": problem.source, "constants": problem.constants},
         "candidate": {"path": str(candidate.path), "sha256": candidate.sha256, "kinds": list(candidate.kinds)}},
        {"op": "check", "trials": 5},
        {"op": "probe"},
        {"op": "time", "timing": opts, "baselines": [], "bandwidth_gbps": 4000.0},
    ]
    for request in requests:
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        reply = server.handle(request)
        profiler.disable()
        elapsed = time.perf_counter() - started
        codes = [f["code"] for f in reply.get("findings", [])]
        print(f"\n=== {request['op']}: {elapsed:.3f} s  findings={codes}")
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(14)
        print("\n".join(line for line in out.getvalue().splitlines()[6:] if line.strip())[:2500])


if __name__ == "__main__":
    main()
