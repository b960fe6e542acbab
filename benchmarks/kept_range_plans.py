#!/usr/bin/env python
"""How often a batch's kept range plan serves a later candidate's draw, and whether an approximation ever passes.

In a batch, a lane's first candidate of a problem makes the range probes' plan and its later ones are offered it
(README: "Range probes and their tolerance"). Each pair here is a batch of two on one lane: an honest candidate
(seed 5000 + k: it makes the plan) and a candidate that should fail the range probes (seed k: it is offered the
plan). The script counts the second one's `probes.ranges.plan` (kept or remade) and lists every pair where it did
not fail. Seeds are pinned, so a run is repeatable; run it with `PYTHONPATH=<another checkout>/src` to compare code.

    python benchmarks/kept_range_plans.py --pairs 60 --set batch_size=2048
    python benchmarks/kept_range_plans.py --pairs 12 --device cuda
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from kerneljudge import api
from kerneljudge.options import Options

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = Path(api.__file__).parent / "suite" / "solutions"
PLAN_SEED_OFFSET = 5000  # the honest candidate's seed, beside the probed one's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="level2/51")
    parser.add_argument("--honest", type=Path, default=None, help="default: the shipped PyTorch solution")
    parser.add_argument("--probed", type=Path, default=ROOT / "tests" / "candidates" / "probes" / "tanh_gelu.py",
                        help="a candidate the range probes must fail (default: level2/51 with the tanh GELU)")
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="a size, as `eval --set`")
    parser.add_argument("--device", default="cpu", help="cpu, or cuda (the GPU's plans at the problem's own size)")
    args = parser.parse_args(argv)
    honest = args.honest or next(SHIPPED.glob(f"{args.problem}_*/pytorch.py"))
    options = Options(device=args.device, store_path=None).replace(
        timing={"enabled": False}, overrides=tuple(tuple(item.split("=", 1)) for item in args.set))
    plans: Counter[str] = Counter()
    not_failed = []
    for seed in range(args.first_seed, args.first_seed + args.pairs):
        entries = [{"problem": args.problem, "solution": str(honest),
                    "options": {"check": {"seed": PLAN_SEED_OFFSET + seed}}},
                   {"problem": args.problem, "solution": str(args.probed), "options": {"check": {"seed": seed}}}]
        finished = sorted(api.evaluate_many(entries, options, lanes=1), key=lambda f: int(f.job.id))
        result = finished[1].result
        plan = (result.probes or {}).get("ranges", {}).get("plan", "none")
        plans[plan] += 1
        if result.verdict != "fail":
            not_failed.append((seed, plan, result.verdict))
    print(f"{args.pairs} pairs: plans {dict(plans)}; the probed candidate did not fail in {len(not_failed)}: "
          f"{not_failed}")
    return 1 if not_failed else 0


if __name__ == "__main__":
    sys.exit(main())
