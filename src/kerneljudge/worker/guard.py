"""Integrity of the judge's own tools inside the worker: clocks and functions bound before candidate import.

`Guard.bind()` runs first in the worker, before any candidate code is imported. It keeps references
to the clocks and synchronisation functions the judge measures with, and a snapshot of the attributes
a candidate could patch (time, torch, torch.cuda, the judge's own modules). `tampered()` lists what
changed since, so a patched clock is a failing finding instead of a fake speedup.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

# (module name, dotted attribute) pairs whose identity must not change once bound.
WATCHED = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "monotonic"), ("time", "monotonic_ns"),
    ("time", "time"), ("time", "time_ns"), ("time", "sleep"),
    ("torch", "allclose"), ("torch", "isclose"), ("torch", "equal"), ("torch", "abs"), ("torch", "isfinite"),
    ("torch", "manual_seed"), ("torch", "inference_mode"), ("torch", "no_grad"),
    ("torch", "Tensor.clone"), ("torch", "Tensor.copy_"), ("torch", "Tensor.__eq__"), ("torch", "Tensor.sub"),
    ("torch", "Tensor.data_ptr"), ("torch", "Tensor.to"), ("torch", "Tensor.max"), ("torch", "Tensor.double"),
    # what the worker uses to hand an output's bytes to the judge (proc/tensorwire.py)
    ("torch", "Tensor.detach"), ("torch", "Tensor.contiguous"), ("torch", "Tensor.reshape"), ("torch", "Tensor.view"),
    ("torch", "Tensor.cpu"), ("torch", "Tensor.untyped_storage"), ("torch", "Tensor.numel"),
    ("torch", "Tensor.element_size"), ("torch", "UntypedStorage.__bytes__"), ("torch", "frombuffer"),
    ("torch", "nn.Module.__call__"), ("torch", "nn.Module.load_state_dict"), ("torch", "nn.Module.state_dict"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "Event"), ("torch.cuda", "Event.record"),
    ("torch.cuda", "Event.elapsed_time"), ("torch.cuda", "Event.synchronize"), ("torch.cuda", "current_stream"),
    ("torch.cuda", "Stream.synchronize"), ("torch.cuda", "graphs.CUDAGraph.replay"), ("torch.cuda", "_sleep"),
    ("torch.profiler", "profile"), ("torch", "autograd.profiler.profile"),
)


def _lookup(module_name: str, dotted: str):
    obj = sys.modules.get(module_name)
    for part in dotted.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj


@dataclass
class Guard:
    """Bound clocks plus the snapshot of watched objects used to detect tampering."""

    clock_ns: Callable[[], int]
    wall_ms: Callable[[], float]
    snapshot: dict[tuple[str, str], object] = field(default_factory=dict)
    code: dict[tuple[str, str], object] = field(default_factory=dict)  # each watched function's code object
    bound_clocks: tuple = ()

    @classmethod
    def bind(cls) -> "Guard":
        perf_counter_ns = time.perf_counter_ns
        guard = cls(clock_ns=perf_counter_ns, wall_ms=lambda: perf_counter_ns() / 1e6)
        guard.bound_clocks = (guard.clock_ns, guard.wall_ms)
        guard.refresh()
        return guard

    def refresh(self) -> None:
        """Snapshot what is importable now (call again after torch is imported, before the candidate)."""
        for module_name, dotted in WATCHED:
            value = _lookup(module_name, dotted)
            if value is not None:
                self.snapshot.setdefault((module_name, dotted), value)
        for name, module in list(sys.modules.items()):
            if name.startswith("kerneljudge") and module is not None:
                for attr, value in list(vars(module).items()):
                    if callable(value) and not attr.startswith("__"):
                        self.snapshot.setdefault((name, attr), value)
        for key, value in self.snapshot.items():
            if key[0].startswith("kerneljudge") and hasattr(value, "__code__"):
                self.code.setdefault(key, value.__code__)

    def tampered(self) -> list[str]:
        """Watched names whose object changed since they were bound, judge functions whose code was
        swapped in place (`f.__code__ = ...`), and the guard's own clocks replaced."""
        changed = {f"{module}.{dotted}" for (module, dotted), value in self.snapshot.items()
                   if not _same(_lookup(module, dotted), value)}
        changed.update(f"{module}.{dotted}.__code__" for (module, dotted), code in self.code.items()
                       if getattr(self.snapshot[(module, dotted)], "__code__", code) is not code)
        if (self.clock_ns, self.wall_ms) != self.bound_clocks:
            changed.add("the judge's bound clock")
        return sorted(changed)


def _same(current, bound) -> bool:
    """`current` is the bound object, or torch's own wrapper of it (importing torch._dynamo wraps
    torch.manual_seed and a few others with functools.wraps, keeping the original as __wrapped__).
    A wrapper counts only if it is genuine: its code object is torch's own (a co_filename or a
    __wrapped__ attribute is easily forged), its globals are that torch module's, and its closure
    holds the object it names as __wrapped__ (so that is what it calls)."""
    for _ in range(4):
        if current is bound:
            return True
        wrapped = getattr(current, "__wrapped__", None)
        if wrapped is None or not _genuine_torch_wrapper(current, wrapped):
            return False
        current = wrapped
    return False


def _genuine_torch_wrapper(wrapper, wrapped) -> bool:
    code = getattr(wrapper, "__code__", None)
    if code is None or f"{os.sep}torch{os.sep}" not in code.co_filename:
        return False
    cells = []
    for cell in getattr(wrapper, "__closure__", None) or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    if not any(c is wrapped for c in cells):
        return False
    module = next((m for m in list(sys.modules.values())
                   if getattr(m, "__file__", None) == code.co_filename), None)
    if module is None or getattr(wrapper, "__globals__", None) is not vars(module):
        return False
    return any(_defines(getattr(v, "__code__", None), code) for v in list(vars(module).values()))


def _defines(outer, code, depth: int = 0) -> bool:
    """`code` is `outer` or a code object nested in it (a function defined inside a function)."""
    if outer is None or depth > 8:
        return False
    if outer is code:
        return True
    return any(_defines(c, code, depth + 1) for c in outer.co_consts if hasattr(c, "co_consts"))
