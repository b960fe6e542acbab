"""The reference model at its own (native) precision and in float64: a float64 copy kept beside it where its
parameters are small; where they are large, its parameters at their own precision only, upcast where the float64
run uses them (referee/upcast.py).

The referee needs the reference at both precisions: native for the expected outputs, the baselines and the
probes' changes; float64 for the truth. A float64 copy beside the native model holds three footprints of its
parameters (float32 + float64) beside the worker's one: for a parameter-heavy problem the judge held 4x the
problem's footprint between requests (level2/56 at full size on the H200: 4.99x at its peak). Converted in place
for each float64 run instead, the referee still held the float64 parameters, twice the native ones, while the
worker held its own: three footprints of them (level2/56 on an H100: 3.01x). Upcast on use,
it holds the native ones and one operation's float64 copy of what it reads (of a large matrix product's parameter
operand, a block). The float64 run reads the parameters of the moment, so the probes' changes and the range moves,
made on the native parameters, reach it with nothing more to do.
Buffers (small: a norm's statistics) and tensors held as plain attributes are the float64 runs' own: the native
ones are put aside while in float64 (the float64 buffers made afresh from them at each change of precision,
integer ones as copies; the attributes kept from one float64 run to the next, copies of the model's as built at
first, as the float64 copy kept its own), so what a forward does to them at float64 (a buffer it reassigns or
changes in place, level3/33's hidden state) never reaches the native model.
Upcasting at every float64 call (each chunk's, where the run is cut) costs time on a CPU (about a second a call for
a model of 512 MiB), so there models under ONE_PRECISION_FROM_BYTES keep the copy; on a GPU, where it takes
milliseconds, models under ONE_PRECISION_ON_GPU_FROM_BYTES (level3's small models held three times their
parameters in the referee and peaked at 3.1-6.0x their footprint on an H100 with the GPU's threshold at 256 MiB).
A model holding a TorchScript module keeps the copy whatever its size: its scripted operations would not see the
parameters upcast.
"""

from __future__ import annotations

import copy
import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from kerneljudge.proc.failures import exception_line
from kerneljudge.referee.upcast import BLOCK_BYTES, upcast_call

ONE_PRECISION_FROM_BYTES = 256 << 20  # parameters and buffers from this size on are held at one precision at a time
ONE_PRECISION_ON_GPU_FROM_BYTES = 16 << 20  # ... on a GPU


