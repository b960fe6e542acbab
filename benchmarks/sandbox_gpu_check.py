#!/usr/bin/env python
"""Does the worker's sandbox keep CUDA working? (issue 13) Lists the layers this machine allows, shows
what a sandboxed worker sees (GPU devices, network, writes to the judge's package), then judges the
shipped CUDA (load_inline, built cold in a fresh cache inside the sandbox) and Triton solutions of
level2/51 with every layer, and, if one fails, again with `dev`, then `mount` too, turned off, so the
table names the layer that breaks it.
Run: python benchmarks/sandbox_gpu_check.py   (one H200; about 2-4 min, most of it the cold CUDA build)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kerneljudge import sandbox  # noqa: E402
from kerneljudge.options import Options  # noqa: E402
from kerneljudge.pipeline import evaluate  # noqa: E402

SOLUTIONS = ROOT / "src/kerneljudge/suite/solutions/level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd"
PROBE = """
import glob, os, socket, sys
import torch
print("devices", " ".join(sorted(os.path.basename(p) for p in glob.glob("/dev/nvidia*"))))
print("cuda", torch.cuda.is_available(), torch.cuda.device_count(), float(torch.ones(4, device="cuda").sum()))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3); print("network reachable")
except OSError as exc:
    print("network blocked", exc.errno)
try:
    open(os.path.join(sys.argv[1], "zz_kj_probe"), "w").close(); print("package WRITABLE")
    os.unlink(os.path.join(sys.argv[1], "zz_kj_probe"))
except OSError as exc:
    print("package read-only", exc.errno)
"""


def inside(off: tuple[str, ...]) -> str:
    """What a process under the launcher sees with the layers allowed here minus `off`."""
    layers = sandbox.detect(off)
    folder = tempfile.mkdtemp(prefix="kj-gpu-probe-")
    command = sandbox.launch_command([sys.executable, "-c", PROBE, str(sandbox.package_dir())],
                                     layers=layers.active, writable=[folder],
                                     limits=sandbox.limits(120, 1024, 1024, 4096), judge_pid=os.getpid())
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=folder,
                          env=sandbox.launcher_env(dict(os.environ)))
    return (done.stdout + done.stderr[-400:]).strip()


def judge(solution: Path, off: tuple[str, ...], cache_dir: Path) -> dict:
    options = Options(device="cuda", store_path=None, cache_dir=cache_dir).replace(
        worker={"sandbox_off": off}, timing={"budget_ms": 300.0, "baselines": False})
    started = time.perf_counter()
    result = evaluate("level2/51", solution, options)
    return {"solution": solution.name, "off": ",".join(off) or "-", "verdict": result.verdict,
            "build_s": round(result.build.build_ms / 1e3, 1) if result.build else None,
            "median_ms": (result.timing or {}).get("candidate", {}).get("median_ms"),
            "wall_s": round(time.perf_counter() - started, 1),
            "codes": sorted({f.code for f in result.findings if f.severity in ("error", "fail")}),
            "active": " ".join(result.sandbox.get("active", [])),
            "tail": (result.worker_output_tail or "")[-300:] if result.verdict == "error" else ""}


def main() -> None:
    layers = sandbox.detect()
    print("layers active:", " ".join(layers.active))
    print("layers off:", json.dumps(layers.inactive))
    print("\n--- a process under the launcher, every layer:\n" + inside(()))
    cache_dir = Path(tempfile.mkdtemp(prefix="kj-gpu-cache-"))  # cold: the CUDA build runs in the sandbox
    rows = []
    for solution in (SOLUTIONS / "cuda.py", SOLUTIONS / "triton.py"):
        for off in ((), ("dev",), ("dev", "mount")):
            row = judge(solution, off, cache_dir)
            rows.append(row)
            if row["verdict"] == "pass":
                break
            print(f"\n--- {solution.name} failed with off={row['off']}; inside the launcher:\n" + inside(off))
    print(f"\n{'solution':10} {'off':10} {'verdict':7} {'build_s':>7} {'median_ms':>10} {'wall_s':>6}  codes / active")
    for r in rows:
        median = f"{r['median_ms']:.4f}" if r["median_ms"] else "-"
        print(f"{r['solution']:10} {r['off']:10} {r['verdict']:7} {str(r['build_s']):>7} {median:>10} "
              f"{r['wall_s']:>6}  {','.join(r['codes']) or '-'} / {r['active']}")
        if r["tail"]:
            print("   worker output tail:", r["tail"].replace("\n", " | "))


if __name__ == "__main__":
    main()
