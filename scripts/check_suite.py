#!/usr/bin/env python
"""Check the shipped kerneljudge suite: every problem (with a preset) against its solutions.

Standalone (no kerneljudge import). For every problem file under
src/kerneljudge/suite/level*/ and every shipped solution under
src/kerneljudge/suite/solutions/<level>/<problem stem>/<variant>.py it:

  * applies the preset (default "small") by rewriting the module-level int constants via AST,
  * seeds, builds Model and ModelNew, loads Model's state_dict into ModelNew (every reference
    key must be accepted; extra ModelNew buffers are allowed),
  * compares ModelNew's output with a float64 reference (atol = rtol = 1e-4 for fp32),
  * then mutates things and compares again: input buffers refilled in place, parameters
    p.mul_(0.5).add_(0.1) (outside and inside inference_mode), p.copy_(...), one parameter
    replaced by a new nn.Parameter, a .data swap, load_state_dict from another seed, a move to
    float64 and back,
  * for the seed problem (level2/51) also: bias=False, in_features=255, a misaligned view
    input, a non-contiguous input, batch 1, bf16 and fp16 models/inputs, full-width rows
    (in_features = out_features = 8192, batch 8).

Each (problem, solution) pair runs in its own subprocess; the triton variant runs with
TRITON_INTERPRET=1 on CPU. On a machine with CUDA (--device cuda) the cuda and triton
variants run on the GPU; on CPU the cuda variant is skipped (it cannot be built).

Usage:
  python scripts/check_suite.py [--device cpu|cuda] [--preset small] [--only SUBSTR]
                                [--variants pytorch,cpp,triton,cuda] [--seed-benchmarks]
Exit status 0 when everything expected to pass passed.
"""
from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "src" / "kerneljudge" / "suite"
BENCH_SEED = REPO / "benchmarks" / "seed"
SEED_STEM = "51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd"
VARIANT_ORDER = ["pytorch", "cpp", "triton", "cuda"]
MARK = "KJRESULT "


# --------------------------------------------------------------------------------------
# problem loading
# --------------------------------------------------------------------------------------
def read_presets(src: str) -> dict:
    for node in ast.parse(src).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "PRESETS"):
            return ast.literal_eval(node.value)
    return {}


def load_problem(path: Path, preset: str | None, overrides: dict | None = None):
    src = path.read_text()
    values = dict(read_presets(src).get(preset, {})) if preset else {}
    values.update(overrides or {})
    tree = ast.parse(src)
    consts = {}
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int):
            name = node.targets[0].id
            if name in values:
                node.value = ast.copy_location(ast.Constant(values[name]), node.value)
            consts[name] = node.value.value
    missing = set(values) - set(consts)
    if missing:
        raise KeyError(f"preset keys are not int constants of {path.name}: {sorted(missing)}")
    mod = types.ModuleType("kj_problem_" + path.stem.replace("-", "_"))
    mod.__file__ = str(path)
    exec(compile(ast.fix_missing_locations(tree), str(path), "exec"), mod.__dict__)
    return mod


