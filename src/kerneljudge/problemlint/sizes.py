"""The sizes a problem is linted at, and its footprint, measured on torch's `meta` device (referee side).

Linting runs the reference a few dozen times, so at KernelBench's sizes (a 6 GB softmax) a sweep of
270 problems cannot run on a laptop. `--set` rewrites a problem's constants; here they are lowered until
one forward fits a budget of work and bytes, measured without allocating anything: the problem runs on
the meta device under torch's FLOP counter. Batch sizes go first (they change no per-element
magnitude: a softmax over 393216 columns keeps its 2.5e-6 outputs), then the largest other sizes, each
halved while the meta run still works (a halving that breaks a shape constraint is undone and that
constant kept). Kernel sizes, strides, paddings, dilations and groups are never changed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode

from kerneljudge.proc.tensorwire import tensors_of
from kerneljudge.worker.build import import_problem

BUDGET_FLOPS = 1e9  # one forward within this runs in about 0.1 s on a laptop core (a ResNet at 56x56)
BUDGET_BYTES = 16 << 20  # inputs + outputs
BUDGET_TRAFFIC = 128 << 20  # written by all the forward's operations
MIN_SHRINKABLE = 16  # sizes below this are shapes (channels of an RGB image, heads), not scale
FIXED_NAMES = re.compile(r"kernel|stride|pad|dilation|group|dim$")  # shape rules, not scale (dim1, dim2: sizes)
BATCH_NAMES = re.compile(r"batch")
#: An evaluation lints its problem (the `problem-degenerate` notice) only where the sizes lowered come within
#: this many times the budget's bytes: beyond it the lint's own runs (a dozen forwards, float64 comparisons: about
#: ten outputs at once) would set the evaluation's memory peak, at a problem whose sizes are literals.
EVALUATION_SCALE = 8


@dataclass(frozen=True)
class Cost:
    flops: float | None  # None: the forward does not run on the meta device
    bytes: int  # inputs + parameters + outputs (the footprint)
    traffic: int = 0  # bytes every operation of the forward writes (a broadcast's (B, B) temporary too)
    parameter_bytes: int = 0  # no size constant lowers a ResNet's weights: not in the budget

    def within(self) -> bool:
        """Within the lint's budget: its bytes and its FLOPs."""
        return self.memory_within(1) and (self.flops or 0) <= BUDGET_FLOPS

    def memory_within(self, scale: float) -> bool:
        """The bytes within `scale` times the budget's (its FLOPs aside)."""
        return self.bytes - self.parameter_bytes <= scale * BUDGET_BYTES and self.traffic <= scale * BUDGET_TRAFFIC


class _Traffic(TorchDispatchMode):
    """Counts the bytes of every operation's outputs."""

    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.bytes += _bytes(tree_leaves(out))
        return out


def cost(problem: dict, constants: dict) -> Cost:
    """One forward's FLOPs and bytes at these constants, on the meta device (raises if get_inputs or the
    constructor cannot run there)."""
    module = import_problem(problem["path"], problem["source"], constants)
    torch.manual_seed(0)
    with torch.device("meta"):
        model = module.Model(*module.get_init_inputs())
        inputs = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in module.get_inputs()]
    weights = _bytes(list(model.parameters()) + list(model.buffers()))
    held = _bytes(inputs) + weights
    try:
        with FlopCounterMode(display=False) as counter, _Traffic() as traffic, torch.inference_mode():
            out = model(*inputs)
    except Exception:  # noqa: BLE001 - an op without a meta kernel: the bytes are still known
        return Cost(None, held, parameter_bytes=weights)
    return Cost(float(counter.get_total_flops()), held + _bytes(tensors_of(out)), traffic.bytes, weights)


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def shrink(problem: dict, constants: dict) -> tuple[dict, dict]:
    """Constants whose forward fits the budget (halving as the module docstring says), and what changed
    {name: [from, to]}. Unchanged when the problem already fits or cannot run on the meta device."""
    try:
        current = cost(problem, constants)
    except Exception:  # noqa: BLE001 - not runnable on meta: lint at the given sizes
        return constants, {}
    values, frozen = dict(constants), set()
    meta_works = current.flops is not None
    while not current.within():
        name = _next(values, frozen, batch_only=not meta_works)
        if name is None and not frozen:
            break
        if name is None:  # each alone breaks a shape rule (a (B, N) input times a (B,) one): all together
            trial = {k: _halved(v) for k, v in values.items() if _shrinkable(k, v) or _batch(k, v)}
            frozen = set()
            if meta_works and _works(problem, {**values, **trial}):
                values, current = {**values, **trial}, cost(problem, {**values, **trial})
                continue
            break
        trial = {**values, name: _halved(values[name])}
        try:
            trial_cost = cost(problem, trial)
        except Exception:  # noqa: BLE001
            trial_cost = None
        if trial_cost is None or (meta_works and trial_cost.flops is None):
            frozen.add(name)
            continue
        values, current = trial, trial_cost
    changed = {k: [constants[k], v] for k, v in values.items() if v != constants[k]}
    return values, changed


def _shrinkable(name: str, value) -> bool:
    if FIXED_NAMES.search(name.lower()) or isinstance(value, (bool, float)):
        return False
    items = value if isinstance(value, (tuple, list)) else [value]
    return any(isinstance(v, int) and not isinstance(v, bool) and v >= MIN_SHRINKABLE for v in items)


def _batch(name: str, value) -> bool:
    return bool(BATCH_NAMES.search(name.lower())) and type(value) is int and value > 2


def _works(problem: dict, constants: dict) -> bool:
    try:
        return cost(problem, constants).flops is not None
    except Exception:  # noqa: BLE001 - a shape rule broken
        return False


def _largest(value) -> int:
    return max(value) if isinstance(value, (tuple, list)) else value


def _next(values: dict, frozen: set, *, batch_only: bool) -> str | None:
    """The constant to halve next: a batch size above 2 first, then the largest other size."""
    batches = [n for n, v in values.items() if _batch(n, v) and n not in frozen]
    if batches or batch_only:
        return batches[0] if batches else None
    others = [n for n, v in values.items() if n not in frozen and _shrinkable(n, v)]
    return max(others, key=lambda n: _largest(values[n]), default=None)


def _halved(value):
    if isinstance(value, (tuple, list)):
        return type(value)(v // 2 if isinstance(v, int) and v >= MIN_SHRINKABLE else v for v in value)
    return value // 2


def device_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
