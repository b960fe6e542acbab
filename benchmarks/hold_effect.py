#!/usr/bin/env python
"""Does holding the stream change what a power-limited matmul measures? Batches of 4 with holds of
fixed lengths, the host overhead the judge would measure, and do_bench, interleaved over 3 rounds.
Run: python benchmarks/hold_effect.py   (GPU; about 40 s on an H200)"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402
import triton.testing  # noqa: E402

from kerneljudge import timing as T  # noqa: E402
from stream_hold import held_cuda_event_timer, held_event_timer, host_overhead_ms, spin_cycles_per_ms, spin_hold  # noqa: E402


def main() -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    flush = T.L2Flusher.for_cuda_device(device)
    a, b, c = (torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(3))
    fn = lambda: torch.mm(a, b, out=c)  # noqa: E731
    cycles = spin_cycles_per_ms(device)
    unheld = host_overhead_ms(lambda i: fn(), clock_ns=time.perf_counter_ns, sync=torch.cuda.synchronize)
    held = held_event_timer(device, flush, lambda i: fn(), batch=4, clock_ns=time.perf_counter_ns,
                              sync=torch.cuda.synchronize, cycles_per_ms=cycles)
    print(f"spin cycles/ms {cycles:.0f}; host overhead per call {unheld:.4f} ms measured without a hold, "
          f"{held.host_overhead_ms:.4f} ms with the device held -> the judge's hold per batch of 4: "
          f"{held.hold_ms:.3f} ms")
    stop = T.StopRule(min_runs=20, max_runs=5000, min_time_ms=150.0, budget_ms=600.0, target_rel_sem=0.005)
    for r in range(3):
        row = []
        for hold_ms in (0.0, 0.02, 0.1, 0.3, 1.0, 3.0):
            hold = spin_hold(hold_ms, cycles) if hold_ms else None
            timer = held_cuda_event_timer(device, flush, hold, batch=4)
            m = T.measure(lambda i: fn(), timer=timer, stop=stop, warmup_runs=4, warmup_ms=300.0,
                          wall_clock_ms=T.perf_counter_ms)
            firsts = m.samples_ms[0::4]
            rest = [x for k, x in enumerate(m.samples_ms) if k % 4]
            row.append(f"hold {hold_ms}: {m.stats.median_ms:.4f} (1st of batch {sorted(firsts)[len(firsts)//2]:.4f},"
                       f" others {sorted(rest)[len(rest)//2]:.4f})")
        db = triton.testing.do_bench(fn, warmup=100, rep=600, return_mode="median")
        print(f"round {r}: " + " | ".join(row) + f" | do_bench {db:.4f}", flush=True)


if __name__ == "__main__":
    main()
