"""What actually ran during a candidate's call: its own kernels counted where they run, its ops, its GPU kernels.

The candidate's own kernels are found as objects, never by reading text: the functions of extension
modules it built (load_inline: any live module whose file is a shared object outside the installed
packages), the operators it registered with torch (`TORCH_LIBRARY`, `torch.library`: the op names that
appeared while it was imported, `Session.own_ops`) and the Triton kernels it defines. They are counted
where they run, not by replacing a name the candidate might have copied (`self.f = ext.f`): extension
functions at the native boundary (the interpreter's profile hook sees every call of a C function, by
the function object, whatever name or container it was reached through), registered operators in the
profiler's op records, Triton kernels on the kernel object itself, and on a GPU the profiler's device
records by kernel name. Their share of the call's time (device time on a GPU) is measured too. What this
returns is data: the judge sets it beside the reference's heavy ops (profiled by the referee) and decides
(`stages/probe.py`).
"""

from __future__ import annotations

import gc
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


def trace(session: Session, args: list, clock_ns) -> dict:
    """One profiled, counted candidate call: own kernels, their call counts and share of the call's time,
    op names, GPU kernels."""
    functions, triton_kernels = own_kernels(session)
    sources = " ".join(v for v in vars(session.loaded.candidate).values() if isinstance(v, str))
    cuda_names = set(_GLOBAL_KERNEL.findall(sources))
    own = sorted(set(functions.values())) + sorted(triton_kernels) + list(session.own_ops)
    calls: Counter = Counter()
    spent_ns: Counter = Counter()
    restore = []
    for name, kernel in triton_kernels.items():
        jit = _triton_jit(kernel)
        jit.run = _counting(calls, name, type(jit).run.__get__(jit))
        restore.append(lambda jit=jit: jit.__dict__.pop("run", None))
    watch = _NativeCalls(functions, calls, spent_ns, clock_ns)
    try:
        started = clock_ns()
        ops, records = profile_calls(session.candidate, args, session.device, bracket=True, around=watch)
        call_ns = max(1, clock_ns() - started)
    finally:
        for undo in restore:
            undo()
    spins = [r for r in records if SPIN_KERNEL in r.name]
    kernels = [r for r in records if SPIN_KERNEL not in r.name]
    own_calls = {name: calls.get(name, 0) for name in own}
    for op in session.own_ops:  # registered operators: the profiler's op records
        own_calls[op] = max(own_calls[op], ops.get(op, (0.0, 0))[1])
    device_names = list(triton_kernels) + sorted(cuda_names)
    for name in device_names:  # the profiler's device records on GPUs
        seen = sum(1 for k in kernels if name in k.name)
        if seen:
            own_calls[name] = max(own_calls.get(name, 0), seen)
    if kernels:  # a GPU: the share of device time in the candidate's own kernels
        total = sum(k.end_ns - k.start_ns for k in kernels) or 1
        share = sum(k.end_ns - k.start_ns for k in kernels if any(n in k.name for n in device_names)) / total
    else:  # the CPU: time inside its extension functions and registered operators, of the whole call
        share = (sum(spent_ns.values()) + 1000 * sum(ops.get(op, (0.0, 0))[0] for op in session.own_ops)) / call_ns
    record = lambda r: [r.name[:200], r.stream, r.start_ns, r.end_ns]  # noqa: E731
    return {"own_kernels": own, "own_calls": own_calls, "own_share": round(min(1.0, share), 6),
            "ops": sorted(ops), "kernels": [record(k) for k in kernels[:2000]],
            "bracket": [record(spins[0]), record(spins[-1])] if len(spins) >= 2 else None}


def registered_ops() -> set[str]:
    """Every operator name registered with torch's dispatcher now ("ns::name.overload")."""
    return set(torch._C._dispatch_get_all_op_names())


