"""Integrity of the judge's own tools inside the worker: clocks and functions bound before candidate import.

`Guard.bind()` runs first in the worker, before any candidate code is imported. It keeps references
to the clocks and synchronisation functions the judge measures with, and a snapshot of the attributes
a candidate could patch (time, torch, torch.cuda, the judge's own modules). `tampered()` lists what
changed since, so a patched clock is a failing finding instead of a fake speedup.

Whatever the worker runs after a timed call to hand its output over is a place a candidate could do the
call's work late, outside the timed interval (a patched `ctypes.string_at` did the product when the worker
copied the output's bytes: a 20x speedup on the CPU, red-team trial of the twenty-third session). So the
judge's modules and the classes they define, the standard-library modules they use (and the JSON classes every
reply goes through), torch.cuda and torch.Tensor (new names too: they would shadow torch._C.TensorBase's) are
watched whole: every callable, a Python function's code too (setting one's `__code__` is an audit event). So
are the dispatcher's kernels for the operations that copy an output, and the ways to run code at calls or at
any moment that this process can read back: profile and trace functions (this thread's and new threads'),
interval timers, sys.monitoring tools, torch function or dispatch modes left entered (torch's own
DeviceContext, which `set_default_device` leaves, excepted), and audit hooks added (seen by the guard's own,
added first: one cannot be removed). The worker checks before each request's work and after it (a patch
could do a timed call's work at the next request's first use and undo itself). Not covered: what this process
cannot read back (gc callbacks, signal handlers run by a signal from outside, native code); the guard is a
barrier raised in the candidate's own process, and the verdict never rests on it alone (the referee compares
outputs it draws itself, the cross-check times batches from outside).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import signal
import sys
import threading
import time
import types
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

#: Names a program replaces by design (hooks, the interpreter's last value): not watched where a namespace is
#: watched whole.
REPLACEABLE = re.compile(r"hook$|^_$")
#: Libraries that add an audit hook of their own when first imported, imported before the guard binds (an
#: added hook is `tampering`): filelock, on Python 3.12+ (its fork-safety hook), which torch.compile's inductor
#: imports, would otherwise fail an honest torch.compile candidate (second review, twenty-third session).
IMPORTED_FIRST = ("filelock",)
#: Classes of the standard library whose methods the worker's replies go through (channel.py: json.dumps builds
#: a JSONEncoder for each message): watched as the judge's own classes are.
STANDARD_CLASSES = (("json.encoder", "JSONEncoder"), ("json.decoder", "JSONDecoder"))
#: The dispatcher's operations the worker's hand-over of an output goes through (proc/tensorwire.py): a
#: kernel registered for one of them after the guard bound (torch.library) is `tampering`.
COPY_OPS = ("aten::copy_", "aten::clone", "aten::detach", "aten::view", "aten::_reshape_alias", "aten::_to_copy")


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
    snapshot: dict[tuple[str, str], object] = field(default_factory=dict)  # WATCHED, looked up by name
    # every callable of the watched namespaces (the judge's modules and the classes they define, the standard
    # library's modules it uses and STANDARD_CLASSES, torch.cuda, torch.Tensor): (the namespace's live dict,
    # attribute, bound object, name)
    owned: list[tuple] = field(default_factory=list)
    functions: dict[int, str] = field(default_factory=dict)  # the watched Python functions (held: ids stay theirs)
    tensor_names: frozenset = frozenset()  # torch.Tensor's own attributes (a new one shadows torch._C.TensorBase's)
    bound_clocks: tuple = ()
    # what runs code at any call when the guard bound (none, unless a coverage tool runs the worker), and the
    # torch functions that read the mode stacks and the dispatcher, bound then as the clocks are
    bound_hooks: tuple = ()
    torch_probes: tuple = ()
    modes: tuple = ()  # the torch function and dispatch modes entered then (torch's own DeviceContext not counted)
    kernels: dict[str, str] = field(default_factory=dict)  # the copying operations' kernels then
    default_dtype: tuple = ()  # torch's get_default_dtype, bound then, and what it answered
    # what the guard's audit hook saw since: watched functions' code set, audit hooks added
    audited: set[str] = field(default_factory=set)

    @classmethod
    def bind(cls) -> "Guard":
        for name in IMPORTED_FIRST:
            if importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
        perf_counter_ns = time.perf_counter_ns
        guard = cls(clock_ns=perf_counter_ns, wall_ms=lambda: perf_counter_ns() / 1e6)
        guard.bound_clocks = (guard.clock_ns, guard.wall_ms)
        guard._snapshot()
        sys.addaudithook(guard._audit)
        return guard

    def _audit(self, event: str, args: tuple) -> None:
        """The interpreter's audit events (PEP 578): setting a function's `__code__` raises
        "object.__setattr__", adding a hook "sys.addaudithook"; cheap for every other event."""
        if event == "object.__setattr__":
            if args[1] == "__code__" and id(args[0]) in self.functions:
                self.audited.add(f"{self.functions[id(args[0])]}.__code__")
        elif event == "sys.addaudithook":
            self.audited.add("sys.addaudithook")

    def _snapshot(self) -> None:
        """What is importable now (torch and the judge's modules imported, the candidate not yet)."""
        for module_name, dotted in WATCHED:
            value = _lookup(module_name, dotted)
            if value is not None:
                self.snapshot[(module_name, dotted)] = value
                if isinstance(value, types.FunctionType):
                    self.functions[id(value)] = f"{module_name}.{dotted}"
        modules = [(name, module) for name, module in list(sys.modules.items())
                   if name.startswith("kerneljudge") and module is not None] + \
            [(module.__name__, module) for module in _standard_modules_used()]
        torch = sys.modules.get("torch")
        if torch is not None:
            modules += [("torch.cuda", torch.cuda), ("torch.cuda.memory", torch.cuda.memory)]
        namespaces = modules + [(f"{name}.{attr}", value) for name, module in modules if name.startswith("kerneljudge")
                                for attr, value in list(vars(module).items())
                                if isinstance(value, type) and value.__module__ == module.__name__]
        namespaces += [(f"{module}.{name}", cls) for module, name in STANDARD_CLASSES
                       if (cls := _lookup(module, name)) is not None]
        if torch is not None:  # (torch's own functions: the problem's get_inputs draws with torch.rand and the like)
            namespaces += [("torch", torch), ("torch.Tensor", torch.Tensor)]
            self.tensor_names = frozenset(vars(torch.Tensor))
            from torch.utils._device import DeviceContext
            self.default_dtype = (torch.get_default_dtype, torch.get_default_dtype())
            self.torch_probes = (torch._C._len_torch_function_stack, torch._C._get_function_stack_at,
                                 torch._C._len_torch_dispatch_stack, torch._C._dispatch_dump, DeviceContext)
            self.modes = self._modes()
            self.kernels = {op: torch._C._dispatch_dump(op) for op in COPY_OPS}
        for name, namespace in namespaces:
            self.watch(name, namespace)
        self.functions.update({id(f): f"the guard's {f.__name__}" for f in vars(Guard).values()
                               if isinstance(f, types.FunctionType)})
        self.bound_hooks = _hooks()

    def watch(self, name: str, namespace) -> None:
        """The callables of a namespace, watched: the judge's (at `bind`), and one imported after the guard bound
        (the problem's module, before the candidate's: the worker draws every input with its `get_inputs`, so a
        candidate wrapping it would see each timed call's inputs before its call, outside the timing)."""
        for attr, value in list(vars(namespace).items()):  # (its modules too: a proxy for the problem's `torch`)
            if (callable(value) or isinstance(value, types.ModuleType)) and not REPLACEABLE.search(attr):
                self.owned.append((vars(namespace), attr, value, f"{name}.{attr}"))
                if isinstance(value, types.FunctionType):
                    self.functions.setdefault(id(value), f"{name}.{attr}")

    def tampered(self, deep: bool = True) -> list[str]:
        """Watched names whose object changed since they were bound, watched functions whose code was
        swapped in place (`f.__code__ = ...`), the guard's own clocks replaced, and the hooks of `_hooked`
        (`deep`: the dispatcher's kernels too, the costliest part)."""
        changed = {f"{module}.{dotted}" for (module, dotted), value in self.snapshot.items()
                   if not _same(_lookup(module, dotted), value)}
        changed.update(name for names, attr, value, name in self.owned
                       if names.get(attr) is not value and not _same(names.get(attr), value))
        if (self.clock_ns, self.wall_ms) != self.bound_clocks:
            changed.add("the judge's bound clock")
        if self.default_dtype and (now := self.default_dtype[0]()) != self.default_dtype[1]:
            changed.discard("torch.Storage")  # (which torch.set_default_dtype replaces too)
            changed.add(f"torch's default dtype ({now}, set with torch.set_default_dtype and left so)")
        return sorted(changed | self.audited | self._hooked(deep))

    def _modes(self) -> tuple[int, int]:
        """How many torch function modes (torch's DeviceContext, set_default_device's, not counted) and dispatch
        modes are entered."""
        function_depth, function_at, dispatch_depth, _, device_context = self.torch_probes
        functions = sum(not isinstance(function_at(i), device_context) for i in range(function_depth()))
        return functions, dispatch_depth()

    def _hooked(self, deep: bool) -> set[str]:
        """Ways to run code at calls the worker makes, set by candidate code since the guard bound."""
        hooked = {f"{what} (set and left set)" for what, now, then in zip(HOOKS, _hooks(), self.bound_hooks)
                  if now != then}
        torch = sys.modules.get("torch")
        if torch is not None and self.torch_probes:
            if self._modes() != self.modes:
                hooked.add("a torch function or dispatch mode (left entered)")
            if deep:
                dump = self.torch_probes[3]
                hooked.update(f"{op}'s kernels" for op, kernels in self.kernels.items() if dump(op) != kernels)
            hooked.update(f"torch.Tensor.{name}" for name in vars(torch.Tensor).keys() - self.tensor_names
                          if callable(vars(torch.Tensor)[name]))
        return hooked


#: What `_hooks` reads, by name: each a way to run code at calls (or at any moment) in the worker.
HOOKS = ("sys.setprofile", "sys.settrace", "threading.setprofile", "threading.settrace", "signal.setitimer",
         "sys.monitoring")


def _hooks() -> tuple:
    """Now: the profile and trace functions (this thread's, and the ones new threads get), the interval timers
    (a signal handler at arbitrary moments), and the tools registered with sys.monitoring (Python 3.12+)."""
    monitoring = getattr(sys, "monitoring", None)
    tools = tuple(monitoring.get_tool(i) for i in range(6)) if monitoring else ()
    timers = tuple(signal.getitimer(which) != (0.0, 0.0) for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL,
                                                                        signal.ITIMER_PROF))
    return (sys.getprofile(), sys.gettrace(), getattr(threading, "getprofile", lambda: None)(),
            getattr(threading, "gettrace", lambda: None)(), timers, tools)


def _standard_modules_used() -> list[types.ModuleType]:
    """The standard library's modules the judge's own modules hold (found from their globals), and builtins."""
    found = {"builtins": sys.modules["builtins"]}
    for name, module in list(sys.modules.items()):
        if name.startswith("kerneljudge") and module is not None:
            for value in list(vars(module).values()):
                if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in sys.stdlib_module_names:
                    found[value.__name__] = value
    return list(found.values())


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
