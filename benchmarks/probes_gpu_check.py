"""Issue 14 on one GPU: the probes' GPU cases, each candidate judged with timing on, one line each.

Run from the repository root on a CUDA machine (about 2-3 minutes on an H200, most of it worker starts and
the shipped CUDA solution's cold build):

    PYTHONPATH=src python benchmarks/probes_gpu_check.py [cuda [LABEL ...]]

Prints candidate, expected, verdict, the failing codes with the stage that found them, the op trace's own
kernels with their call counts and share of device time, and OK/MISMATCH. Exit code 1 on any MISMATCH.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from kerneljudge import api, suite
from kerneljudge.options import Options

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "candidates"
SEED = "level2/51"
TIMING = {"enabled": True, "baselines": False, "min_runs": 200, "max_runs": 200, "target_rel_sem": 0.0,
          "min_time_ms": 0.0, "budget_ms": 1e7}
SHIPPED = suite.shipped_solutions(suite.find_builtin(SEED).name)

# (label, solution, expected verdict, failing codes: one of them at least must be among the findings)
CASES = [
    ("side_stream_when_timed", CANDIDATES / "gpu" / "side_stream_when_timed.py", "fail",
     {"timed-output-mismatch", "unsynchronized-work"}),  # either watched-call finding (the H200 shows the second)
    ("side_stream", CANDIDATES / "gpu" / "side_stream.py", "fail", {"side-stream"}),
    ("side_stream_joined", CANDIDATES / "gpu" / "side_stream_joined.py", "pass", set()),
    ("partial_cache_key", CANDIDATES / "probes" / "partial_cache_key.py", "fail", {"stale-parameters"}),
    ("tanh_gelu", CANDIDATES / "probes" / "tanh_gelu.py", "fail", {"range-mismatch"}),
    ("thread_when_timed", CANDIDATES / "probes" / "thread_when_timed.py", "fail", {"thread-spawn"}),
    ("@pytorch", SHIPPED["pytorch"], "pass", set()),
    ("@triton", SHIPPED["triton"], "pass", set()),
    ("@cuda", SHIPPED["cuda"], "pass", set()),
]


def main() -> int:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"  # "cpu" runs the table's plumbing (not its verdicts)
    only = set(sys.argv[2:])  # labels to run (default: every case)
    options = Options(device=device, store_path=None,
                      cache_dir=os.environ.get("KERNELJUDGE_CACHE_DIR") or tempfile.mkdtemp(prefix="kj-probes-gpu-")
                      ).replace(timing=TIMING)
    mismatches = 0
    print(f"{'candidate':24} {'expect':6} {'verdict':7} {'s':>5}  failing (stage)  | own kernels: calls, device share")
    for label, solution, verdict, expected in [c for c in CASES if not only or c[0] in only]:
        started = time.perf_counter()
        result = api.evaluate(SEED, solution, options)
        failing = sorted({(f.code, f.stage) for f in result.findings if f.severity in ("fail", "error")})
        codes = {code for code, _ in failing}
        ok = result.verdict == verdict and (not expected or expected & codes) and (verdict == "fail" or not codes)
        mismatches += not ok
        trace = (result.probes or {}).get("op_trace", {})
        own = ", ".join(f"{k}: {v}" for k, v in trace.get("own_calls", {}).items())
        print(f"{label:24} {verdict:6} {result.verdict:7} {time.perf_counter() - started:5.1f}  "
              f"{', '.join(f'{c} ({s})' for c, s in failing) or '-'}  | {own or '-'}, "
              f"{trace.get('own_share', 0):.3g}  {'OK' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            for f in result.findings:
                print(f"    {f.severity} {f.code} [{f.stage}]: {f.message[:300]}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