class Precisions:
    def __init__(self, model: torch.nn.Module, model_bytes: int, device: torch.device):
        self.model = model
        # (a TorchScript module's operations would not see the parameters upcast: upcast.py)
        self.one_at_a_time = model_bytes >= (ONE_PRECISION_ON_GPU_FROM_BYTES if device.type == "cuda"
                                             else ONE_PRECISION_FROM_BYTES) and \
            not any(isinstance(m, torch.jit.ScriptModule) for m in model.modules())
        self.copy64: torch.nn.Module | None = None  # the float64 copy, where one is kept
        # while the buffers and plain tensor attributes are the float64 runs': the native ones put aside, as
        # (module, name, tensor); None: the native ones are in place
        self.put_aside: dict[str, list[tuple[torch.nn.Module, str, torch.Tensor]]] | None = None
        # the float64 runs' own plain tensor attributes: copies of the model's as built, as a float64 copy made then has
        self.float64_attributes = [(m, name, t.clone()) for m, name, t in tensor_attributes(model)] \
            if self.one_at_a_time else []
        self.failed: str | None = None  # why the model cannot be had in float64 (its float64 copy raised)

    @property
    def converted(self) -> bool:
        """Whether the model's buffers and plain tensor attributes are its float64 runs' now (held at one
        precision at a time)."""
        return self.put_aside is not None

    def native(self) -> torch.nn.Module:
        """The model at its own precision (its native buffers and attributes put back where the float64 run's
        were in place)."""
        if self.put_aside is not None:
            self.float64_attributes = tensor_attributes(self.model)
            for module, name, value in self.put_aside["buffers"]:
                module._buffers[name] = value
            for module, name, value in self.put_aside["attributes"]:
                module.__dict__[name] = value
            self.put_aside = None
        return self.model

    def float64(self) -> Callable[..., Any] | None:
        """The model in float64 (a copy, or the model itself called with its parameters upcast on use), or None
        where that failed (`failed` says why)."""
        if self.failed is not None:
            return None
        try:
            if self.one_at_a_time:
                if self.put_aside is None:
                    self._to_float64_state()
                return functools.partial(upcast_call, self.model)
            if self.copy64 is None:
                self.copy64 = copy.deepcopy(self.model).to(torch.float64)
        except Exception as exc:  # noqa: BLE001 - the problem's module may not convert; the plan says why
            self.failed = exception_line(exc, 160)
            self.native()
            return None
        return self.copy64

    @contextmanager
    def state_kept(self) -> Iterator[None]:
        """Around calls of the native model that must leave it as they found it (the float64 plan's separability
        checks: a reference carrying state from call to call, level3/33's hidden state, is otherwise moved past the
        candidate's, which only the draws move): its buffers and plain tensor attributes are put back afterwards,
        each object in its place, with its values where they changed. Not put back: parameters (a forward that
        changes its own is not judged by chunks either way), entries over a parameter's memory, non-tensor
        attributes, and entries a call adds."""
        model = self.model
        shared = {p.untyped_storage().data_ptr() for p in model.parameters()}
        entries = [(m._buffers, name, b) for m, name, b in _buffers(model)]
        entries += [(m.__dict__, name, t) for m, name, t in tensor_attributes(model)]
        kept = [(holder, name, value, value.clone(), _version(value)) for holder, name, value in entries
                if value.untyped_storage().data_ptr() not in shared]
        try:
            yield
        finally:
            with torch.inference_mode():  # (a tensor made by an earlier forward is an inference tensor)
                for holder, name, value, values, version in kept:
                    holder[name] = value
                    if (not torch.equal(value, values)) if version is None else version != _version(value):
                        value.copy_(values)

    def upcast_bytes(self) -> int:
        """The device memory a float64 run takes for the model's state beyond what is allocated now, where its
        parameters are upcast on use: its float64 buffers, and the float64 copy of one parameter at a time (of a
        matrix a block, where a product reads it; an estimate: an operation reading several at once, an LSTM's
        layer, takes their sum). A kept copy is allocated already."""
        if not self.one_at_a_time:
            return 0
        size = torch.float64.itemsize
        buffers = sum(b.numel() * size for b in self.model.buffers() if b.is_floating_point())
        largest = max((min(p.numel() * size, BLOCK_BYTES) if p.dim() == 2 else p.numel() * size
                       for p in self.model.parameters() if p.is_floating_point()), default=0)
        return buffers + largest

    def changed(self, names: list[str]) -> None:
        """The native entries `names` changed: a kept float64 copy takes them (upcast in place: a new copy of
        the whole model per change took seconds per probe for a 1.6 GB model on a CPU)."""
        if self.copy64 is None:
            return
        state, state64 = self.model.state_dict(), self.copy64.state_dict(keep_vars=True)
        with torch.no_grad():
            for name in names:
                state64[name].copy_(state[name])

    def _to_float64_state(self) -> None:
        """The float64 runs' buffers (upcast from the native ones; others copied) and attributes in place."""
        self.put_aside = {"buffers": _buffers(self.model), "attributes": tensor_attributes(self.model)}
        for module, name, value in self.float64_attributes:
            module.__dict__[name] = value
        with torch.no_grad():
            for module, name, value in self.put_aside["buffers"]:
                module._buffers[name] = value.to(torch.float64, copy=True) if value.is_floating_point() \
                    else value.clone()



def _version(t: torch.Tensor) -> int | None:
    """A tensor's version counter (in-place changes move it); None for an inference tensor, which has none."""
    return None if t.is_inference() else t._version


def _buffers(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.Tensor]]:
    """The buffers a model's modules hold (an entry set to None is none)."""
    return [(m, name, b) for m in model.modules() for name, b in m._buffers.items() if b is not None]


def tensor_attributes(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, torch.Tensor]]:
    """The tensors a model's modules hold as plain attributes (not parameters or buffers)."""
    return [(m, name, value) for m in model.modules() for name, value in vars(m).items()
            if isinstance(value, torch.Tensor)]
