"""Drawing a problem's inputs, and building its reference model, from a seed, the same way in the referee
and in the worker.

Both processes run the problem's own `get_inputs()` under the same seed on the same device, so a seed is
enough to name an input set; the referee checks once that the problem draws deterministically (`draws_alike`)
before the judge relies on that. Likewise the reference built from the run's init seed: the worker builds
its own copy of the reference's state (what ModelNew is loaded with; the probes then change ModelNew's
entries alike in both processes) instead of being sent it, and the judge compares the two processes' digests
of it.
"""

from __future__ import annotations

import copy
import random
import sys
from contextlib import contextmanager
from typing import Any, Callable

import torch

EQUAL_BLOCK_BYTES = 64 << 20  # `equal_bits` compares this many bytes at once


def seed_generators(seed: int, device: torch.device) -> None:
    """Seed Python's, NumPy's (where a problem imported it), the CPU's and the device's generators (as
    torch.manual_seed does for the two torch ones, without its per-call cost of visiting every other
    accelerator type, about 1 ms a call)."""
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(seed % (1 << 32))
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index or 0].manual_seed(seed)


@contextmanager
def generators_kept(device: torch.device):
    """The generators `seed_generators` seeds, each put back as it was afterwards: a timed call's inputs drawn
    right before it (a watched call's, proc/timed.py) would otherwise leave the generators seeded anew, which
    the candidate's next call could read (`torch.initial_seed()` changing only before a watched call)."""
    numpy = sys.modules.get("numpy")
    cuda = torch.cuda.default_generators[device.index or 0] if device.type == "cuda" else None
    kept = (random.getstate(), numpy.random.get_state() if numpy is not None else None,
            torch.default_generator.get_state(), cuda.get_state() if cuda is not None else None)
    try:
        yield
    finally:
        random.setstate(kept[0])
        if kept[1] is not None:
            numpy.random.set_state(kept[1])
        torch.default_generator.set_state(kept[2])
        if cuda is not None:
            cuda.set_state(kept[3])


def build_seeded(model_class, problem, device: torch.device, init_seed: int, init_inputs_seed: int,
                 kernelbench: bool, init_inputs: list | None = None) -> tuple[torch.nn.Module, list]:
    """`model_class(*get_init_inputs())` (the problem's Model, or the candidate's ModelNew) from the run's seeds,
    and those init inputs (`init_inputs`: the ones an earlier build in this process drew, not drawn again):
    parameters created on the device (KernelBench's protocol: constructed, then moved, as its own eval does)."""
    if init_inputs is None:
        seed_generators(init_inputs_seed, device)
        init_inputs = list(problem.get_init_inputs())
    seed_generators(init_seed, device)
    if kernelbench:
        return model_class(*copy.deepcopy(init_inputs)).to(device), init_inputs
    with torch.device(device):
        model = model_class(*copy.deepcopy(init_inputs))
    return model.to(device), init_inputs


def make_inputs(problem, seed: int, device: torch.device) -> list:
    """get_inputs() under `seed`, drawn on the device (torch.device as the default device: drawing
    256 MB of inputs on the CPU and copying them costs more than the whole check on a GPU)."""
    seed_generators(seed, device)
    with torch.device(device):
        args = list(problem.get_inputs())
    return [a.to(device) if isinstance(a, torch.Tensor) else a for a in args]


def owned(args: list, index: int) -> bool:
    """Whether `args[index]` is a tensor that only `args` holds: no other name (a problem's module-level tensor
    that get_inputs() hands out every time), no other tensor over its memory (a view, `detach()`, `.data`), no
    memory shared with another argument, no gradient asked for (an in-place change of such a leaf raises).
    Such a tensor may be changed in place (a range probe's move, the reference's own call) without any later
    draw or other argument seeing it. (A tensor over a NumPy array the problem keeps is not told apart.)"""
    a = args[index]
    if not isinstance(a, torch.Tensor) or sys.getrefcount(args[index]) > 3 or a._base is not None or a.requires_grad:
        return False  # three references: `args`, `a` and getrefcount's own argument
    if torch._C._storage_Use_Count(a.untyped_storage()._cdata) > 2:  # the tensor and the storage asked for here
        return False
    memory = a.untyped_storage().data_ptr()
    return not any(isinstance(b, torch.Tensor) and i != index and b.untyped_storage().data_ptr() == memory
                   for i, b in enumerate(args))


def refill(buffers: list, values: list, write: Callable[[torch.Tensor, torch.Tensor], Any] | None = None) -> list:
    """`buffers` holding `values` (new values, same buffers: memos by address or by sampled content stop
    paying), each written by `write(buffer, value)` (`buffer.copy_` by default). A function, so that no name of
    the caller's still holds a value tensor during the call that follows (a loop's variable did: on the H200 a
    third footprint-sized block in the refilled-inputs probe)."""
    for buffer, value in zip(buffers, values):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(value) if write is None else write(buffer, value)
    return buffers


def caller_views(args: list) -> list:
    """Views of the inputs' memory as the caller holds it (new tensor objects over the same storage), for a look at
    the inputs after a call: a candidate that writes into an input and then re-points its argument at a copy of
    the original values (`x.set_(saved)`) changes its own object, not these."""
    return [a.detach() if isinstance(a, torch.Tensor) else a for a in args]


def same_place(tensor: torch.Tensor, view: torch.Tensor) -> bool:
    """Whether a tensor still lies where `view` (made from it by `caller_views`) does, as it did."""
    return (tensor.data_ptr(), tensor.shape, tensor.stride(), tensor.dtype) == \
        (view.data_ptr(), view.shape, view.stride(), view.dtype)


def clone_args(args: list) -> list:
    return [a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args]


def upcast(args: list) -> list:
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def same_bits(before: list, after: list) -> bool:
    """Every tensor of `after` holds exactly the bytes of the one in `before` (NaNs included), and `after` has as
    many values (a shorter list, from a worker's reply, is not the same inputs)."""
    if len(before) != len(after):
        return False
    for a, b in zip(before, after):
        if isinstance(a, torch.Tensor):
            if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
                return False
            if not equal_bits(a, b):
                return False
    return True


def equal_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one shape and dtype hold the same bytes (NaNs included), compared EQUAL_BLOCK_BYTES
    at a time: a whole comparison's temporary is a byte per byte compared (6.4 GB for a 6.4 GB input)."""
    x, y = a.detach().reshape(-1).view(torch.uint8), b.detach().reshape(-1).view(torch.uint8)
    return all(torch.equal(x[i:i + EQUAL_BLOCK_BYTES], y[i:i + EQUAL_BLOCK_BYTES].to(x.device))
               for i in range(0, x.numel(), EQUAL_BLOCK_BYTES))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
