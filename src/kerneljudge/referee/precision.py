"""The reference model at its own (native) precision and in float64: a float64 copy kept beside it where its
parameters are small, one precision at a time, converted in place, where they are large.

The referee needs the reference at both precisions: native for the expected outputs, the baselines and the
probes' changes; float64 for the truth. A float64 copy beside the native model holds three footprints of its
parameters (float32 + float64) beside the worker's one: for a parameter-heavy problem the judge held 4x the
problem's footprint between requests (level2/56 at full size on the H200: 4.99x at its peak). Converted in
place, entry after entry (`Module._apply`, as `Module.to` does, so modules that re-lay their weights, such
as RNNs, do so), the referee holds the float64 parameters, or the native ones and one entry's float64 copy.
Each draw converts twice then (milliseconds on a GPU; 20-30 ms per 64 MB on a CPU, a quarter more time
for such a problem's evaluation), so small models keep the copy: it costs under 2 x ONE_PRECISION_FROM_BYTES.

Exact both ways: the float64 values are upcast native ones, and every change of the parameters (the probes'
and the range moves, in the referee as in the worker) is made at native precision, then upcast into a kept
copy (`changed`), so the downcast gives back the very native values.
"""

from __future__ import annotations

import copy

import torch

ONE_PRECISION_FROM_BYTES = 256 << 20  # parameters and buffers from this size on are held at one precision at a time


class Precisions:
    def __init__(self, model: torch.nn.Module, model_bytes: int):
        self.model = model
        self.one_at_a_time = model_bytes >= ONE_PRECISION_FROM_BYTES
        self.copy64: torch.nn.Module | None = None  # the float64 copy, where one is kept
        self.native_dtypes: dict[int, torch.dtype] | None = None  # by tensor id while converted to float64
        self.failed: str | None = None  # why the model cannot be had in float64 (its conversion raised)
        # tensors the modules hold as plain attributes, at each precision: state a forward may reassign (level3/33's
        # hidden state), kept apart as the float64 copy keeps its own
        self.attributes: dict[str, list[tuple[torch.nn.Module, str, torch.Tensor]]] = {"native": [], "float64": []}

    @property
    def converted(self) -> bool:
        """Whether the model itself is in float64 now (held at one precision at a time)."""
        return self.native_dtypes is not None

    def native(self) -> torch.nn.Module:
        """The model at its own precision (converted back if it is in float64)."""
        if self.native_dtypes is not None:
            dtypes, self.native_dtypes = self.native_dtypes, None
            with torch.no_grad():
                self.model._apply(lambda t: t.to(dtypes[id(t)]) if id(t) in dtypes else t)
            self._swap_attributes("float64", "native")
        return self.model

    def float64(self) -> torch.nn.Module | None:
        """The model with its floating parameters and buffers in float64, or None where that failed (`failed`
        says why; the model is at its own precision then)."""
        if self.failed is not None:
            return None
        try:
            if not self.one_at_a_time:
                if self.copy64 is None:
                    self.copy64 = copy.deepcopy(self.model).to(torch.float64)
                return self.copy64
            if self.native_dtypes is None:
                self._convert()
        except Exception as exc:  # noqa: BLE001 - the problem's module may not convert; the plan says why
            self.failed = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
            self.native()
            return None
        return self.model

    def changed(self, names: list[str]) -> None:
        """The native entries `names` changed: a kept float64 copy takes them (upcast in place: a new copy of
        the whole model per change took seconds per probe for a 1.6 GB model on a CPU)."""
        if self.copy64 is None:
            return
        state, state64 = self.model.state_dict(), self.copy64.state_dict(keep_vars=True)
        with torch.no_grad():
            for name in names:
                state64[name].copy_(state[name])

    def _swap_attributes(self, leaving: str, entering: str) -> None:
        self.attributes[leaving] = [(m, k, v) for m in self.model.modules() for k, v in vars(m).items()
                                    if isinstance(v, torch.Tensor)]
        for module, name, value in self.attributes[entering]:
            module.__dict__[name] = value
        self.attributes[entering] = []

    def _convert(self) -> None:
        self._swap_attributes("native", "float64")
        dtypes: dict[int, torch.dtype] = {}
        self.native_dtypes = dtypes

        def up(t: torch.Tensor) -> torch.Tensor:
            if not t.is_floating_point():
                return t
            dtype = dtypes.setdefault(id(t), t.dtype)  # a tied entry, met again, is already float64
            out = t.to(torch.float64)
            dtypes[id(out)] = dtype  # a buffer is replaced by `out`; a parameter keeps its object
            return out

        with torch.no_grad():
            self.model._apply(up)
