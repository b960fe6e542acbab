#!/usr/bin/env python
"""What the referee holds at its peak in one draw (its inputs, the native and float64 runs, the truth), tensor by
tensor with the stack that made each: the referee's session run in this process (no worker, no isolation), the
second draw traced (the first makes the plan; `--first` traces that one). `memory_spans.py` says which request makes a peak; this says what
it is made of. On a GPU from CUDA's allocator history; on a CPU from the profiler's memory profile, which misses
what only a GPU allocates (library workspaces, a staged parameter's upcast chunk) and the frees of blocks made before
the draw (the model's float64 parameters let go as it goes back to its own precision): an upper bound there.
Usage: PYTHONPATH=src python benchmarks/referee_peak.py PROBLEM [--device cuda] [--set NAME=VALUE ...] [--top 12] [--first]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from kerneljudge.problem import load_problem
from kerneljudge.referee.session import RefereeSession
from kerneljudge.worker.build import import_problem

MIB = 2**20


def traced_draw(session: RefereeSession, device: torch.device, seed: int) -> list[dict]:
    """The allocator's events of one draw, oldest first, each {"action", "addr", "size", "frames"}."""
    if device.type == "cuda":
        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
        session.draw(seed, keep_inputs=True)
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        return snapshot["device_traces"][device.index or 0]
    from torch.cuda._memory_viz import _profile_to_snapshot
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        session.draw(seed, keep_inputs=True)
    return [event for trace in _profile_to_snapshot(prof)["device_traces"] for event in trace]


def peak(events: list[dict]) -> tuple[int, list[dict]]:
    """The most the draw held beyond what it started with (blocks made before it and freed in it counted off where
    the trace has their frees: on a GPU), and the blocks it made that were live then (largest first)."""
    live: dict[int, dict] = {}
    held = most = 0
    at: list[dict] = []
    for event in events:
        if event["action"] == "alloc":
            live[event["addr"]] = event
            held += event["size"]
        elif event["action"] == "free_completed":
            held -= live.pop(event["addr"])["size"] if event["addr"] in live else event["size"]
        if held > most:
            most, at = held, list(live.values())
    return most, sorted(at, key=lambda e: -e["size"])


def where(frames: list[dict]) -> str:
    """The innermost frames of the judge's own code or the problem's (the place that asked for the block)."""
    names = [f"{f['filename'].rsplit('/', 1)[-1]}:{f['line']} {f['name']}" if f.get("line") else f["name"]
             for f in frames]
    ours = [n for n in names if "kerneljudge" in n or n.split(":")[0].endswith((".py",)) and "torch" not in n]
    return " <- ".join((ours or names)[:4])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--first", action="store_true", help="trace the first draw (the one that makes the plan: "
                        "the native run, the separability checks) instead of the second")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    problem = load_problem(args.problem, overrides=tuple(tuple(s.split("=", 1)) for s in args.set))
    module = import_problem(str(args.problem), problem.source, problem.constants)
    session = RefereeSession.build(module, device, 7, 8, kernelbench=False)
    if not args.first:
        session.draw(1, keep_inputs=True)
        session.kept.pop(1)
    most, blocks = peak(traced_draw(session, device, 1 if args.first else 2))
    print(f"footprint {session.footprint['total_bytes'] / MIB:.0f} MiB; float64 {session.plan.describe()}; "
          f"held at one precision: {session.reference.one_at_a_time}")
    print(f"the draw's peak beyond what the referee held before it: {most / MIB:.0f} MiB; the blocks it made, live then:")
    for block in blocks[:args.top]:
        print(f"{block['size'] / MIB:9.1f} MiB  {where(block.get('frames', []))}")


if __name__ == "__main__":
    main()
