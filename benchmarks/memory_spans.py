#!/usr/bin/env python
"""Each request's memory in one evaluation of the honest candidate (the reference renamed ModelNew): the
process's peak during the request and what it held after, above its baseline on a CPU (memtally.py's
figures). Shows which request makes a process's peak, where the result's `memory` block only says which stage.
Usage: PYTHONPATH=src python benchmarks/memory_spans.py PROBLEM [--device cuda] [--set NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from kerneljudge import api, isolation
from kerneljudge.options import Options

MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args()
    requests: list[tuple[str, str, int, int]] = []
    plain_call = isolation.WorkerProcess.call

    def call(process, request, blobs=(), **kw):
        reply = plain_call(process, request, blobs, **kw)
        tally = process.tally
        if tally is not None and tally.spans and tally.spans[-1].role == process.role and tally.spans[-1].end == tally.count:
            requests.append((process.role, request.op, tally.spans[-1].peak_bytes, tally.spans[-1].held_bytes))
        return reply

    isolation.WorkerProcess.call = call
    candidate = Path(tempfile.mkdtemp()) / "honest.py"
    candidate.write_text(re.sub(r"\bModel\b", "ModelNew", args.problem.read_text()))
    options = Options(device=args.device, store_path=None).replace(timing={"enabled": False})
    result = api.evaluate(args.problem, candidate, options, check={"trials": args.trials},
                          overrides=tuple(tuple(s.split("=", 1)) for s in args.set))
    memory = result.memory
    base = {p: 0 if "cuda_peak_bytes" in memory[p] else memory[p]["rss_baseline_bytes"] for p in ("referee", "worker")}
    footprint = memory["footprint"]["total_bytes"]
    print(f"{result.verdict}; footprint {footprint / MIB:.0f} MiB; judge peak {memory['judge_peak_bytes'] / MIB:.0f} MiB "
          f"({memory['peak_over_footprint']}x, {memory['judge_peak_measured']}); sum of the processes' peaks "
          f"{memory['processes_peak_sum_bytes'] / MIB:.0f} MiB")
    print(f"{'process':8} {'request':18} {'peak MiB':>9} {'held MiB':>9} {'peak/footprint':>15}")
    for role, op, peak, held in requests:
        print(f"{role:8} {op:18} {(peak - base[role]) / MIB:9.0f} {(held - base[role]) / MIB:9.0f} "
              f"{(peak - base[role]) / footprint:15.2f}")


if __name__ == "__main__":
    main()
