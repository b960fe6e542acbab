"""Where the host time of a timed batch goes, per phase, for the shipped level2/51 solutions (GPU).

Runs the judge's timed side (proc/timed.TimedModel) in this process on each solution at full size and
times, on the host, the refill, the flush, the call and the event records of every call; also how long
the worker guard's tampering check takes once torch and Triton are imported.
Usage (GPU): PYTHONPATH=src python benchmarks/referee_diag.py
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import torch

from kerneljudge import timing
from kerneljudge.proc import timed as timed_module
from kerneljudge.problem import load_problem
from kerneljudge.proc.inputs import make_inputs
from kerneljudge.worker.build import import_problem
from kerneljudge.worker.guard import Guard

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "src/kerneljudge/suite/solutions/level2").glob("51_*/*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"sol_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    guard = Guard.bind()
    device = torch.device("cuda")
    problem = load_problem("level2/51", preset=None, overrides=(), small_if_builtin=False)
    module = import_problem(str(problem.path), problem.source, problem.constants)
    for path in SOLUTIONS:
        solution = load(path)
        torch.manual_seed(0)
        reference = module.Model(*module.get_init_inputs()).to(device)
        model = solution.ModelNew(*module.get_init_inputs()).to(device)
        model.load_state_dict(reference.state_dict(), strict=False)
        model.eval()
        phases = {"refill": 0.0, "call": 0.0, "batch": 0.0}
        original_before = timed_module.TimedModel._before

        def before(self, i):
            t = time.perf_counter()
            original_before(self, i)
            phases["refill"] += time.perf_counter() - t

        def call(args):
            t = time.perf_counter()
            out = model(*args)
            phases["call"] += time.perf_counter() - t
            return out

        timed_module.TimedModel._before = before
        runner = timed_module.TimedModel(call, module, device, [1, 2, 3, 4], "cuda-events", time.perf_counter_ns)
        calls = 0
        samples = []
        for b in range(60):
            refills = {b * 4 + k: 100 + b * 4 + k for k in range(4)} if b else {}
            t = time.perf_counter()
            samples += runner.batch(b * 4, 4, refills)
            phases["batch"] += time.perf_counter() - t
            calls += 4
        timed_module.TimedModel._before = original_before
        stats = timing.Stats.from_samples(samples[40:])
        print(f"{path.stem:8} device median {stats.median_ms:.4f} ms | host per call: batch {1e3 * phases['batch'] / calls:.4f} "
              f"ms, refill {1e3 * phases['refill'] / calls:.4f} ms, call {1e3 * phases['call'] / calls:.4f} ms")
        with torch.inference_mode():
            x = make_inputs(module, 5, device)
            for _ in range(3):
                model(*x)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(100):
                model(*x)
            host = (time.perf_counter() - t) / 100
            torch.cuda.synchronize()
        print(f"{path.stem:8} plain loop: host {1e3 * host:.4f} ms per call")
    t = time.perf_counter()
    for _ in range(10):
        guard.tampered()
    print(f"guard.tampered(): {1e3 * (time.perf_counter() - t) / 10:.2f} ms per check ({len(guard.snapshot)} names)")


if __name__ == "__main__":
    main()
