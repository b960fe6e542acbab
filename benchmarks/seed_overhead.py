#!/usr/bin/env python
"""Where the time of a seed-problem solution goes on a GPU: device time vs host overhead.

For each solution: (1) per-call time with CUDA events as the judge times it (flush, start, call, end);
(2) pure device time from CUDA-graph replays (no host work); (3) host time of one forward() call
without synchronising (the Python and launch overhead). Run: python benchmarks/seed_overhead.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kerneljudge import timing  # noqa: E402
from seed_table import PROBLEM, ROWS, load  # noqa: E402


def main() -> None:
    device = torch.device("cuda")
    problem = load(PROBLEM, "kj_seed_problem")
    torch.manual_seed(0)
    x = problem.get_inputs()[0].to(device)
    reference = problem.Model(*problem.get_init_inputs()).to(device).eval()
    y = torch.empty_like(x)
    rows = [("copy", lambda: y.copy_(x))]
    for label, path in ROWS[1:]:
        module = load(path, f"kj_over_{path.stem}")
        model = module.ModelNew(*problem.get_init_inputs()).to(device).eval()
        model.load_state_dict(reference.state_dict(), strict=False)
        rows.append((label, lambda model=model: model(x)))
    stop = timing.StopRule(min_runs=20, max_runs=500, min_time_ms=100, budget_ms=1500, target_rel_sem=0.005)
    print(f"{'row':22} {'events ms':>10} {'graph ms':>10} {'host us/call':>12}")
    for label, fn in rows:
        with torch.inference_mode():
            flush = timing.L2Flusher.for_cuda_device(device)
            ev = timing.measure(lambda i: fn(), timer=timing.cuda_event_timer(device, flush), stop=stop,
                                warmup_runs=5, wall_clock_ms=timing.perf_counter_ms).stats.median_ms
            gr = timing.measure(lambda i: fn(), timer=timing.cuda_graph_timer(device, flush, input_period=1),
                                stop=stop, warmup_runs=3, wall_clock_ms=timing.perf_counter_ms).stats.median_ms
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                fn()
            host_us = (time.perf_counter() - t0) / 200 * 1e6
            torch.cuda.synchronize()
        print(f"{label:22} {ev:10.4f} {gr:10.4f} {host_us:12.1f}")


if __name__ == "__main__":
    main()
