"""Batch throughput on one GPU (issue 15): a mixed batch through the batch scheduler, as `kerneljudge run`
runs it, with where the time went.

    PYTHONPATH=src python benchmarks/batch_throughput.py [--lanes N] [--budget-ms 300] [--warm]

The batch (~42 candidates) is generated from the problems shipped in the repository (the built-in suite:
5 level-1 problems and level2/51, at their full sizes), so it needs nothing beside the repository:
per problem an honest PyTorch rewrite (the problem's computation restated as ModelNew) twice, a wrong
one and a crashing one; and CUDA `load_inline` candidates, every one a distinct source (so a cold build
each, in a fresh cache unless --warm): ReLU, softmax and sum kernels at several block sizes (honest), a
wrong ReLU kernel, an out-of-bounds kernel (illegal address: a poisoned CUDA context), a compile error,
and the shipped level2/51 CUDA solution under four extension names. Timing is on (baselines: eager; the
torch.compile baseline is off to keep the run under 8 minutes; say --compile-baseline to include it).

Prints a table per candidate and the totals: candidates per GPU-hour; the lane's busy fraction while
built candidates were waiting (time a lane was judging / time candidates were ready and waiting), and
the GPU's utilisation then (nvidia-smi, sampled every 0.25 s, when available); the batch's wall time
against the sum of the per-candidate stage times and against the issue's bound
max(total build time / CPU cores, total judging time) x 1.2; the time per candidate from the first result
to the last (past the processes' cold start); and where a lane's time went per candidate (its stages, the
processes' end, the waits for the device's other lanes and for its spares' start).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kerneljudge import suite
from kerneljudge.batch.runner import local_batch
from kerneljudge.options import Options

PROBLEMS = ["level1/1", "level1/19", "level1/23", "level1/47", "level1/63", "level2/51"]

HEAD = "import os\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

ELEMENTWISE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
__global__ void kj_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { BODY; }
}
torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    kj_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="NAME", cpp_sources="torch::Tensor run(torch::Tensor x);", cuda_sources=SOURCE,
                  functions=["run"])


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        return ext.run(x.contiguous())
'''

ROWWISE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
// one thread per output element of a (rows, inner) view: KIND
__global__ void kj_kernel(const float* x, float* y, long rows, long length, long inner) {
    long o = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (o >= rows * inner) return;
    long r = o / inner, c = o % inner;
    const float* p = x + r * length * inner + c;
    BODY
}
torch::Tensor run(torch::Tensor x, long dim) {
    x = x.contiguous();
    long length = x.size(dim), rows = 1, inner = 1;
    for (long d = 0; d < dim; ++d) rows *= x.size(d);
    for (long d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    auto y = OUTPUT;
    long n = rows * inner;
    kj_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, length, inner);
    return y;
}
"""
ext = load_inline(name="NAME", cpp_sources="torch::Tensor run(torch::Tensor x, long dim);", cuda_sources=SOURCE,
                  functions=["run"])