def load_solution(path: Path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("kj_solution_" + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------------------
# worker: one (problem, solution) pair
# --------------------------------------------------------------------------------------
def emit(**kw):
    print(MARK + json.dumps(kw), flush=True)


def worker(problem: Path, solution: Path, preset: str, device: str, seed: int = 0):
    import torch
    import torch.nn as nn

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(device)
    is_seed = problem.stem == SEED_STEM

    t0 = time.time()
    try:
        sol = load_solution(solution)
    except Exception as e:  # build/import error
        emit(case="import", status="ERROR", err=None, note=f"{type(e).__name__}: {str(e)[:300]}")
        return
    emit(case="import", status="PASS", err=None, note=f"{time.time() - t0:.1f}s")

    def tol_for(dtype):
        return {torch.float32: 1e-4, torch.float64: 1e-6,
                torch.bfloat16: 2e-2, torch.float16: 1e-2}.get(dtype, 1e-4)

    def to_dev(x, dtype=None):
        if isinstance(x, torch.Tensor):
            x = x.to(dev)
            if dtype is not None and x.is_floating_point():
                x = x.to(dtype)
        return x

    def build(prob, init):
        torch.manual_seed(seed)
        ref = prob.Model(*init)
        torch.manual_seed(seed)
        new = sol.ModelNew(*init)
        res = new.load_state_dict(ref.state_dict(), strict=False)
        if res.unexpected_keys:
            raise RuntimeError(f"ModelNew rejects reference keys: {res.unexpected_keys}")
        ref_keys = set(ref.state_dict())
        miss = ref_keys - set(new.state_dict())
        if miss:
            raise RuntimeError(f"ModelNew lacks reference keys: {sorted(miss)}")
        ref.eval().to(dev)
        new.eval().to(dev)
        return ref, new

    def compare(case, ref, new, inputs, note=""):
        fdt = next((i.dtype for i in inputs if isinstance(i, torch.Tensor) and i.is_floating_point()),
                   torch.float32)
        tol = tol_for(fdt)
        try:
            with torch.inference_mode():
                ref64 = copy.deepcopy(ref).double()
                exp = ref64(*[i.double() if isinstance(i, torch.Tensor) and i.is_floating_point()
                              else i for i in inputs])
                t = time.time()
                out = new(*inputs)
                if out.is_cuda:
                    torch.cuda.synchronize()
                dt = time.time() - t
        except Exception as e:
            emit(case=case, status="ERROR", err=None,
                 note=f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
            return
        problems = []
        if tuple(out.shape) != tuple(exp.shape):
            problems.append(f"shape {tuple(out.shape)} != {tuple(exp.shape)}")
        if out.dtype != fdt:
            problems.append(f"dtype {out.dtype} != {fdt}")
        err = None
        if not problems:
            o, e_ = out.detach().to("cpu", torch.float64), exp.to("cpu", torch.float64)
            diff = (o - e_).abs()
            err = float(diff.max()) if diff.numel() else 0.0
            ok = torch.isclose(o, e_, atol=tol, rtol=tol, equal_nan=True).all().item()
            if not ok:
                problems.append(f"mismatch (tol {tol:g})")
        emit(case=case, status="FAIL" if problems else "PASS", err=err,
             note="; ".join(problems + ([note] if note else []) + [f"fwd {dt * 1e3:.1f}ms"]))

    def params_by_name(m):
        return dict(m.named_parameters())

    def mutate_both(ref, new, fn):
        """Apply fn(name, param) in place to matching parameters of both models."""
        pn = params_by_name(new)
        with torch.no_grad():
            for name, p in ref.named_parameters():
                fn(name, p)
                if name in pn:
                    fn(name, pn[name])
        if any(name not in pn for name, _ in ref.named_parameters()):
            new.load_state_dict(ref.state_dict(), strict=False)

    def set_param(model, name, tensor):
        mod_name, _, attr = name.rpartition(".")
        mod = model.get_submodule(mod_name) if mod_name else model
        setattr(mod, attr, nn.Parameter(tensor.clone()))

    def run_standard(prob):
        init = prob.get_init_inputs()
        try:
            ref, new = build(prob, init)
        except Exception as e:
            emit(case="build", status="ERROR", err=None, note=f"{type(e).__name__}: {e}"[:300])
            return
        torch.manual_seed(seed + 1)
        inputs = [to_dev(i) for i in prob.get_inputs()]
        compare("initial", ref, new, inputs)
        compare("repeat call", ref, new, inputs)
        with torch.no_grad():
            for i in inputs:
                if isinstance(i, torch.Tensor) and i.is_floating_point():
                    i.copy_(torch.rand_like(i) * 2 - 0.5)
        compare("inputs refilled in place", ref, new, inputs)
        names = [n for n, _ in ref.named_parameters()]
        if names:
            mutate_both(ref, new, lambda n, p: p.mul_(0.5).add_(0.1))
            compare("params mul_(0.5).add_(0.1)", ref, new, inputs)
            with torch.inference_mode():
                mutate_both(ref, new, lambda n, p: p.sub_(0.1).mul_(-2.0))
            compare("params sub_/mul_ in inference_mode", ref, new, inputs)
            g = torch.Generator().manual_seed(seed + 7)
            vals = {n: (torch.rand(p.shape, generator=g) - 0.5).to(p.device, p.dtype)
                    for n, p in ref.named_parameters()}
            mutate_both(ref, new, lambda n, p: p.copy_(vals[n]) if n == names[-1] else None)
            compare(f"copy_ into {names[-1]}", ref, new, inputs)
            big = max(names, key=lambda n: params_by_name(ref)[n].numel())
            newval = params_by_name(ref)[big].detach() * -1.5
            set_param(ref, big, newval)
            set_param(new, big, newval)
            compare(f"replace Parameter {big}", ref, new, inputs)
            last = names[-1]
            swapped = params_by_name(ref)[last].detach() * 0.75 - 0.02
            params_by_name(ref)[last].data = swapped.clone()
            pn = params_by_name(new)
            if last in pn:
                pn[last].data = swapped.clone()
            else:
                new.load_state_dict(ref.state_dict(), strict=False)
            compare(f".data swap {last}", ref, new, inputs)
            torch.manual_seed(seed + 123)
            other = prob.Model(*init).to(dev)
            sd = other.state_dict()
            ref.load_state_dict(sd)
            new.load_state_dict(sd, strict=False)
            compare("load_state_dict (other seed)", ref, new, inputs)
        ref.double()
        new.double()
        compare("model.double(), float64 inputs", ref, new, [to_dev(i, torch.float64) for i in inputs])
        ref.float()
        new.float()
        if names:
            mutate_both(ref, new, lambda n, p: p.add_(0.03))
        compare("back to float32 (+ add_)", ref, new, inputs)

    def run_seed_extras(path):
        def fresh(overrides=None, init_extra=(), inputs_fn=None, dtype=None, case=""):
            try:
                prob = load_problem(path, preset, overrides)
                init = list(prob.get_init_inputs()) + list(init_extra)
                ref, new = build(prob, init)
                if dtype is not None:
                    ref.to(dtype)
                    new.to(dtype)
                torch.manual_seed(seed + 2)
                if inputs_fn is None:
                    inputs = [to_dev(i, dtype) for i in prob.get_inputs()]
                else:
                    inputs = [to_dev(i, dtype) for i in inputs_fn(prob)]
            except Exception as e:
                emit(case=case, status="ERROR", err=None, note=f"{type(e).__name__}: {e}"[:300])
                return None
            compare(case, ref, new, inputs)
            return ref, new, inputs

        r = fresh(init_extra=[False], case="bias=False")
        if r:
            ref, new, inputs = r
            mutate_both(ref, new, lambda n, p: p.mul_(0.5).add_(0.1))
            compare("bias=False, params mutated", ref, new, inputs)
        r = fresh(overrides={"in_features": 255}, case="in_features=255")
        if r:
            ref, new, inputs = r
            mutate_both(ref, new, lambda n, p: p.mul_(0.5).add_(0.1))
            compare("in_features=255, params mutated", ref, new, inputs)
        fresh(inputs_fn=lambda p: [torch.rand(p.batch_size, p.in_features + 1)[:, 1:]],
              case="misaligned view x[:, 1:]")
        fresh(inputs_fn=lambda p: [torch.rand(p.in_features, p.batch_size).t()],
              case="non-contiguous x (transposed)")
        fresh(inputs_fn=lambda p: [torch.rand(p.batch_size, 2 * p.in_features)[:, ::2]],
              case="non-contiguous x (column stride 2)")
        fresh(overrides={"batch_size": 1}, case="batch 1")
        fresh(overrides={"batch_size": 3, "in_features": 6, "out_features": 5}, case="tiny 3x6->5")
        r = fresh(dtype=torch.bfloat16, case="bf16 model + input")
        if r:
            ref, new, inputs = r
            mutate_both(ref, new, lambda n, p: p.mul_(0.5))
            compare("bf16, params mutated", ref, new, inputs)
        fresh(dtype=torch.float16, case="fp16 model + input")
        fresh(overrides={"batch_size": 8, "in_features": 8192, "out_features": 8192},
              case="full width 8x8192->8192")

    prob = load_problem(problem, preset)
    run_standard(prob)
    if is_seed:
        run_seed_extras(problem)


# --------------------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------------------
def discover(only: str | None):
    pairs = []
    for prob in sorted(SUITE.glob("level*/*.py"), key=lambda p: (p.parent.name, int(p.stem.split("_")[0]))):
        if only and only not in str(prob.relative_to(SUITE)):
            continue
        sol_dir = SUITE / "solutions" / prob.parent.name / prob.stem
        sols = sorted(sol_dir.glob("*.py"), key=lambda p: (VARIANT_ORDER.index(p.stem)
                                                           if p.stem in VARIANT_ORDER else 99, p.stem))
        pairs.append((prob, sols))
    return pairs


def run_pair(problem: Path, solution: Path, preset: str, device: str, env_extra: dict, timeout: int):
    env = dict(os.environ)
    env.update(env_extra)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(problem), str(solution),
           "--preset", preset, "--device", device]
    t = time.time()
    try:
        cp = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [dict(case="(worker)", status="ERROR", err=None, note=f"timeout after {timeout}s")], 0.0
    rows = [json.loads(line[len(MARK):]) for line in cp.stdout.splitlines() if line.startswith(MARK)]
    if cp.returncode != 0:
        tail = (cp.stderr.strip().splitlines() or ["?"])[-1][:200]
        rows.append(dict(case="(worker)", status="ERROR", err=None, note=f"rc={cp.returncode}: {tail}"))
    return rows, time.time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, metavar=("PROBLEM", "SOLUTION"), help=argparse.SUPPRESS)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    ap.add_argument("--only", default=None, help="substring of the problem path")
    ap.add_argument("--variants", default=",".join(VARIANT_ORDER))
    ap.add_argument("--seed-benchmarks", action="store_true",
                    help="also check benchmarks/seed/*.py against the seed problem (needs CUDA)")
    ap.add_argument("--timeout", type=int, default=900)
    args = ap.parse_args()

    if args.worker:
        try:
            worker(Path(args.worker[0]), Path(args.worker[1]), args.preset, args.device or "cpu")
        except Exception:
            traceback.print_exc()
            sys.exit(1)
        return

    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    variants = set(args.variants.split(","))

    jobs = []  # (problem, solution, device, env, expect_fail, skip_reason)
    for prob, sols in discover(args.only):
        for sol in sols:
            v = sol.stem
            if v not in variants:
                continue
            env, dev, skip = {}, device, None
            if v == "cuda" and device != "cuda":
                skip = "needs a CUDA device"
            if v == "cpp":
                dev = "cpu"
            if v == "triton" and device != "cuda":
                env = {"TRITON_INTERPRET": "1"}
            jobs.append((prob, sol, dev, env, False, skip))
        if args.seed_benchmarks and prob.stem == SEED_STEM:
            for b in sorted(BENCH_SEED.glob("*.py")):
                skip = None if device == "cuda" else "needs a CUDA device"
                jobs.append((prob, b, device, {}, b.stem == "seed_cached", skip))

    table = []
    for prob, sol, dev, env, expect_fail, skip in jobs:
        label_p = f"{prob.parent.name}/{prob.stem}"
        label_s = sol.stem + (" (interp)" if env.get("TRITON_INTERPRET") else "") + f" [{dev}]"
        if skip:
            table.append((label_p, label_s, "-", "SKIP", None, skip, expect_fail))
            continue
        rows, secs = run_pair(prob, sol, args.preset, dev, env, args.timeout)
        for r in rows:
            table.append((label_p, label_s, r["case"], r["status"], r["err"], r.get("note", ""), expect_fail))
        print(f"... {label_p} :: {label_s}: {len(rows)} checks in {secs:.1f}s", file=sys.stderr, flush=True)

    # print the table
    w0 = max(len(t[0]) for t in table) if table else 10
    w1 = max(len(t[1]) for t in table) if table else 10
    w2 = max(len(t[2]) for t in table) if table else 10
    print(f"{'problem':<{w0}}  {'solution':<{w1}}  {'case':<{w2}}  {'max_abs_err':>11}  status  note")
    print("-" * (w0 + w1 + w2 + 40))
    n_fail = n_pass = n_skip = n_xfail = 0
    for p, s, c, st, err, note, xf in table:
        e = "-" if err is None else f"{err:.3e}"
        shown = st
        if xf:
            shown = st + "(xfail)" if st != "PASS" else "PASS(!xfail)"
        print(f"{p:<{w0}}  {s:<{w1}}  {c:<{w2}}  {e:>11}  {shown:<6}  {note}")
        if st == "SKIP":
            n_skip += 1
        elif xf:
            n_xfail += st != "PASS"
        elif st == "PASS":
            n_pass += 1
        else:
            n_fail += 1
    print(f"\n{n_pass} passed, {n_fail} failed/errored, {n_skip} skipped, {n_xfail} expected failures")
    sys.exit(1 if n_fail else 0)


if __name__ == "__main__":
    main()
