#!/usr/bin/env python
"""Why do repeated timings of a power-limited matmul spread? Time it several ways, interleaved.

Each round measures the same 8192^3 bf16 matmul (and the 1 GiB copy) with every variant, in turn, and
prints the median of each; after all rounds, the spread (max/min - 1) of each variant's medians:
  per-call        CudaEventTimer + L2Flusher, the host waits after each call
  per-call+hold   the same with a spin kernel holding the stream while the host enqueues
  batch-4         4 calls (flush, start, fn, end each) enqueued back to back, one wait per batch
  batch-4+hold    the same, held once per batch: the judge's timer then (stream_hold.held_event_timer)
  batch-16        16 calls per batch
  do_bench        triton.testing.do_bench, median
Run: python benchmarks/timer_variants.py   (GPU; about a minute on an H200)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from kerneljudge import timing as T  # noqa: E402
from stream_hold import held_event_timer, spin_cycles_per_ms  # noqa: E402

ROUNDS = 5
BUDGET_MS = 800.0


def median_ms(fn, timer) -> float:
    stop = T.StopRule(min_runs=20, max_runs=5000, min_time_ms=150.0, budget_ms=BUDGET_MS, target_rel_sem=0.005)
    return T.measure(lambda i: fn(), timer=timer, stop=stop, warmup_runs=5, warmup_ms=300.0,
                     wall_clock_ms=T.perf_counter_ms).stats.median_ms


def main() -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    flush = T.L2Flusher.for_cuda_device(device)
    a, b, c = (torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(3))
    src = torch.empty(1 << 30, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    kernels = {"matmul": lambda: torch.mm(a, b, out=c), "copy": lambda: dst.copy_(src)}
    cycles = spin_cycles_per_ms(device)
    for name, fn in kernels.items():
        def held(batch: int) -> T.CallTimer:
            return held_event_timer(device, flush, lambda i: fn(), batch=batch, clock_ns=time.perf_counter_ns,
                                    sync=torch.cuda.synchronize, cycles_per_ms=cycles).timer

        variants = {
            "per-call": lambda: median_ms(fn, T.cuda_event_timer(device, flush)),
            "per-call+hold": lambda: median_ms(fn, held(1)),
            "batch-4": lambda: median_ms(fn, T.cuda_event_timer(device, flush, batch=4)),
            "batch-4+hold": lambda: median_ms(fn, held(4)),
            "batch-16": lambda: median_ms(fn, T.cuda_event_timer(device, flush, batch=16)),
            "do_bench": lambda: float(triton.testing.do_bench(fn, warmup=100, rep=BUDGET_MS, return_mode="median")),
        }
        medians: dict[str, list[float]] = {v: [] for v in variants}
        for r in range(ROUNDS):
            for v, run in variants.items():
                medians[v].append(run())
            print(f"{name} round {r}: " + "  ".join(f"{v} {m[-1]:.4f}" for v, m in medians.items()), flush=True)
        for v, m in medians.items():
            print(f"{name:6} {v:14} spread {max(m) / min(m) - 1:7.2%}  medians " + " ".join(f"{x:.4f}" for x in m))


if __name__ == "__main__":
    main()