class ModelNew(nn.Module):
    def __init__(self, dim=1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return ext.run(x, self.dim)
'''
SOFTMAX_BODY = ("float m = -INFINITY; for (long k = 0; k < length; ++k) m = fmaxf(m, p[k * inner]);"
                " float s = 0.f; for (long k = 0; k < length; ++k) s += expf(p[k * inner] - m);"
                " float* q = y + r * length * inner + c;"
                " for (long k = 0; k < length; ++k) q[k * inner] = expf(p[k * inner] - m) / s;")
SUM_BODY = "float s = 0.f; for (long k = 0; k < length; ++k) s += p[k * inner]; y[o] = s;"
SUM_OUTPUT = "torch::empty({rows, 1, inner}, x.options()).view([&]{ auto s = x.sizes().vec(); s[dim] = 1; return s; }())"


def _model_copy(problem_path: Path) -> str:
    """The problem's computation restated as ModelNew (its Model class, renamed)."""
    source = problem_path.read_text()
    start = source.index("class Model(")
    end = source.find("\n\n\n", start)
    body = source[start:end if end > 0 else len(source)]
    return HEAD + "\n\n" + body.replace("class Model(", "class ModelNew(").replace("super(Model,", "super(ModelNew,") + "\n"


def _with_forward_change(copy: str, change: str) -> str:
    """The copy with its forward's return value changed (`change` formats the returned expression)."""
    lines = copy.splitlines()
    forward = next(i for i, line in enumerate(lines) if "def forward" in line)
    returns = [i for i in range(forward, len(lines)) if lines[i].strip().startswith("return ")]
    last = returns[-1] if returns else None
    if last is None:
        raise ValueError("no return in forward")
    indent = lines[last][:len(lines[last]) - len(lines[last].lstrip())]
    lines[last] = indent + "return " + change.format(lines[last].strip()[len("return "):])
    return "\n".join(lines) + "\n"


def generate(folder: Path, shipped_copies: int = 4, one_build: bool = False) -> list[dict]:
    """The candidate files and the manifest entries (problem, solution, id, kind). `shipped_copies` of the
    shipped level2/51 CUDA solution, each under an extension name of its own (a cold build each), or with
    `one_build` all under its own name (one build, shared with `kerneljudge eval l2/51 @cuda`, then every copy
    loads it: the judging of built candidates)."""
    entries = []

    def add(problem: str, name: str, text: str, kind: str) -> None:
        path = folder / f"{problem.replace('/', '_')}__{name}.py"
        path.write_text(text)
        entries.append({"problem": problem, "solution": str(path), "id": f"{problem}/{name}", "kind": kind})

    tag = os.urandom(3).hex()  # distinct extension names per run of the benchmark: cold builds in a warm cache too
    for problem in PROBLEMS:
        copy = _model_copy(suite.find_builtin(problem).path)
        add(problem, "honest", copy, "pytorch honest")
        add(problem, "honest2", copy.replace("import os\n", "import os  # restated\n"), "pytorch honest")
        add(problem, "wrong", _with_forward_change(copy, "({}) * 1.01 + 0.01"), "pytorch wrong")
        add(problem, "crash", _with_forward_change(copy, "os._exit(3) or ({})"), "pytorch crash")
    for block in (128, 256, 512, 1024):
        add("level1/19", f"cuda_relu_{block}", ELEMENTWISE.replace("BODY", "y[i] = x[i] < 0.f ? 0.f : x[i]")
            .replace("BLOCK", str(block)).replace("NAME", f"kj_relu_{block}_{tag}"), "cuda honest")
    add("level1/19", "cuda_relu_wrong", ELEMENTWISE.replace("BODY", "y[i] = x[i] > 0.1f ? x[i] : 0.f")
        .replace("BLOCK", "256").replace("NAME", f"kj_relu_wrong_{tag}"), "cuda wrong")
    add("level1/19", "cuda_illegal_address", ELEMENTWISE.replace("BODY", "y[i + (1L << 40)] = x[i]")
        .replace("BLOCK", "256").replace("NAME", f"kj_relu_oob_{tag}"), "cuda crash (poisoned context)")
    add("level1/19", "cuda_compile_error", ELEMENTWISE.replace("BODY", "y[i] = undefined_name(x[i])")
        .replace("BLOCK", "256").replace("NAME", f"kj_relu_bad_{tag}"), "cuda compile error")
    for block in (128, 256, 512):
        add("level1/23", f"cuda_softmax_{block}", ROWWISE.replace("BODY", SOFTMAX_BODY).replace("OUTPUT", "torch::empty_like(x)")
            .replace("BLOCK", str(block)).replace("KIND", "softmax").replace("NAME", f"kj_softmax_{block}_{tag}")
            .replace("def __init__(self, dim=1)", "def __init__(self, dim=1)"), "cuda honest")
    for block in (128, 256, 512):
        add("level1/47", f"cuda_sum_{block}", ROWWISE.replace("BODY", SUM_BODY).replace("OUTPUT", SUM_OUTPUT)
            .replace("BLOCK", str(block)).replace("KIND", "sum").replace("NAME", f"kj_sum_{block}_{tag}"), "cuda honest")
    shipped = suite.shipped_solutions("level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd")["cuda"].read_text()
    for variant in range(shipped_copies):
        renamed = shipped if one_build else re.sub(r'name="([A-Za-z0-9_]+)"',
                                                   lambda m: f'name="{m.group(1)}_{variant}_{tag}"', shipped)
        add("level2/51", f"cuda_shipped_{variant}", renamed + f"\n# copy {variant}\n", "cuda honest")
    return entries


class Sampler:
    """Samples, every 0.25 s: whether candidates were built and waiting, how many lanes were judging, and
    the GPU's utilisation (nvidia-smi) when available."""

    def __init__(self, lanes: int, smi: bool):
        self.lanes = lanes
        self.status = None
        self.samples: list[tuple[bool, set[str], list[float]]] = []
        self.done = threading.Event()
        self.smi = shutil.which("nvidia-smi") if smi else None

    def on_change(self, status) -> None:
        self.status = status

    def _gpu_utilisation(self) -> list[float]:
        """Each visible GPU's utilisation in %, in nvidia-smi's order (empty without nvidia-smi)."""
        if not self.smi:
            return []
        try:
            out = subprocess.run([self.smi, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=2).stdout
            return [float(line) for line in out.split()]
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return []

    def run(self) -> None:
        while not self.done.wait(0.25):
            status = self.status
            if status is None:
                continue
            judging = {lane for lane, doing in status.lanes.items() if doing not in ("idle", "done")}
            self.samples.append((status.ready > 0, judging, self._gpu_utilisation()))


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lanes", type=int, default=None, help="judging lanes (default: every visible GPU)")
    parser.add_argument("--lanes-per-gpu", type=int, default=1, help="lanes sharing a GPU (checks overlap)")
    parser.add_argument("--budget-ms", type=float, default=300.0)
    parser.add_argument("--compile-baseline", action="store_true")
    parser.add_argument("--warm", action="store_true", help="reuse ~/.cache/kerneljudge (default: a fresh cache)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--pytorch-only", action="store_true", help="leave the CUDA candidates out (a CPU smoke run)")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated subset of the problems")
    parser.add_argument("--gpu-util", action="store_true", help="also sample the GPU's utilisation with nvidia-smi "
                        "every 0.25 s (it disturbs the timings it watches: see docs/benchmarks.md)")
    parser.add_argument("--stop-after-s", type=float, default=None, help="stop taking results after this long "
                        "(the totals then cover the candidates finished by then; a device call's limit)")
    parser.add_argument("--shipped-copies", type=int, default=4, help="copies of the shipped level2/51 CUDA solution")
    parser.add_argument("--one-build", action="store_true", help="the copies share one extension (one cold build, "
                        "then cache hits: what judging built candidates costs)")
    parser.add_argument("--save", type=Path, default=None, help="write each candidate's id, verdict, codes and lane "
                        "here (JSON lines), to compare two runs")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kj-batch-bench-"))
    chosen = args.problems.split(",")
    entries = [e for e in generate(work, args.shipped_copies, args.one_build) if e["problem"] in chosen and
               not (args.pytorch_only and e["kind"].startswith("cuda"))]
    cache_dir = Options().cache_dir if args.warm else work / "cache"
    options = Options(device=args.device, store_path=None, cache_dir=cache_dir, problems_root=None).replace(
        timing={"budget_ms": args.budget_ms, "compile_baseline": args.compile_baseline}, worker={"timeout_s": 240.0})
    kinds = {e["id"]: e["kind"] for e in entries}
    print(f"{len(entries)} candidates over {len(chosen)} problems; cache {cache_dir}; {os.cpu_count()} CPU cores",
          flush=True)
    rows, ended_s = [], []  # ended_s: when each result came, from the batch's start
    started = time.monotonic()
    with local_batch(entries, options, lanes=args.lanes, lanes_per_gpu=args.lanes_per_gpu) as batch:
        lanes = len(batch.scheduler.backend.lanes())
        sampler = Sampler(lanes, smi=args.gpu_util)
        batch.scheduler.on_change = sampler.on_change
        thread = threading.Thread(target=sampler.run, daemon=True)
        thread.start()
        gates = {id(lane.gate): (lane.device, lane.gate) for lane in batch.scheduler.backend.lanes()}
        gate_spent: list[dict] = []  # each gate's accounts at the first result and at the last (the steady state)
        judge_cpu_s: list[float] = []  # this process's CPU seconds (all lanes' threads) then: is one core its bound?
        for finished, line in batch:
            stage_ms = sum(finished.result.stage_ms.values())
            rows.append((finished, line, stage_ms))
            ended_s.append(time.monotonic() - started)
            gate_spent[1 if gate_spent else 0:] = [{device: gate.spent_s() for device, gate in gates.values()}]
            judge_cpu_s[1 if judge_cpu_s else 0:] = [_cpu_s()]
            print(f"{time.monotonic() - started:7.1f} s  {finished.job.id:34} {kinds[finished.job.id]:30} "
                  f"{line['verdict']:5} {','.join(line['codes'][:3])[:40]:40} build {finished.build_ms / 1e3:6.1f} s "
                  f"judge {finished.judge_ms / 1e3:6.1f} s wait {finished.waited_ms / 1e3:6.1f} s", flush=True)
            if args.stop_after_s and time.monotonic() - started > args.stop_after_s:
                print(f"stopped after {time.monotonic() - started:.0f} s: {len(rows)} of {len(entries)} candidates "
                      "finished; the totals below cover those", flush=True)
                break
        sampler.done.set()
        wall_s = time.monotonic() - started
    build_s = sum(f.build_ms for f, _, _ in rows) / 1e3
    judge_s = sum(f.judge_ms for f, _, _ in rows) / 1e3
    stages_s = sum(s for _, _, s in rows) / 1e3
    waiting = [s for s in sampler.samples if s[0]]
    busy = sum(min(len(s[1]), lanes) for s in waiting) / (len(waiting) * lanes) if waiting else None
    lane_names = [lane.name for lane in batch.scheduler.backend.lanes()]
    per_lane = {name: sum(name in s[1] for s in waiting) / len(waiting) for name in lane_names} if waiting else {}
    per_gpu = [sum(u) / len(u) for u in zip(*[s[2] for s in waiting if s[2]])]
    utilisation = [sum(s[2]) / len(s[2]) for s in waiting if s[2]]
    bound = 1.2 * max(build_s / (os.cpu_count() or 1), judge_s / lanes)
    gpus = max(1, lanes // args.lanes_per_gpu)  # lanes sharing a GPU share its hour
    verdicts = {v: sum(line["verdict"] == v for _, line, _ in rows) for v in ("pass", "fail", "error")}
    print()
    print("| candidates | lanes | wall s | per candidate s | candidates/GPU-hour | sum build s | sum judge s | "
          "sum stage s | wall / stage sum | bound 1.2 x max(build/cores, judge/lanes) s | lane busy while waiting | "
          "GPU util while waiting | pass/fail/error |")
    print("|" + "---|" * 13)
    print(f"| {len(rows)} | {lanes} | {wall_s:.1f} | {wall_s / max(1, len(rows)):.2f} | "
          f"{3600 * len(rows) / (wall_s * gpus):.0f} | {build_s:.1f} | {judge_s:.1f} | {stages_s:.1f} | "
          f"{wall_s / stages_s:.2f} | {bound:.1f} | {f'{100 * busy:.0f}%' if busy is not None else 'n/a'} | "
          f"{f'{sum(utilisation) / len(utilisation):.0f}%' if utilisation else 'n/a'} | "
          f"{verdicts['pass']}/{verdicts['fail']}/{verdicts['error']} |")
    if len(ended_s) > 1:  # past the first result: the processes' cold start (the fork server's) is behind
        print(f"steady state: {(ended_s[-1] - ended_s[0]) / (len(ended_s) - 1):.2f} s per candidate between the first "
              f"result ({ended_s[0]:.1f} s) and the last")
        cpu_s = judge_cpu_s[-1] - judge_cpu_s[0]
        print(f"the judge's process (every lane's thread) then: {cpu_s:.1f} CPU s over {ended_s[-1] - ended_s[0]:.1f} s, "
              f"{100 * cpu_s / max(1e-9, ended_s[-1] - ended_s[0]):.0f}% of one core")
        for device, last in gate_spent[-1].items():  # (batch/gate.py: a timing's drain stalls the other lanes too)
            spent = {state: last[state] - gate_spent[0][device][state] for state in last}
            total = sum(spent.values()) or 1.0
            print(f"gate of {device} then: " + ", ".join(f"{state} {100 * seconds / total:.0f}%"
                                                         for state, seconds in spent.items())
                  + f" of {total:.1f} s; per candidate: timing {spent['timing'] / (len(ended_s) - 1):.2f} s, "
                  f"draining {spent['draining'] / (len(ended_s) - 1):.2f} s")
        for device, gate in gates.values():  # the whole run's
            waits = sorted(gate.waited_for_s().items(), key=lambda item: -item[1])
            print(f"the timings on {device} waited, by what ended last before each went: "
                  + ", ".join(f"{what} {seconds:.1f} s" for what, seconds in waits[:8]))
    print("busy while built candidates waited, per lane: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in per_lane.items())
          + "; GPU utilisation then, per GPU: " + ", ".join(f"{u:.0f}%" for u in per_gpu))
    if args.save:
        with args.save.open("w") as saved:
            for finished, line, _ in rows:
                blocking = [{"code": f.code, "message": f.message, "details": f.details}
                            for f in finished.result.findings if f.severity in ("fail", "error")]
                timing_json = (finished.result.timing or {})
                saved.write(json.dumps({"id": finished.job.id, "verdict": line["verdict"], "codes": line["codes"],
                                        "lane": finished.lane, "findings": blocking,
                                        "cross_check": timing_json.get("cross_check") or (timing_json.get("candidate") or {}).get("cross_check"),
                                        "stage_ms": finished.result.stage_ms}, default=str) + "\n")
    judged = [(f, s) for f, _, s in rows if f.lane is not None]
    if judged:
        def mean_s(values) -> float:
            return sum(values) / len(judged) / 1e3

        parts = {name: mean_s(f.result.stage_ms.get(name, 0.0) for f, _ in judged)
                 for name in ("closing", "gate-wait", "spares-wait")}
        judge, stages = mean_s(f.judge_ms for f, _ in judged), mean_s(s for _, s in judged)
        print(f"judged on a lane: {len(judged)}; mean judge {judge:.2f} s per candidate (stage_ms {stages:.2f} s: "
              + ", ".join(f"{name} {value:.2f} s" for name, value in parts.items())
              + f"; the rest of the lane's time {judge - stages:.2f} s)")
        for what, figures in (("stage", [f.result.stage_ms for f, _ in judged]),
                              ("probe", [f.result.probes.get("probe_ms") or {} for f, _ in judged])):
            names = sorted({name for ms in figures for name in ms})
            print(f"mean per {what}: " + ", ".join(f"{name} {mean_s(ms.get(name, 0.0) for ms in figures):.3f} s"
                                                   for name in names))
        timed = [f.result.timing for f, _ in judged if (f.result.timing or {}).get("candidate")]
        if timed:  # what a timing measured in its budget (the watched calls' waits are inside it)
            stops = sorted({t.get("stop_reason") for t in timed}, key=str)
            print(f"timings: {len(timed)}; mean {sum(t['candidate']['n'] for t in timed) / len(timed):.0f} timed calls, "
                  f"{sum(t.get('checked_outputs') or 0 for t in timed) / len(timed):.1f} outputs checked, relative SEM "
                  f"{sum(t['candidate'].get('rel_sem') or 0 for t in timed) / len(timed):.2%} a candidate; stopped by "
                  + ", ".join(f"{stop} {sum(t.get('stop_reason') == stop for t in timed)}" for stop in stops))
        plans = [(f.result.probes.get("ranges") or {}).get("plan") for f, _ in judged]
        print(f"range plans: {plans.count('made')} made, {plans.count('kept')} kept, {plans.count('remade')} remade "
              "(stages/probe.py)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
