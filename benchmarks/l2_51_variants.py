#!/usr/bin/env python
"""The shipped level2/51 solutions side by side in one process, with triton.testing.do_bench (issue 11,
items 13 and 14).

Run:  python benchmarks/l2_51_variants.py        (a CUDA GPU; ~1.5 min, most of it the two nvcc builds)

Rows, all at the problem's own size (batch 2048, in 8192, out 8192), timed with do_bench (median of its
runs, L2 cleared before each) in ROUNDS interleaved rounds; the table gives the median over rounds, the
spread over rounds and the ratio to the copy floor (x.clone(), timed the same way):

- the three shipped solutions built normally (state loaded from the reference), and built and loaded
  under torch.inference_mode() and called there; such parameters are inference tensors with no version
  counter, so the solutions derive w_mean and c on every call (one read of the 256 MB weight);
- the refresh alone (w_mean and c from the parameters): the shipped one (float32 accumulation for
  w_mean) and the float64 accumulation shipped until 2026-12-01;
- variants of the CUDA row kernel: threads x float4 per thread, a minimum of resident blocks per SM
  (__launch_bounds__, which caps the registers), the cache hints of the x loads and y stores,
  and c read before or after the block reduction. The helpers (block sum, GELU) are the shipped ones.

Every solution row is checked against the float64 reference (atol = rtol = 1e-4, KernelBench's fp32
tolerance), again after an in-place change of the parameters (under inference_mode for the inference
rows) and after replacing one; every kernel variant against the shipped CUDA output. Writes
$OUT/l2_51_variants.json when $OUT is set.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch
from torch.utils.cpp_extension import load_inline
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parent))
from seed_sweep import cuda_source  # noqa: E402  (the shipped kernel source, its forward renamed)
from seed_table import PROBLEM, SOLUTIONS, load  # noqa: E402

ROUNDS = 5
TOLERANCE = 1e-4
# (threads, float4 per thread, min resident blocks per SM, x load, y store, c read before the reduction)
# loads: "plain" ld.global, "cs" __ldcs (evict-first), "nc" __ldg (read-only path); stores: "plain", "cs" __stcs
KERNEL_VARIANTS = [
    (1024, 2, 1, "cs", "cs", False),  # the kernel shipped until 2026-12-01
    (1024, 2, 1, "cs", "cs", True),
    (1024, 2, 1, "plain", "plain", True),
    (1024, 2, 1, "cs", "plain", True),
    (1024, 2, 1, "plain", "cs", True),
    (1024, 2, 1, "nc", "plain", True),
    (512, 4, 4, "cs", "cs", True),
    (512, 4, 4, "plain", "plain", True),
    (512, 4, 4, "cs", "plain", True),
    (512, 4, 2, "plain", "plain", True),
]
LOAD_HINT = {"plain": 0, "cs": 1, "nc": 2}
STORE_HINT = {"plain": 0, "cs": 1}

VARIANT_SOURCE = r"""
template <int THREADS, int ITEMS, int MIN_BLOCKS, int LOAD, int STORE, bool EARLY_C>
__global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
kjv_row(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ c,
        float* __restrict__ out, int n, long long x_stride, long long out_stride) {
    const long long row = blockIdx.x;
    const float4* __restrict__ xr = reinterpret_cast<const float4*>(x + row * x_stride);
    const float4* __restrict__ wv = reinterpret_cast<const float4*>(w);
    float4* __restrict__ orow = reinterpret_cast<float4*>(out + row * out_stride);
    const float c_early = EARLY_C ? __ldg(c) : 0.0f;
    float4 xv[ITEMS];
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < n) xv[i] = LOAD == 1 ? __ldcs(xr + idx) : LOAD == 2 ? __ldg(xr + idx) : xr[idx];
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < n) acc = kj_dot(xv[i], __ldg(wv + idx), acc);
    }
    const float g = kj_gelu(kj_block_sum<THREADS>(acc) + (EARLY_C ? c_early : __ldg(c)));
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        const int idx = threadIdx.x + i * THREADS;
        if (idx < n) {
            if (STORE == 1) __stcs(orow + idx, kj_add(xv[i], g));
            else orow[idx] = kj_add(xv[i], g);
        }
    }
}

