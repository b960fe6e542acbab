"""The judge's requests to the worker and the referee for one evaluation, with their wall times and the
bytes they carried, summed by kind: where an evaluation's time goes once it crosses processes.
Usage: PYTHONPATH=src python benchmarks/request_trace.py PROBLEM SOLUTION [--cpu] [--no-baselines]
       [--set NAME=VALUE ...] [--warm | --batch] [--budget-ms MS] [--profile]
Bytes are counted whether they crossed inline (through the judge) or as sealed memory (`sealed` column).
`--warm` evaluates twice with a store kept between (cached baselines, as `kerneljudge serve` has them) and
traces the second. The gaps list says where the judge itself spent time between two requests.
`--batch` evaluates twice as a batch on one lane (`api.evaluate_many`) and traces the second from the first's
result on: the kept baselines' short eager run and the kept range plan, as a batch's later candidates have them
(its first requests may be lost, sent before the first's result came; its stages from the check on are whole;
the batch's end and a third pair of spares' start are in it).
`--profile` runs the traced evaluation under cProfile in the judge and in the referee (proc/serve.py's
KERNELJUDGE_PROFILE_DIR) and prints each one's most expensive calls.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import os
import pstats
import tempfile
import time
from pathlib import Path

from kerneljudge import api, isolation, sealed
from kerneljudge.options import Options

carried: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0])  # bytes inline, sealed, by kind
durations: dict[tuple[str, str], list[float]] = collections.defaultdict(list)  # each request's seconds, by kind
by_stage: dict[tuple[str, str], list[float]] = collections.defaultdict(list)  # ... by the stage it served
timeline: list[tuple[float, float, str, str]] = []  # (start, end, role, op) of every request
_submit, _collect = isolation.WorkerProcess.submit, isolation.WorkerProcess.collect
_sent: dict[str, tuple[float, str, list]] = {}  # nonce -> (sent at, request kind, its blobs)
GAP_MS = 5.0  # the judge's own time between two requests worth listing
PROFILE_LINES = 40


def submitted(self, request, blobs=()):
    started = time.perf_counter()
    pending = _submit(self, request, blobs)
    what = getattr(request, "what", None)  # an observed call's kind (threads, trace, repeat, streams)
    _sent[pending.nonce] = (started, request.op + (f":{what}" if isinstance(what, str) else ""), list(blobs))
    return pending


def collected(self, pending, **kw):
    reply = _collect(self, pending, **kw)
    started, op, blobs = _sent.pop(pending.nonce)
    ended = time.perf_counter()
    timeline.append((started, ended, self.role, op))
    durations[(self.role, op)].append(ended - started)
    by_stage[(str(self.stage), f"{self.role} {op}")].append(ended - started)
    for b in blobs + list(reply.get("_blobs", [])):
        carried[(self.role, op)][1 if isinstance(b, sealed.SealedBlob) else 0] += len(b)
    return reply


isolation.WorkerProcess.submit, isolation.WorkerProcess.collect = submitted, collected


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem")
    parser.add_argument("solution")
    parser.add_argument("--cpu", action="store_true")
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--warm", action="store_true", help="trace a second evaluation (store kept)")
    parser.add_argument("--budget-ms", type=float, default=None, help="the timing's budget (batch_throughput.py: 300)")
    parser.add_argument("--batch", action="store_true", help="trace a batch's second candidate (kept baselines)")
    parser.add_argument("--profile", action="store_true", help="cProfile the judge and the referee")
    args = parser.parse_args()
    if args.batch and (args.warm or args.profile):
        parser.error("--batch traces without --warm and --profile")
    with tempfile.TemporaryDirectory() as folder:
        if args.profile:
            os.environ["KERNELJUDGE_PROFILE_DIR"] = folder
        options = Options(device="cpu" if args.cpu else "auto",
                          store_path=str(Path(folder) / "store.sqlite") if args.warm else None,
                          overrides=tuple(tuple(s.split("=", 1)) for s in args.set))
        if args.budget_ms is not None:
            options = options.replace(timing={"budget_ms": args.budget_ms})
        if args.no_baselines:
            options = options.replace(timing={"baselines": False})
        if args.warm:
            api.evaluate(args.problem, args.solution, options)
            for kept in (carried, timeline, durations, by_stage):
                kept.clear()
            for old in Path(folder).glob("referee-*.prof"):
                old.unlink()
        if args.batch:
            entries = [{"problem": args.problem, "solution": args.solution, "id": str(k)} for k in range(2)]
            started = None
            for finished in api.evaluate_many(entries, options, lanes=1):
                if started is None:  # the first's result: its requests are dropped, the second's are traced
                    for kept in (carried, timeline, durations, by_stage):
                        kept.clear()
                    started = time.perf_counter()
            report(finished.result, started, time.perf_counter() - started)
            return
        judge = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        result = judge.runcall(api.evaluate, args.problem, args.solution, options) if judge else \
            api.evaluate(args.problem, args.solution, options)
        wall_s = time.perf_counter() - started
        report(result, started, wall_s)
        if judge:
            for title, stats in [("judge", pstats.Stats(judge))] + [
                    ("referee", pstats.Stats(str(path))) for path in Path(folder).glob("referee-*.prof")]:
                print(f"--- {title}: most expensive calls (cumulative)")
                stats.sort_stats("cumulative").print_stats(PROFILE_LINES)


def report(result, started: float, wall_s: float) -> None:
    print(f"{result.verdict} wall {wall_s:.2f} s", result.stage_ms, (result.timing or {}).get("cross_check"))
    for finding in result.findings:
        if finding.severity in ("fail", "error"):
            print(f"  {finding.severity} {finding.code} [{finding.stage}]: {finding.message[:300]}")
    print(f"{'role':8} {'request':18} {'n':>4} {'total ms':>10} {'mean ms':>9} {'median ms':>9} {'max ms':>9} "
          f"{'inline MiB':>11} {'sealed MiB':>11}")
    for (role, op), each in sorted(durations.items(), key=lambda kv: -sum(kv[1])):
        each, (inline, mapped) = sorted(each), carried[(role, op)]
        print(f"{role:8} {op:18} {len(each):4} {1e3 * sum(each):10.1f} {1e3 * sum(each) / len(each):9.2f} "
              f"{1e3 * each[len(each) // 2]:9.2f} {1e3 * each[-1]:9.2f} {inline / 2**20:11.1f} {mapped / 2**20:11.1f}")
    print(f"{'all':8} {'':18} {sum(map(len, durations.values())):4} "
          f"{1e3 * sum(map(sum, durations.values())):10.1f}")
    print_gaps(started, started + wall_s)
    print("by stage: requests (count, total ms, median ms)")
    for stage in dict.fromkeys(stage for stage, _ in by_stage):
        kinds = sorted(((kind, each) for (s, kind), each in by_stage.items() if s == stage), key=lambda kv: -sum(kv[1]))
        print(f"  {stage}: " + "; ".join(f"{kind} {len(each)}x {1e3 * sum(each):.0f} ({1e3 * sorted(each)[len(each) // 2]:.1f})"
                                       for kind, each in kinds))


def print_gaps(started: float, ended: float) -> None:
    """The judge's own time: before the first request, between two, after the last (time no request
    covered: the referee's and the worker's requests may overlap)."""
    gaps, covered, before = [], started, (started, started, "-", "start")
    for entry in sorted(timeline) + [(ended, ended, "-", "end")]:
        if entry[0] > covered:
            gaps.append((1e3 * (entry[0] - covered), before, entry))
        if entry[1] >= covered:
            covered, before = entry[1], entry
    print(f"judge's own time between requests: {sum(g for g, _, _ in gaps):.1f} ms of {1e3 * (ended - started):.1f}; "
          f"gaps over {GAP_MS} ms:")
    for gap_ms, before, after in gaps:
        if gap_ms > GAP_MS:
            print(f"  {gap_ms:8.1f} ms  after {before[2]} {before[3]:16} before {after[2]} {after[3]}")


if __name__ == "__main__":
    main()
