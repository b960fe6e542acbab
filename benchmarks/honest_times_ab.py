"""Honest candidates' reported times under the code on PYTHONPATH: run it once with each version of the judge (an
older one unpacked with `git archive REV src`) on the same GPU, one after the other, and compare the lines.

Each case is one `api.evaluate` with 200 timed calls and the eager baseline (no torch.compile): the reference of a
1,024 square product as its own candidate (its time should be the baseline's), and level2/51's shipped candidates.
Printed per case: verdict, failing and warning codes, the candidate's median, the baseline's, the speedup, the
cross-check's slacks and the flush kind.

Usage (GPU machine): PYTHONPATH=<src of the version> python benchmarks/honest_times_ab.py LABEL [--repeat 2]
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kerneljudge import api
from kerneljudge.options import Options

ROOT = Path(__file__).resolve().parent.parent
SQUARE_PRODUCT = ROOT / "tests" / "square_product.py"
LEVEL2_51 = "level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd"
TIMING = {"min_runs": 200, "max_runs": 200, "target_rel_sem": 0.0, "min_time_ms": 0.0, "budget_ms": 1e7,
          "compile_baseline": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("label")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    problem, honest = SQUARE_PRODUCT, folder / "honest.py"
    honest.write_text(SQUARE_PRODUCT.read_text().replace("class Model", "class ModelNew"))
    suite = ROOT / "src" / "kerneljudge" / "suite"
    cases = [("square reference as candidate", problem, honest)] + [
        (f"level2/51 {name}", suite / f"{LEVEL2_51}.py", suite / "solutions" / LEVEL2_51 / f"{name}.py")
        for name in ("pytorch", "triton")]
    options = Options(device="cuda", store_path=None, cache_dir=str(folder / "cache"))
    for _ in range(args.repeat):
        for name, problem_path, solution in cases:
            result = api.evaluate(problem_path, solution, options, timing=TIMING, check={"trials": 2})
            timing = result.timing or {}
            cross = timing.get("cross_check") or {}
            failing = sorted({f.code for f in result.findings if f.severity in ("fail", "error")})
            warned = sorted({f.code for f in result.findings if f.severity == "warn"})
            median_us = timing.get("candidate", {}).get("median_ms", 0) * 1e3
            eager_us = ((timing.get("baselines") or {}).get("eager") or {}).get("median_ms", 0) * 1e3
            print(f"{args.label} | {name} | {result.verdict} {failing} {warned} | median {median_us:.1f} us, eager "
                  f"{eager_us:.1f} us, speedup {timing.get('speedup')} | slack {cross.get('slack_ms')} ms, reference "
                  f"{cross.get('reference_slack_ms')} ms | flush {timing.get('flush')}", flush=True)


if __name__ == "__main__":
    main()
