#!/usr/bin/env python
"""Whether holding the reference at one precision at a time (referee/precision.py: converted in place to float64
for the truth and back) gives, bit for bit, what a float64 copy kept beside it gives, for every KernelBench problem
of the chosen levels at small sizes on the CPU: the native and float64 outputs of a few draws, through the probes'
parameter changes and a range move. A reference is held so from ONE_PRECISION_FROM_BYTES of parameters on (smaller
ones keep the copy); here every one is, so the conversions of every kind of model are exercised without a GPU.
Usage: PYTHONPATH=src python benchmarks/one_precision_check.py [--levels 3] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from memory_sweep import KERNELBENCH, problems, small_sizes  # noqa: E402

from kerneljudge.problem import load_problem  # noqa: E402
from kerneljudge.proc.inputs import equal_bits  # noqa: E402
from kerneljudge.proc.perturb import Transform  # noqa: E402
from kerneljudge.referee import plan, precision  # noqa: E402
from kerneljudge.referee.session import RefereeSession  # noqa: E402
from kerneljudge.worker.build import import_problem  # noqa: E402


def same(a, b) -> bool:
    """Both None, or the same tensors in the same structure, bit for bit (NaNs, infinities and signed zeros too)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and equal_bits(a, b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a is None and b is None


def sessions(path: Path) -> tuple[RefereeSession, RefereeSession, str]:
    """The reference keeping its float64 copy and the reference held at one precision, at the first small sizes
    its code accepts."""
    for spatial in (True, False):
        try:
            problem = load_problem(path, overrides=small_sizes(path, spatial))
            sizes = problem.overrides
            module = import_problem(str(path), problem.source, problem.constants)
            kept = built(module, 1 << 62)
        except Exception:  # noqa: BLE001 - sizes this problem's code refuses: the next tier
            if not spatial:
                raise
            continue
        try:
            held = built(module, 0)
        except Exception as exc:  # noqa: BLE001 - where the copy works, a failure held is a difference
            raise HeldFailed(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}") from exc
        return kept, held, " ".join(f"{k}={v}" for k, v in sizes.items())
    raise AssertionError("unreachable")


class HeldFailed(Exception):
    """The reference held at one precision failed where the one keeping a copy did not."""


def built(module, one_precision_from_bytes: int) -> RefereeSession:
    """The reference held at one precision from `one_precision_from_bytes` of parameters on, drawn once; its float64
    run planned as a kept copy's (not cut for being parameter-heavy), so two truths are summed in the same order."""
    plain, heavy_chunks = precision.ONE_PRECISION_FROM_BYTES, plan.PARAMETER_HEAVY_CHUNKS
    try:
        precision.ONE_PRECISION_FROM_BYTES, plan.PARAMETER_HEAVY_CHUNKS = one_precision_from_bytes, 1
        session = RefereeSession.build(module, torch.device("cpu"), 7, 8, kernelbench=False)
        session.draw(1)
        return session
    finally:
        precision.ONE_PRECISION_FROM_BYTES, plan.PARAMETER_HEAVY_CHUNKS = plain, heavy_chunks


def check(path: Path) -> str:
    kept, held, sizes = sessions(path)
    assert held.reference.one_at_a_time and not kept.reference.one_at_a_time
    findings, notes = [], set()

    def compare(seed: int, step: str) -> None:
        if seed != 1:
            for session in (kept, held):
                session.draw(seed)
        a, b = kept.kept.pop(seed), held.kept.pop(seed)
        if not same(a.expected, b.expected):
            findings.append(f"native differs after {step}")
        if a.expected64 is None and b.expected64 is not None:  # a copy whose forward reaches the native model
            notes.add(f"a float64 truth held alone; the copy's: {kept.plan.reason}")  # (a closure over its modules)
        elif a.expected64 is None and b.expected64 is None:
            notes.add("no float64 truth either way: only the native outputs compared")
        elif not same(a.expected64, b.expected64):
            findings.append(f"float64 differs after {step}")

    compare(1, "the first draw")
    for session in (kept, held):
        session.perturb(11, None, replace=False)
    compare(2, "a parameter change")
    names = [n for n, t in kept.native().state_dict().items() if t.is_floating_point()]
    if names:
        for session in (kept, held):
            session.set_range(Transform(names[0], scale=4.0))
        compare(3, f"a range move of {names[0]}")
        for session in (kept, held):
            session.set_range(None)
        compare(4, "the move put back")
    plans = f"float64 {kept.plan.describe()['float64']} with the copy, {held.plan.describe()['float64']} held"
    verdict = "same" if not findings else "DIFFERS: " + "; ".join(findings)
    return f"{verdict} ({plans}; {sizes})" + "".join(f"; {note}" for note in sorted(notes))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--levels", default="3")
    parser.add_argument("--only", default=None)
    parser.add_argument("--kernelbench", type=Path, default=KERNELBENCH)
    args = parser.parse_args()
    torch.set_num_threads(2)
    differ = 0
    for path in problems([int(x) for x in args.levels.split(",")], None, args.only, args.kernelbench):
        started = time.monotonic()
        try:
            line = check(path)
        except HeldFailed as exc:
            line = f"DIFFERS: the held reference failed ({exc}), the copy's did not"
        except Exception as exc:  # noqa: BLE001 - a problem that fails at small sizes is said, not fatal
            line = f"not checked: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        differ += "DIFFERS" in line
        print(f"{path.parent.name}/{path.stem:50} {time.monotonic() - started:6.1f} s  {line}", flush=True)
    print(f"{differ} differ")


if __name__ == "__main__":
    main()
