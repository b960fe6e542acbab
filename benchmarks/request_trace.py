"""The judge's requests to the worker and the referee for one evaluation, with their wall times and the
bytes they carried, summed by kind: where an evaluation's time goes once it crosses processes.
Usage: PYTHONPATH=src python benchmarks/request_trace.py PROBLEM SOLUTION [--cpu] [--no-baselines]
       [--set NAME=VALUE ...]
Bytes are counted whether they crossed inline (through the judge) or as sealed memory (`sealed` column).
"""

from __future__ import annotations

import argparse
import collections
import time

from kerneljudge import api, isolation, sealed
from kerneljudge.options import Options

totals: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0, 0, 0])
_call = isolation.WorkerProcess.call


def traced(self, request, blobs=(), **kw):
    started = time.perf_counter()
    reply = _call(self, request, blobs, **kw)
    entry = totals[(self.role, request.op)]
    entry[0] += 1
    entry[1] += time.perf_counter() - started
    for b in list(blobs) + list(reply.get("_blobs", [])):
        entry[3 if isinstance(b, sealed.SealedBlob) else 2] += len(b)
    return reply


isolation.WorkerProcess.call = traced


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("solution")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    options = Options(device="cpu" if args.cpu else "auto", store_path=None,
                      overrides=tuple(tuple(s.split("=", 1)) for s in args.set))
    if args.no_baselines:
        options = options.replace(timing={"baselines": False})
    started = time.perf_counter()
    result = api.evaluate(args.problem, args.solution, options)
    wall_s = time.perf_counter() - started
    print(f"{result.verdict} wall {wall_s:.2f} s", result.stage_ms, (result.timing or {}).get("cross_check"))
    for finding in result.findings:
        if finding.severity in ("fail", "error"):
            print(f"  {finding.severity} {finding.code} [{finding.stage}]: {finding.message[:300]}")
    print(f"{'role':8} {'request':18} {'n':>4} {'total ms':>10} {'mean ms':>9} {'inline MiB':>11} {'sealed MiB':>11}")
    for (role, op), (n, seconds, inline, mapped) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
        print(f"{role:8} {op:18} {n:4} {1e3 * seconds:10.1f} {1e3 * seconds / n:9.2f} {inline / 2**20:11.1f} "
              f"{mapped / 2**20:11.1f}")
    print(f"{'all':8} {'':18} {sum(v[0] for v in totals.values()):4} "
          f"{1e3 * sum(v[1] for v in totals.values()):10.1f}")


if __name__ == "__main__":
    main()