template <int THREADS, int ITEMS, int MIN_BLOCKS, int LOAD, int STORE, bool EARLY_C>
int kjv_go(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& c, torch::Tensor* out) {
    auto kernel = kjv_row<THREADS, ITEMS, MIN_BLOCKS, LOAD, STORE, EARLY_C>;
    if (out == nullptr) {
        cudaFuncAttributes attr;
        C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
        return attr.numRegs;
    }
    kernel<<<(unsigned)x.size(0), THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), w.data_ptr<float>(), c.data_ptr<float>(), out->data_ptr<float>(),
        (int)(x.size(1) / 4), (long long)x.stride(0), (long long)out->stride(0));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return 0;
}

int kjv_dispatch(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& c, torch::Tensor* out,
                 int64_t v) {
    switch (v) {
%CASES%
    }
    TORCH_CHECK(false, "no such variant");
    return -1;
}

torch::Tensor kjv_run(torch::Tensor x, torch::Tensor w, torch::Tensor c, int64_t v) {
    TORCH_CHECK(x.is_contiguous() && x.size(1) % 4 == 0, "contiguous x, in_features % 4 == 0");
    auto out = torch::empty_like(x);
    kjv_dispatch(x, w, c, &out, v);
    return out;
}

int64_t kjv_regs(int64_t v) { return kjv_dispatch(torch::Tensor(), torch::Tensor(), torch::Tensor(), nullptr, v); }
"""


def variant_label(variant) -> str:
    threads, items, min_blocks, load, store, early_c = variant
    return f"cuda {threads}x{items} minb={min_blocks} ld={load} st={store}{' c-early' if early_c else ''}"




def build_variants():
    cases = "\n".join(f"        case {i}: return kjv_go<{t}, {it}, {mb}, {LOAD_HINT[ld]}, {STORE_HINT[st]}, "
                      f"{str(ec).lower()}>(x, w, c, out);" for i, (t, it, mb, ld, st, ec) in enumerate(KERNEL_VARIANTS))
    return load_inline(
        "kj_l2_51_variants", cpp_sources=["torch::Tensor kjv_run(torch::Tensor x, torch::Tensor w, torch::Tensor c, "
                                          "int64_t v);\nint64_t kjv_regs(int64_t v);"],
        cuda_sources=[cuda_source() + VARIANT_SOURCE.replace("%CASES%", cases)], functions=["kjv_run", "kjv_regs"],
        extra_cflags=["-O3"], extra_cuda_cflags=["-O3"])


def build_all():
    """The shipped CUDA solution (compiled at import) and the variant extension, built in parallel."""
    built = {}

    def run(key, fn):
        try:
            built[key] = fn()
        except BaseException as exc:  # re-raised below, in the main thread
            built[key] = exc

    threads = [threading.Thread(target=run, args=("cuda", lambda: load(SOLUTIONS / "cuda.py", "kj_sol_cuda"))),
               threading.Thread(target=run, args=("variants", build_variants))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for key, value in built.items():
        if isinstance(value, BaseException):  # a parallel-build clash: once more, alone
            print(f"{key}: parallel build failed ({value!r}), building alone")
            run(key, {"cuda": lambda: load(SOLUTIONS / "cuda.py", "kj_sol_cuda2"), "variants": build_variants}[key])
            if isinstance(built[key], BaseException):
                raise built[key]
    print(f"builds: {time.perf_counter() - start:.1f} s", flush=True)
    return built["cuda"], built["variants"]


def max_err(out, ref) -> float:
    return (out.double() - ref).abs().max().item()


def check(label, out, ref):
    ok = torch.allclose(out.double(), ref, atol=TOLERANCE, rtol=TOLERANCE)
    if not ok:
        print(f"  WRONG {label}: max_abs_err {max_err(out, ref):.3g}")
    return ok


def main() -> None:
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/kj_torch_ext")
    device = torch.device("cuda")
    problem = load(PROBLEM, "kj_problem")
    init = problem.get_init_inputs()
    sol_cuda, variants = build_all()
    modules = {"cuda": sol_cuda, "triton": load(SOLUTIONS / "triton.py", "kj_sol_triton"),
               "pytorch": load(SOLUTIONS / "pytorch.py", "kj_sol_pytorch")}

    torch.manual_seed(0)
    ref = problem.Model(*init).to(device)
    ref64 = problem.Model(*init).to(device).double()
    ref64.load_state_dict(ref.state_dict())
    x = problem.get_inputs()[0].to(device)

    def reference(inp):
        with torch.no_grad():
            return ref64(inp.double())

    expected = reference(x)
    checks = {}
    models = {}
    for name, module in modules.items():
        normal = module.ModelNew(*init).to(device)
        normal.load_state_dict(ref.state_dict())
        models[f"{name}"] = (normal, False)
        with torch.device(device), torch.inference_mode():
            inf = module.ModelNew(*init)
            inf.load_state_dict(ref.state_dict())
        assert inf.gemm.weight.is_inference()
        models[f"{name} inference_mode"] = (inf, True)

    def call(model, inference, inp=x):
        if inference:
            with torch.inference_mode():
                return model(inp)
        with torch.no_grad():
            return model(inp)

    for label, (model, inference) in models.items():
        checks[label] = check(label, call(model, inference), expected)

    # variants of the kernel, against the shipped CUDA output (w_mean, c from the shipped cache)
    w_mean, c = models["cuda"][0]._kj_derived()
    shipped_out = call(*models["cuda"])
    regs = {}
    for i, variant in enumerate(KERNEL_VARIANTS):
        label = variant_label(variant)
        regs[label] = variants.kjv_regs(i)
        out = variants.kjv_run(x, w_mean, c, i)
        checks[label] = torch.equal(out, shipped_out) or check(label, out, expected)

    rows = [("copy floor: x.clone()", lambda: x.clone())]
    rows += [(label, lambda m=model, inf=inference: call(m, inf)) for label, (model, inference) in models.items()]
    params = (ref.gemm.weight, ref.gemm.bias, ref.subtract)
    compute = modules["pytorch"].ModelNew._kj_compute
    rows.append(("refresh alone (shipped)", lambda: compute(*params)))
    rows.append(("refresh alone (float64 acc, until 12-01)",
                 lambda: (ref.gemm.weight.mean(dim=0, dtype=torch.float64).float(),
                          (ref.gemm.bias.mean(dtype=torch.float64) - ref.subtract.mean(dtype=torch.float64)).float())))
    rows += [(variant_label(v), lambda i=i: variants.kjv_run(x, w_mean, c, i)) for i, v in enumerate(KERNEL_VARIANTS)]

    times = {label: [] for label, _ in rows}
    for _ in range(ROUNDS):
        for label, fn in rows:
            times[label].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))

    # parameters changed in place (under inference_mode for inference tensors), then one replaced
    with torch.no_grad():
        ref.gemm.weight.mul_(1.5).add_(0.01)
        ref.subtract.add_(0.25)
        ref64.load_state_dict(ref.state_dict())
    expected = reference(x)
    for label, (model, inference) in models.items():
        with torch.inference_mode() if inference else torch.no_grad():
            model.gemm.weight.mul_(1.5).add_(0.01)
            model.subtract.add_(0.25)
        checks[label] = checks[label] and check(label + " (in place)", call(model, inference), expected)
    new_bias = torch.randn_like(ref.gemm.bias)
    with torch.no_grad():
        ref.gemm.bias = torch.nn.Parameter(new_bias.clone())
        ref64.load_state_dict(ref.state_dict())
    expected = reference(x)
    for label, (model, inference) in models.items():
        with torch.inference_mode() if inference else torch.no_grad():
            model.gemm.bias = torch.nn.Parameter(new_bias.clone())
        checks[label] = checks[label] and check(label + " (replaced)", call(model, inference), expected)

    copy_ms = statistics.median(times["copy floor: x.clone()"])
    table = []
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  do_bench median, {ROUNDS} rounds")
    print(f"{'row':44} {'ms':>8} {'x copy':>7} {'spread':>7} {'regs':>5} {'correct':>7}")
    for label, samples in times.items():
        ms = statistics.median(samples)
        spread = (max(samples) - min(samples)) / ms
        row = {"row": label, "ms": ms, "x_copy": ms / copy_ms, "spread": spread, "samples_ms": samples,
               "regs": regs.get(label), "correct": checks.get(label)}
        table.append(row)
        print(f"{label:44} {ms:8.4f} {ms / copy_ms:7.3f} {spread:7.1%} {regs.get(label, ''):>5} "
              f"{'' if label not in checks else ('yes' if checks[label] else 'NO'):>7}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "l2_51_variants.json").write_text(json.dumps(table, indent=1))


if __name__ == "__main__":
    main()