def own_ops(before: set[str]) -> tuple[str, ...]:
    """The operators registered since `before` (the candidate's import) in namespaces that did not exist
    then, as the profiler names them. Torch registering more of its own on first use stays out: in an old
    namespace, or defined by torch's own files (importing torch._inductor, as torch.compile solutions do,
    defines _inductor_test and c10d_functional operators: QA 36's review, a `reference-fallback` for an honest
    candidate)."""
    namespaces = {name.split("::")[0] for name in before}
    return tuple(sorted({name.split(".")[0] for name in registered_ops() - before
                         if name.split("::")[0] not in namespaces and not _torchs_own(name)}))


def _torchs_own(name: str) -> bool:
    """Whether operator `name` ("ns::name.overload") was defined by torch's own code: the dispatcher's record of
    where it was defined is a file of torch's, and, for one made through torch.library.custom_op (whose record is
    always torch's custom-op machinery), so is the function it was made from."""
    from torch._library import custom_ops

    where = next((line[len(_DEFINED_AT):] for line in torch._C._dispatch_dump(name).splitlines()
                  if line.startswith(_DEFINED_AT)), "")
    if not where.startswith(_TORCH_DIR):
        return False
    if not where.startswith(_TORCH_LIBRARY_DIR):
        return True
    made = custom_ops.OPDEFS.get(name) or custom_ops.OPDEFS.get(name.split(".")[0])  # keyed with the overload, if any
    return made is not None and made._init_fn.__code__.co_filename.startswith(_TORCH_DIR)


_DEFINED_AT = "debug: registered at "
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_TORCH_LIBRARY_DIR = os.path.join(_TORCH_DIR, "_library") + os.sep


class _NativeCalls:
    """A profile hook (sys.setprofile) for the duration of the call: counts and times every call of the given
    C functions, identified by the function object (so a copy bound elsewhere is the same function)."""

    def __init__(self, functions: dict[int, str], calls: Counter, spent_ns: Counter, clock_ns):
        self.functions, self.calls, self.spent_ns, self.clock_ns = functions, calls, spent_ns, clock_ns
        self.open: list[tuple[str, int]] = []

    def hook(self, frame, event, arg) -> None:
        if event == "c_call":
            name = self.functions.get(id(arg))
            if name is not None:
                self.calls[name] += 1
                self.open.append((name, self.clock_ns()))
        elif event in ("c_return", "c_exception") and self.open and id(arg) in self.functions:
            name, started = self.open.pop()
            self.spent_ns[name] += self.clock_ns() - started

    def __enter__(self):
        self.previous = sys.getprofile()
        sys.setprofile(self.hook)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(self.previous)


def own_kernels(session: Session) -> tuple[dict[int, str], dict[str, object]]:
    """(id of each extension function the candidate built -> its name, Triton kernels by name)."""
    functions = {}
    # every live module, not sys.modules: load_inline's modules are never registered there
    for module in [o for o in gc.get_objects() if issubclass(type(o), types.ModuleType)]:
        if _built_by_candidate(module):
            for attr, fn in vars(module).items():
                if isinstance(fn, types.BuiltinFunctionType) and not attr.startswith("_"):
                    functions[id(fn)] = f"{module.__name__}.{attr}"
    places: list[object] = [session.loaded.candidate]
    if isinstance(session.candidate, torch.nn.Module):
        places += list(session.candidate.modules())
    triton_kernels = {}
    for place in places:
        namespace = vars(place) if not isinstance(place, torch.nn.Module) else place.__dict__
        for value in _with_contents(namespace.values()):
            if _is_triton_kernel(value):
                triton_kernels[_triton_name(value)] = value
    return functions, triton_kernels


def _with_contents(values) -> list:
    """The values and, one level down, what lists, tuples and dicts among them hold."""
    found = []
    for value in list(values):
        found.append(value)
        if isinstance(value, (list, tuple)):
            found += list(value)
        elif isinstance(value, dict):
            found += list(value.values())
    return found


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
