"""What actually ran during a candidate's call: its own kernels counted, its ops, its GPU kernels.

The candidate's own kernels are found as objects, not by reading text: functions of extension
modules it built (load_inline) and Triton kernels it defines. Each is wrapped with a counter for one
call; on a GPU the profiler's kernel names are a second witness. What this returns is data: the judge
sets it beside the reference's heavy ops (profiled by the referee) and decides (`stages/probe.py`).
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import types
from collections import Counter

import torch

from kerneljudge.proc.profile import SPIN_KERNEL, profile_calls
from kerneljudge.worker.session import Session

_GLOBAL_KERNEL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(\w+)")


def trace(session: Session, args: list) -> dict:
    """One profiled, counted candidate call: own kernels and their call counts, op names, GPU kernels."""
    extensions, triton_kernels = own_kernels(session)
    sources = " ".join(v for v in vars(session.loaded.candidate).values() if isinstance(v, str))
    cuda_names = set(_GLOBAL_KERNEL.findall(sources))
    own = sorted(extensions) + sorted(triton_kernels)
    calls: Counter = Counter()
    restore = []
    for name, (owner, attr) in extensions.items():
        original = getattr(owner, attr)
        setattr(owner, attr, _counting(calls, name, original))
        restore.append(lambda owner=owner, attr=attr, original=original: setattr(owner, attr, original))
    for name, kernel in triton_kernels.items():
        jit = _triton_jit(kernel)
        jit.run = _counting(calls, name, type(jit).run.__get__(jit))
        restore.append(lambda jit=jit: jit.__dict__.pop("run", None))
    try:
        ops, records = profile_calls(session.candidate, args, session.device, bracket=True)
    finally:
        for undo in restore:
            undo()
    spins = [r for r in records if SPIN_KERNEL in r.name]
    kernels = [r for r in records if SPIN_KERNEL not in r.name]
    own_calls = {name: calls.get(name, 0) for name in own}
    for name in list(triton_kernels) + sorted(cuda_names):  # the profiler as a second witness on GPUs
        seen = sum(1 for k in kernels if name in k.name)
        if seen:
            own_calls[name] = max(own_calls.get(name, 0), seen)
    record = lambda r: [r.name[:200], r.stream, r.start_ns, r.end_ns]  # noqa: E731
    return {"own_kernels": own, "own_calls": own_calls, "ops": sorted(ops),
            "kernels": [record(k) for k in kernels[:2000]],
            "bracket": [record(spins[0]), record(spins[-1])] if len(spins) >= 2 else None}


def own_kernels(session: Session) -> tuple[dict[str, tuple[object, str]], dict[str, object]]:
    """(extension functions by name -> (owner, attribute), Triton kernels by name) the candidate defines."""
    candidate = session.loaded.candidate
    places: list[object] = [candidate]
    if isinstance(session.candidate, torch.nn.Module):
        places += list(session.candidate.modules())
    extensions = {}
    triton_kernels = {}
    for place in places:
        namespace = vars(place) if not isinstance(place, torch.nn.Module) else place.__dict__
        for value in list(namespace.values()):
            if isinstance(value, types.ModuleType) and _built_by_candidate(value):
                for attr, fn in vars(value).items():
                    if isinstance(fn, types.BuiltinFunctionType) and not attr.startswith("_"):
                        extensions[f"{value.__name__}.{attr}"] = (value, attr)
            elif _is_triton_kernel(value):
                triton_kernels[_triton_name(value)] = value
    for attr, fn in vars(candidate).items():
        if isinstance(fn, types.BuiltinFunctionType) and _built_by_candidate(sys.modules.get(fn.__module__ or "")):
            extensions[f"{fn.__module__}.{fn.__name__}"] = (candidate, attr)
    return extensions, triton_kernels


# Where the interpreter's own extension modules live (lib-dynload: math, _json, ...): never the candidate's.
_SYSTEM_DIRS = tuple(sorted({os.path.realpath(p) + os.sep for k, p in sysconfig.get_paths().items()
                             if k in ("stdlib", "platstdlib", "purelib", "platlib") and p}))


def _built_by_candidate(module) -> bool:
    path = getattr(module, "__file__", None) or ""
    return (path.endswith((".so", ".pyd")) and "site-packages" not in path and "dist-packages" not in path
            and not os.path.realpath(path).startswith(_SYSTEM_DIRS))


def _is_triton_kernel(value) -> bool:
    cls = type(value)
    return cls.__module__.startswith("triton.") and cls.__name__ in (
        "JITFunction", "InterpretedFunction", "Autotuner", "Heuristics")


# The launchable object at the bottom of a chain of Triton wrappers (TRITON_INTERPRET=1: InterpretedFunction).
_TRITON_LAUNCHABLE = ("JITFunction", "InterpretedFunction")


def _triton_jit(value):
    while type(value).__name__ not in _TRITON_LAUNCHABLE and hasattr(value, "fn"):
        value = value.fn
    return value


def _triton_name(value) -> str:
    jit = _triton_jit(value)
    return getattr(getattr(jit, "fn", None), "__name__", None) or getattr(jit, "__name__", "triton_kernel")


def _counting(calls: Counter, name: str, fn):
    def counted(*args, **kwargs):
        calls[name] += 1
        return fn(*args, **kwargs)

    return counted
