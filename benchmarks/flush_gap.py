"""The CPU cache flush's wall time and CPU time against the idle time since the previous flush (why the
judge rests before each timed request on the CPU: stages/measure.Pacer). One process, the flusher alone;
blocks of six pairs per gap, the gaps interleaved over eight rounds. Where wall time exceeds CPU time the
process was preempted. Usage: PYTHONPATH=src python benchmarks/flush_gap.py
"""

from __future__ import annotations

import statistics
import time

from kerneljudge.timing.flush import CpuCacheFlusher

GAPS_MS = (0, 1, 2, 4, 8, 16)


def main() -> None:
    flush = CpuCacheFlusher()
    print(f"flush buffer {flush.buffer_bytes >> 20} MiB")
    seen: dict[int, list[float]] = {gap: [] for gap in GAPS_MS}
    cpu: dict[int, list[float]] = {gap: [] for gap in GAPS_MS}
    for _ in range(8):
        for gap in GAPS_MS:
            for _ in range(6):
                flush()
                if gap:
                    time.sleep(gap / 1e3)
                started, started_cpu = time.perf_counter(), time.thread_time()
                flush()
                seen[gap].append((time.perf_counter() - started) * 1e3)
                cpu[gap].append((time.thread_time() - started_cpu) * 1e3)
    for gap, times in seen.items():
        low, _, high = statistics.quantiles(times, n=4)
        print(f"idle gap {gap:3} ms: second flush median {statistics.median(times):6.2f} ms wall "
              f"(quartiles {low:.2f}-{high:.2f}), {statistics.median(cpu[gap]):6.2f} ms CPU")


if __name__ == "__main__":
    main()
