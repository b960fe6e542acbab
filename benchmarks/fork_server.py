"""What the fork server saves (spawn.py, proc/zygote.py): process start and whole evaluations, with the
fork server and with each process executed afresh.

    PYTHONPATH=src python benchmarks/fork_server.py [--device cpu|cuda] [--repeats 5]

Per mode: the seconds from starting a worker (sandboxed) and a referee to their first answer (the first
start of the fork server itself is shown apart: a judge process pays it once), then the wall time of a
strict evaluation of level2/51's shipped PyTorch rewrite without timing, repeated in one judge process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from kerneljudge import api, isolation, protocol
from kerneljudge.options import Options


def _start_to_answer(options, module: str, device: str) -> float:
    started = time.perf_counter()
    with isolation.WorkerProcess(options, module=module) as process:
        process.call(protocol.Ping(device, None))
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cache = os.environ.get("KERNELJUDGE_CACHE_DIR") or tempfile.mkdtemp(prefix="kj-fork-bench-")
    for fork_server in (True, False):
        options = Options(device=args.device, store_path=None, cache_dir=cache).replace(
            timing={"enabled": False}, worker={"fork_server": fork_server})
        worker_options = options.worker_options()
        first = _start_to_answer(worker_options, isolation.WORKER, args.device)
        starts = {module: [_start_to_answer(worker_options, module, args.device) for _ in range(args.repeats)]
                  for module in (isolation.WORKER, isolation.REFEREE)}
        walls = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = api.evaluate("level2/51", "@pytorch", options)
            walls.append(time.perf_counter() - started)
            assert result.verdict == "pass", [f.code for f in result.findings]
        mode = "fork server" if fork_server else "afresh"
        print(f"{mode:12} first worker (with the server's start) {first:.3f} s; "
              + "; ".join(f"{m.split('.')[-1]} start-to-answer median {statistics.median(v):.3f} s "
                          f"(min {min(v):.3f})" for m, v in starts.items())
              + f"; evaluation without timing median {statistics.median(walls):.3f} s (min {min(walls):.3f}, "
                f"n={len(walls)})")


if __name__ == "__main__":
    main()
