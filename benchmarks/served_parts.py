"""Where a served level2/51 evaluation's two largest parts go, measured in one process (GPU):
first, what the reference's first calls in a fresh process cost beside its later ones (float32 and float64),
after the libraries' set-up that a process makes when it takes its GPU (a spare, before its evaluation);
the referee's comparison of a full-size output (`referee/compare.compare`, per CLOSE_BLOCK size: time and
temporaries), and one timed batch of a fast candidate in the worker (`proc/timed.TimedModel.batch`:
whole batch, then its parts: the refills' draws, the flushes, the calls, the synchronisation); a large
tensor's way into a sealed memory file and out of it.

    PYTHONPATH=src python benchmarks/served_parts.py [--device cuda] [--repeats 30] [--only comparison,...]
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import torch

from kerneljudge import timing
from kerneljudge.problem import load_problem
from kerneljudge.proc import machine
from kerneljudge.proc.inputs import make_inputs, synchronize
from kerneljudge.proc.timed import TimedModel
from kerneljudge.referee import compare
from kerneljudge.worker.build import import_problem

ROOT = Path(__file__).resolve().parents[1]
TRITON = ROOT / "src/kerneljudge/suite/solutions/level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd"


def _ms(fn, repeats: int, device: torch.device) -> float:
    """Median wall time of `fn` in ms, synchronised after each call."""
    times = []
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter()
        fn()
        synchronize(device)
        times.append((time.perf_counter() - started) * 1e3)
    return sorted(times)[len(times) // 2]


def comparison(device: torch.device, repeats: int) -> None:
    truth = torch.randn(2048, 8192, dtype=torch.float64, device=device)
    native = truth.float()
    out = native + 1e-7 * torch.randn_like(native)
    received = compare.Received("tensor", [{"exact": True, "device": str(device)}], [out])
    outline = compare.Outline.of(native)
    largest, per_output = compare.CLOSE_BLOCK[device.type], compare.CLOSE_BLOCKS_PER_OUTPUT
    for block in (0, 1 << 18, 1 << 19, 1 << 20, 1 << 21, 1 << 22, 1 << 23):  # 0: as the judge compares
        if block:
            compare.CLOSE_BLOCK[device.type], compare.CLOSE_BLOCKS_PER_OUTPUT = block, 1
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            held = torch.cuda.memory_allocated(device)
        for verdict_only in (False, True):
            ms = _ms(lambda: compare.compare(0, received, outline, native, truth, 1e-4, 1e-4,
                                             verdict_only=verdict_only), repeats, device)
            extra = (torch.cuda.max_memory_allocated(device) - held) / 2**20 if device.type == "cuda" else float("nan")
            print(f"compare 2048x8192 float32 vs float64{' (verdict only)' if verdict_only else ''}, block "
                  f"{f'{block >> 10}K elements' if block else 'as judged'}: {ms:.2f} ms, temporaries {extra:.0f} MiB")
        compare.CLOSE_BLOCK[device.type], compare.CLOSE_BLOCKS_PER_OUTPUT = largest, per_output
    unwritten = _ms(lambda: compare.unwritten(received, native), repeats, device)
    if device.type == "cuda":
        emptied = _ms(lambda: (torch.cuda.empty_cache(),
                               compare.compare(0, received, outline, native, truth, 1e-4, 1e-4)), repeats, device)
        print(f"unwritten(): {unwritten:.2f} ms; compare right after torch.cuda.empty_cache(): {emptied:.2f} ms")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"sol_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def batches(device: torch.device, repeats: int) -> None:
    problem = load_problem("level2/51", preset=None if device.type == "cuda" else "small", overrides=(),
                           small_if_builtin=False)
    module = import_problem(str(problem.path), problem.source, problem.constants)
    torch.manual_seed(0)
    candidates = {"x*2+1 (elementwise)": lambda args: args[0] * 2.0 + 1.0}
    try:
        solution = _load(TRITON / "triton.py")
        model = solution.ModelNew(*module.get_init_inputs()).to(device).eval()
        candidates["triton solution"] = lambda args: model(*args)
    except Exception as exc:  # noqa: BLE001 - a benchmark: say why and go on with the other candidate
        print("triton solution unavailable:", type(exc).__name__, exc)
    for name, call in candidates.items():
        timed = TimedModel(call, module, device, [11, 12, 13, 14], "cuda-events", time.perf_counter_ns)
        sets = len(timed.sets)
        first = [0]

        def batch(refilled: bool) -> list[float]:
            refills = {first[0] + k: 1000 + first[0] + k for k in range(sets)} if refilled else {}
            samples = timed.batch(first[0], sets, refills)
            first[0] += sets
            return samples

        for _ in range(5):
            batch(True)
        whole = _ms(lambda: batch(True), repeats, device)
        bare = _ms(lambda: batch(False), repeats, device)
        draws = _ms(lambda: [make_inputs(module, 7, device) for _ in range(sets)], repeats, device)
        flusher = timing.L2Flusher.for_cuda_device(device) if device.type == "cuda" else timing.CpuCacheFlusher()
        flushes = _ms(lambda: [flusher() for _ in range(sets)], repeats, device)
        with torch.inference_mode():
            calls = _ms(lambda: [call(timed.sets[k]) for k in range(sets)], repeats, device)
        samples = batch(True)
        print(f"{name}: a batch of {sets} calls with every set refilled {whole:.2f} ms, none refilled {bare:.2f} ms; "
              f"parts alone: {sets} draws {draws:.2f} ms, {sets} flushes {flushes:.2f} ms, {sets} calls "
              f"{calls:.2f} ms; claimed call times {[round(s, 4) for s in samples]}")


def first_calls(device: torch.device) -> None:
    """The reference's calls in this fresh process, in float32 then float64, after the set-up a process makes
    when it takes its GPU: each of the first three timed."""
    problem = load_problem("level2/51", preset=None if device.type == "cuda" else "small", overrides=(),
                           small_if_builtin=False)
    module = import_problem(str(problem.path), problem.source, problem.constants)
    if device.type == "cuda":
        started = time.perf_counter()
        machine.warm_libraries(device)
        print(f"the libraries' set-up when the process takes its GPU (proc/machine.warm_libraries): "
              f"{1e3 * (time.perf_counter() - started):.1f} ms")
    model = module.Model(*module.get_init_inputs()).to(device)
    args = make_inputs(module, 1, device)
    with torch.inference_mode():
        for dtype in (torch.float32, torch.float64):
            model, args = model.to(dtype), [a.to(dtype) for a in args]
            times = [_ms(lambda: model(*args), 1, device) for _ in range(3)]
            print(f"the reference's first three calls in this process, {dtype}: "
                  + ", ".join(f"{t:.2f} ms" for t in times))


def setup_parts(device: torch.device) -> None:
    """What a TimeSetup's TimedModel costs the first time in a process (a worker's or the referee's), part
    by part: the persisting-L2 reset's lookup, the flusher, the events, the input sets."""
    problem = load_problem("level2/51", preset=None if device.type == "cuda" else "small", overrides=(),
                           small_if_builtin=False)
    module = import_problem(str(problem.path), problem.source, problem.constants)
    parts = {}
    started = time.perf_counter()
    if device.type == "cuda":
        timing.find_persisting_l2_reset()
        parts["persisting-L2 lookup"] = time.perf_counter() - started
        started = time.perf_counter()
        timing.L2Flusher.for_cuda_device(device)
        parts["flusher"] = time.perf_counter() - started
        started = time.perf_counter()
        timing.cuda_event_timer(device, None, batch=4)
        parts["events"] = time.perf_counter() - started
    started = time.perf_counter()
    [make_inputs(module, s, device) for s in range(4)]
    synchronize(device)
    parts["4 input sets"] = time.perf_counter() - started
    started = time.perf_counter()
    TimedModel(lambda args: args[0], module, device, [1, 2, 3, 4], "cuda-events", time.perf_counter_ns)
    synchronize(device)
    parts["a second TimedModel"] = time.perf_counter() - started
    print("time setup, first in the process: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in parts.items()))


def packing(device: torch.device, repeats: int) -> None:
    """A large tensor of the device into a sealed memory file, as the referee sends the problem's state (where the
    worker's own build of it differs) and the worker an output that is not shared (`tensorwire._bytes_of`), against the ways it could be done instead:
    through pageable host memory (`.cpu()`) or a pinned buffer, then pwrite; and the receiving side
    (`unpack_tensor`: map, copy to the device)."""
    from kerneljudge import sealed
    from kerneljudge.proc import tensorwire
    for mib in (64, 256):
        t = torch.randn(mib << 18, device=device)
        pinned = torch.empty(t.shape, dtype=t.dtype, pin_memory=device.type == "cuda")
        def written(host: torch.Tensor) -> None:  # `host` stays alive while its bytes are written
            sealed.write_bytes(tensorwire.host_bytes(host)).close()

        ways = {"_bytes_of (mapping, device to host)": lambda: tensorwire._bytes_of(t).close(),
                ".cpu() then pwrite": lambda: written(t.cpu()),
                "pinned copy then pwrite": lambda: written(pinned.copy_(t))}
        figures = {name: _ms(way, repeats, device) for name, way in ways.items()}
        blob = tensorwire._bytes_of(t)
        meta = {"t": "tensor", "dtype": "float32", "shape": list(t.shape), "blob": 0}
        figures["unpack to the device"] = _ms(lambda: tensorwire.unpack_tensor(meta, [blob], device), repeats, device)
        print(f"{mib} MiB into a sealed file: " + ", ".join(f"{k} {v:.1f} ms" for k, v in figures.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--only", default=None, help="comma-separated parts: first-calls, setup, comparison, batches, "
                        "packing (default: all)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", device.index or 0)
        torch.cuda.set_device(device)
    parts = {"first-calls": lambda: first_calls(device), "setup": lambda: setup_parts(device),
             "comparison": lambda: comparison(device, args.repeats), "batches": lambda: batches(device, args.repeats),
             "packing": lambda: packing(device, min(args.repeats, 7))}
    chosen = args.only.split(",") if args.only else list(parts)
    unknown = sorted(set(chosen) - set(parts))
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; choose among {', '.join(parts)}")
    for name in chosen:
        parts[name]()


if __name__ == "__main__":
    main()
