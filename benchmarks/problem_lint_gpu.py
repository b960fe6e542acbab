#!/usr/bin/env python
"""Problem lint at KernelBench's own sizes on one GPU (issue 19): what the CPU sweep of docs/problem-lint.md
cannot say, i.e. magnitudes at the shipped shapes (issue #165's four), and which references are launch-bound
(under 20 µs) on the device at hand.

Runs `kerneljudge lint-problem --full --device cuda --json` on a fixed selection in one referee and prints a
table. On one H200 it should take a few minutes at most (every problem below fits in its memory).

Usage (from the repository root, on the GPU host):
  PYTHONPATH=src python benchmarks/problem_lint_gpu.py [--kernelbench ../shared/kernelbench]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SELECTION = (
    "level1/23_Softmax", "level1/37_FrobeniusNorm_", "level1/39_L2Norm_", "level1/53_Min_reduction_over_a_dimension",
    "level1/19_ReLU", "level1/33_BatchNorm", "level1/94_MSELoss", "level1/4_Matrix_vector_multiplication_",
    "level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd", "level2/18_Matmul_Sum_Max_AvgPool_LogSumExp_"
    "LogSumExp", "level2/80_Gemm_Max_Subtract_GELU", "level3/20_MobileNetV2", "level3/9_ResNet18",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernelbench", type=Path, default=REPO.parent / "shared" / "kernelbench")
    args = parser.parse_args()
    files = [str(args.kernelbench / f"{name}.py") for name in SELECTION]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "KERNELJUDGE_CACHE_DIR": tempfile.mkdtemp(prefix="kj-gpu-lint-")}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "kerneljudge", "lint-problem", "--full", "--device", "cuda", "--json",
                           *files], capture_output=True, text=True, env=env)
    if done.returncode not in (0, 1):
        sys.exit(f"lint-problem failed ({done.returncode}):\n{done.stderr[-3000:]}")
    data = json.loads(done.stdout)
    print(f"{'problem':58} {'ref us':>9} {'max|out|':>9} {'GiB':>7}  findings")
    for p in data["problems"]:
        facts = p["facts"]
        ref_us = f"{facts['reference_ms'] * 1e3:.1f}" if "reference_ms" in facts else "-"
        peak = f"{facts['max_abs_output']:.2g}" if "max_abs_output" in facts else "-"
        gib = f"{facts['footprint_bytes'] / 2**30:.2f}" if "footprint_bytes" in facts else "-"
        found = sorted({f["code"].removeprefix("problem-") + (f"({f['details']['trivial']})" if "trivial" in f["details"]
                                                              else "") for f in p["findings"]})
        print(f"{p['name'][:58]:58} {ref_us:>9} {peak:>9} {gib:>7}  {', '.join(found)[:150]}")
    print(f"wall {time.perf_counter() - started:.0f} s; {data['summary']}")


if __name__ == "__main__":
    main()
