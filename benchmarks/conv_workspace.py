#!/usr/bin/env python
"""What a convolution's call holds beyond its input, weight and output (cuDNN's workspace, or the columns of
PyTorch's own convolution with cuDNN off), and its time, in float32 (TF32 on and off) and float64, cuDNN on and
off, at several batch sizes: the referee's float64 truth is a convolution in float64, and a workspace of gigabytes
there counts in the judge's peak. Run it with CUDNN_CONV_WSCAP_DBG=<MiB> set to see PyTorch's workspace cap.
Each call here starts from an emptied cache in a fresh process: on the H200 (twenty-fifth session) the float64
convolution of tests/test_gpu.py's problem took no workspace here, where inside the referee's check stage it held
2.5 GB (cuDNN off, or capped at 64 MiB, brought the referee back to 0.76 GB): not reproduced in isolation.
Usage: PYTHONPATH=src python benchmarks/conv_workspace.py [KERNELBENCH_PROBLEM ...] [--batches 16,4,1]
With no problem: Conv2d(64, 1024, 3, padding=1) on 16x64x64x64 (tests/test_gpu.py's TF32 convolution).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from kerneljudge.problem import load_problem
from kerneljudge.worker.build import import_problem

MIB = 2**20


def extra_mib(model: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """(MiB held at the call's peak beyond its input, parameters and output; the call's time in ms)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    start = time.perf_counter()
    with torch.inference_mode():
        out = model(x)
    torch.cuda.synchronize()
    time_ms = (time.perf_counter() - start) * 1e3
    peak = torch.cuda.max_memory_allocated() - before - out.numel() * out.element_size()
    return peak / MIB, time_ms


def cases(problems: list[Path]) -> list[tuple[str, torch.nn.Module, torch.Tensor]]:
    if not problems:
        torch.manual_seed(0)
        return [("conv2d 64->1024 k3 16x64x64x64", torch.nn.Conv2d(64, 1024, 3, padding=1),
                 torch.rand(16, 64, 64, 64))]
    made = []
    for path in problems:
        problem = load_problem(path)
        module = import_problem(str(path), problem.source, problem.constants)
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        made.append((path.stem, model, module.get_inputs()[0]))
    return made


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("problems", type=Path, nargs="*")
    parser.add_argument("--batches", default="16,4,1")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print(f"{'case':42} {'dtype':12} {'cudnn':5} {'batch':>5} {'extra MiB':>10} {'time ms':>9}")
    for name, model, x in cases(args.problems):
        model = model.cuda()
        for dtype, tf32 in ((torch.float32, True), (torch.float32, False), (torch.float64, False)):
            model = model.to(dtype)
            torch.backends.cudnn.allow_tf32 = tf32
            for cudnn in (True, False):
                for batch in batches:
                    if batch > x.shape[0]:
                        continue
                    sample = x[:batch].to("cuda", dtype)
                    with torch.backends.cudnn.flags(enabled=cudnn, allow_tf32=tf32):
                        extra_mib(model, sample)  # (the first call picks the algorithm)
                        extra, time_ms = extra_mib(model, sample)
                    label = f"{dtype}".replace("torch.", "") + (" tf32" if tf32 else "")
                    print(f"{name[:42]:42} {label:12} {str(cudnn):5} {batch:5d} {extra:10.1f} {time_ms:9.2f}",
                          flush=True)
                    del sample


if __name__ == "__main__":
    main()
