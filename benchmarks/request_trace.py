"""The judge's requests to the worker and the referee for one evaluation, with their wall times and the
bytes they carried, summed by kind: where an evaluation's time goes once it crosses processes.
Usage: PYTHONPATH=src python benchmarks/request_trace.py PROBLEM SOLUTION [--cpu]
"""

from __future__ import annotations

import collections
import sys
import time

from kerneljudge import api, isolation
from kerneljudge.options import Options

totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
_call = isolation.WorkerProcess.call


def traced(self, request, blobs=(), **kw):
    started = time.perf_counter()
    reply = _call(self, request, blobs, **kw)
    entry = totals[(self.role, request.op)]
    entry[0] += 1
    entry[1] += time.perf_counter() - started
    entry[2] += sum(len(b) for b in blobs) + sum(len(b) for b in reply.get("_blobs", []))
    return reply


isolation.WorkerProcess.call = traced


def main() -> None:
    problem, solution = sys.argv[1], sys.argv[2]
    options = Options(device="cpu" if "--cpu" in sys.argv else "auto", store_path=None)
    result = api.evaluate(problem, solution, options)
    print(result.verdict, result.stage_ms, (result.timing or {}).get("cross_check"))
    for (role, op), (n, seconds, nbytes) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{role:8} {op:18} n={n:4} total {1e3 * seconds:9.1f} ms  mean {1e3 * seconds / n:8.2f} ms  "
              f"{nbytes / 2**20:8.1f} MiB")


if __name__ == "__main__":
    main()
