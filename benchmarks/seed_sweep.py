#!/usr/bin/env python
"""Launch-shape sweep of the seed solutions' kernels at full size (device time, CUDA-graph replays).

CUDA: the row kernel of suite/solutions/level2/51_*/cuda.py instantiated with several threads-per-block
(items per thread = 2048 float4 / threads). Triton: the row kernel of triton.py with several num_warps.
Compared with a device copy of the same bytes. Run: python benchmarks/seed_sweep.py
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kerneljudge import timing  # noqa: E402
from seed_table import SOLUTIONS, load  # noqa: E402

SWEEP = r"""
torch::Tensor sweep(torch::Tensor x, torch::Tensor w, torch::Tensor c, int64_t threads) {
    auto out = torch::empty_like(x);
    cudaStream_t s = at::cuda::getCurrentCUDAStream();
    const int n = (int)(x.size(1) / 4);
    switch (threads) {
        case 64: kj_launch<float4, 64, 32>(x, w, c, out, n, s); break;
        case 128: kj_launch<float4, 128, 16>(x, w, c, out, n, s); break;
        case 256: kj_launch<float4, 256, 8>(x, w, c, out, n, s); break;
        case 512: kj_launch<float4, 512, 4>(x, w, c, out, n, s); break;
        default: kj_launch<float4, 1024, 2>(x, w, c, out, n, s); break;
    }
    return out;
}
"""


def cuda_source() -> str:
    tree = ast.parse((SOLUTIONS / "cuda.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "_CUDA_SOURCE":
            text = ast.literal_eval(node.value)
            return text.replace("}  // namespace", "}  // namespace\n" + SWEEP).replace(
                "torch::Tensor kj_l2_51_forward", "torch::Tensor kj_unused_forward")
    raise SystemExit("no _CUDA_SOURCE in cuda.py")


def main() -> None:
    device = torch.device("cuda")
    x = torch.rand(2048, 8192, device=device)
    w = torch.rand(8192, device=device) - 0.5
    c = torch.zeros(1, device=device)
    y = torch.empty_like(x)
    ext = load_inline("kj_seed_sweep", cpp_sources=["torch::Tensor sweep(torch::Tensor x, torch::Tensor w, "
                                                    "torch::Tensor c, int64_t threads);"],
                      cuda_sources=[cuda_source()], functions=["sweep"], extra_cuda_cflags=["-O3"])
    tri = load(SOLUTIONS / "triton.py", "kj_sweep_triton")
    rows = [("copy", lambda: y.copy_(x))]
    rows += [(f"cuda threads={t}", lambda t=t: ext.sweep(x, w, c, t)) for t in (64, 128, 256, 512, 1024)]

    def triton_call(warps, stages=None):
        out = torch.empty_like(x)
        extra = {} if stages is None else {"num_stages": stages}
        tri._kj_l2_51_row_kernel[(2048,)](x, w, c, out, 8192, x.stride(0), out.stride(0), BLOCK=8192, SINGLE=True,
                                          EVEN=True, num_warps=warps, **extra)
        return out

    rows += [(f"triton num_warps={n}", lambda n=n: triton_call(n)) for n in (4, 8, 16, 32)]
    stop = timing.StopRule(min_runs=20, max_runs=500, min_time_ms=100, budget_ms=1000, target_rel_sem=0.003)
    flush = timing.L2Flusher.for_cuda_device(device)
    copy_ms = None
    print(f"{'variant':24} {'graph ms':>9} {'x copy':>7}")
    for label, fn in rows:
        ms = timing.measure(lambda i: fn(), timer=timing.cuda_graph_timer(device, flush, input_period=1), stop=stop,
                            warmup_runs=3, wall_clock_ms=timing.perf_counter_ms).stats.median_ms
        copy_ms = copy_ms or ms
        print(f"{label:24} {ms:9.4f} {ms / copy_ms:7.3f}")


if __name__ == "__main__":
    main()
