"""Host time inside a timed call of the shipped level2/51 solutions (GPU), with the timed loop's parts
switched on one by one: events, the L2 flush (with and without the persisting-L2 reset), the refill.
Usage (GPU): PYTHONPATH=src python benchmarks/timed_host_diag.py
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import torch

from kerneljudge import timing
from kerneljudge.problem import load_problem
from kerneljudge.proc.inputs import make_inputs
from kerneljudge.worker.build import import_problem

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "src/kerneljudge/suite/solutions/level2").glob("51_*/*.py"))


def load(path: Path):
    spec = importlib.util.spec_from_file_location(f"sol_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    device = torch.device("cuda")
    problem = load_problem("level2/51", preset=None, overrides=(), small_if_builtin=False)
    module = import_problem(str(problem.path), problem.source, problem.constants)
    flushes = {"none": None, "flush+reset": timing.L2Flusher.for_cuda_device(device),
               "flush": timing.L2Flusher(device)}
    for path in SOLUTIONS:
        solution = load(path)
        torch.manual_seed(0)
        model = solution.ModelNew(*module.get_init_inputs()).to(device).eval()
        sets = [make_inputs(module, s, device) for s in range(4)]
        for name, flush in flushes.items():
            for refill in (False, True):
                host = []

                def fn(i):
                    t = time.perf_counter()
                    out = model(*sets[i % 4])
                    host.append(time.perf_counter() - t)
                    return out

                def before(i):
                    if refill:
                        for buffer, fresh in zip(sets[i % 4], make_inputs(module, 1000 + i, device)):
                            buffer.copy_(fresh)

                timer = timing.cuda_event_timer(device, flush, batch=4)
                samples = []
                with torch.inference_mode():
                    for b in range(40):
                        calls = [timing.IterationCall(fn, b * 4 + k) for k in range(4)]
                        samples += timing.time_calls(timer, calls, before)
                host_ms = sorted(host[40:])[len(host[40:]) // 2] * 1e3
                print(f"{path.stem:8} {name:12} refill={refill!s:5} device median "
                      f"{timing.Stats.from_samples(samples[40:]).median_ms:.4f} ms  host in call median {host_ms:.4f} ms")


if __name__ == "__main__":
    main()
