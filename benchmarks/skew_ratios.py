"""Honest candidates' timed calls against their batches' means: the margin of the `timing-skewed` rule.

The rule (stages/measure.py, SKEWED_FRACTION) reports a batch's means instead of its calls where the calls'
median is under a fraction of the batches' median mean: a candidate that does a batch's work at one call
shows that shape. Honest candidates show some of it too (a batch's first call carries the launch latency
after the refill), most where a call is a few microseconds. This judges honest candidates from tens of
microseconds down to a few (the shipped level2/51 solutions at full size, the references of KernelBench
problems as candidates at sizes made small with --set) and prints each one's ratio, so the fraction can be
set below all of them with room to spare.

Usage (GPU machine): python benchmarks/skew_ratios.py [--kernelbench .kb/kernelbench] [--out ratios.jsonl]
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

# (problem, --set overrides): single kernels and short chains, a few microseconds to a few hundred
SMALL_PROBLEMS = [
    ("level1/19_ReLU.py", ["batch_size=16", "dim=16384"]),
    ("level1/19_ReLU.py", ["batch_size=256", "dim=16384"]),
    ("level1/23_Softmax.py", ["batch_size=64", "dim=4096"]),
    ("level1/40_LayerNorm.py", ["batch_size=4"]),
    ("level1/1_Square_matrix_multiplication_.py", ["N=512"]),
    ("level2/12_Gemm_Multiply_LeakyReLU.py", ["batch_size=64", "in_features=1024", "out_features=1024"]),
    ("level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd.py", ["batch_size=128"]),
    ("level1/47_Sum_reduction_over_a_dimension.py", ["batch_size=16", "dim1=256", "dim2=255"]),
]
SHIPPED = ["@cuda", "@triton", "@pytorch"]


def ratio(result: dict) -> tuple[float, float, int] | None:
    """(calls' median, batches' median mean, calls per batch), as the rule computes them (from the finding
    where the rule reported the batches' means)."""
    timing = result.get("timing") or {}
    samples, batch = timing.get("samples_ms") or [], timing.get("batch") or 1
    skewed = [f["details"] for f in result.get("findings", []) if f["code"] == "timing-skewed"]
    if skewed:
        return skewed[0]["calls_median_ms"], skewed[0]["batches_median_ms"], skewed[0]["calls_per_batch"]
    if batch <= 1 or timing.get("samples_are") != "calls":
        return None
    means = [math.fsum(samples[k:k + batch]) / batch for k in range(0, len(samples) - batch + 1, batch)]
    return statistics.median(samples), statistics.median(means), batch


def judge(args: list[str]) -> list[dict]:
    done = subprocess.run([sys.executable, "-m", "kerneljudge", "eval", *args, "--no-baselines", "--json"],
                          capture_output=True, text=True, timeout=300)
    out = json.loads(done.stdout)
    return out.get("results", [out])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernelbench", type=Path, default=Path("../shared/kernelbench"))
    parser.add_argument("--out", type=Path, default=None, help="one JSON line per candidate")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    runs = [(["l2/51", *SHIPPED], "level2/51 shipped, full size")]
    with tempfile.TemporaryDirectory() as tmp:
        for problem, sets in SMALL_PROBLEMS:
            path = args.kernelbench / problem
            honest = Path(tmp) / f"honest_{len(runs)}.py"
            honest.write_text(re.sub(r"\bModel\b", "ModelNew", path.read_text()))
            runs.append(([str(path), str(honest), *[a for s in sets for a in ("--set", s)]],
                         f"{problem} {' '.join(sets)}"))
        rows = []
        for _ in range(args.repeats):
            for cli_args, label in runs:
                for result in judge(cli_args):
                    found = ratio(result)
                    codes = [f["code"] for f in result.get("findings", []) if f["severity"] != "info"]
                    name = result["candidate"]["path"].rsplit("/", 1)[-1]
                    if found is None:
                        print(f"{label:70} {name:12} {result['verdict']:5} no per-call samples {codes}")
                        continue
                    calls, means, batch = found
                    rows.append({"problem": label, "candidate": name, "verdict": result["verdict"],
                                 "calls_median_ms": calls, "batches_median_ms": means, "ratio": calls / means,
                                 "excess_per_batch_ms": (means - calls) * batch, "batch": batch, "codes": codes})
                    print(f"{label:70} {name:12} {result['verdict']:5} calls {calls:.5f} ms, batch means "
                          f"{means:.5f} ms: ratio {calls / means:.3f}, {(means - calls) * batch:.4f} ms a batch "
                          f"beyond the calls' median {codes}")
    if rows:
        print(f"lowest ratio {min(r['ratio'] for r in rows):.3f} over {len(rows)} honest timings")
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
