"""The float64 run of a reference whose parameters stay at their own precision: each one upcast where an operation
uses it, and a large matrix operand a block of rows or columns at a time.

Converted to float64 for the truth, a parameter-heavy reference's parameters took twice their native memory in the
referee while the worker held them too: three footprints of them at the least (level2/56's 4 GiB weight on an
H100: 3.01x its footprint, level3/2's MLP likewise). Upcast on use, the referee holds its native parameters and,
for one operation at a time, the float64 copy of what it reads: of a matrix product's parameter operand
(`torch.nn.functional.linear`, `matmul`, `mm`, `@`, directly or through a transpose) a block of BLOCK_BYTES, of
anything else the parameter whole, let go when the operation returns. Exact: the upcast values are the converted
ones, and a product's blocks are its own rows or columns, each computed over the whole of the summed dimension.

The model's code sees float64 parameters: a parameter's `dtype` reads float64 and its `element_size()` 8 (a forward
casting to its weight's dtype stays in float64, as it would converted); its shape, strides and device read as they
are. Views of a parameter (a transpose, a slice, a reshape) are made natively, so a product reading one still reads
it in blocks and a slice is upcast alone; one the forward returns is upcast. A forward that changes a parameter in
place would change a float64 copy the next operation never sees, so that raises `ChangedInPlace`, and the plan
says the float64 reference could not run (the native reference is the truth then), as for any reference failing
in float64. Operations outside torch's function dispatch do not see the mode: a TorchScript module's would read
the native parameters, so such a model keeps a float64 copy instead (referee/precision.py).
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

BLOCK_BYTES = 64 << 20  # of a matrix product's parameter operand upcast at once

_FLOAT64_GETTERS = (torch.Tensor.dtype,)  # descriptors whose `__get__` the mode answers as for a float64 tensor
_AS_IS_GETTERS = (torch.Tensor.shape, torch.Tensor.ndim, torch.Tensor.device, torch.Tensor.is_cuda,
                  torch.Tensor.requires_grad, torch.Tensor.layout, torch.Tensor.is_leaf)
_AS_IS = {torch.Tensor.size, torch.Tensor.dim, torch.Tensor.numel, torch.Tensor.stride, torch.Tensor.is_contiguous,
          torch.Tensor.is_floating_point, torch.Tensor.__len__, torch.Tensor.data_ptr, torch.Tensor.get_device}
# views of a held tensor, made natively and held in turn: getters, then methods and functions
_VIEW_GETTERS = (torch.Tensor.T, torch.Tensor.mT, torch.Tensor.H, torch.Tensor.mH, torch.Tensor.data)
_VIEWS = {torch.Tensor.t, torch.t, torch.Tensor.transpose, torch.transpose, torch.Tensor.swapaxes, torch.swapaxes,
          torch.Tensor.permute, torch.permute, torch.Tensor.__getitem__, torch.Tensor.narrow, torch.narrow,
          torch.Tensor.select, torch.select, torch.Tensor.view, torch.Tensor.view_as, torch.Tensor.reshape,
          torch.reshape, torch.Tensor.expand, torch.Tensor.expand_as, torch.Tensor.unsqueeze, torch.unsqueeze,
          torch.Tensor.squeeze, torch.squeeze, torch.Tensor.flatten, torch.flatten, torch.Tensor.unflatten,
          torch.Tensor.chunk, torch.chunk, torch.Tensor.split, torch.split, torch.Tensor.unbind, torch.unbind,
          torch.Tensor.detach, torch.detach, torch.Tensor.movedim, torch.movedim}
_IN_PLACE_DUNDERS = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
                     "__ipow__", "__imatmul__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__"}
_FLAGS = {"requires_grad_", "share_memory_"}  # in-place by name, writing no values
_PRODUCTS = {torch.matmul, torch.Tensor.matmul, torch.mm, torch.Tensor.mm}


class ChangedInPlace(RuntimeError):
    """The forward changes one of its parameters in place: its float64 run would not see the change."""


class UpcastOnUse(TorchFunctionMode):
    """Within it, `parameters` (the floating ones not in float64) are read as float64 by every torch operation."""

    def __init__(self, parameters: Iterable[torch.Tensor]):
        super().__init__()
        self.held = {id(p): p for p in parameters if p.is_floating_point() and p.dtype != torch.float64}
        # views of held tensors, made natively (they share the parameter's memory) so that a product reading one
        # still upcasts it in blocks; kept while the mode is, which keeps their ids theirs
        self.views: dict[int, torch.Tensor] = {}

    def _is_held(self, value) -> bool:
        return isinstance(value, torch.Tensor) and (id(value) in self.held or id(value) in self.views)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not any(self._is_held(a) for a in pytree.tree_leaves((args, kwargs))):
            return func(*args, **kwargs)
        getter = getattr(func, "__self__", None) if getattr(func, "__name__", "") == "__get__" else None
        if getter is not None and any(getter is g for g in _FLOAT64_GETTERS):
            return torch.float64
        if func is torch.Tensor.element_size:
            return torch.float64.itemsize
        if func in _AS_IS or (getter is not None and any(getter is g for g in _AS_IS_GETTERS)):
            return func(*args, **kwargs)
        first = args[0] if args else None
        if (_in_place(func, kwargs) and self._is_held(first)) or self._is_held(kwargs.get("out")):
            raise ChangedInPlace(f"the forward changes a parameter in place ({getattr(func, '__name__', func)})")
        if self._is_held(first) and (func in _VIEWS or (getter is not None and any(getter is g for g in _VIEW_GETTERS))):
            views = func(*args, **kwargs)
            for view in pytree.tree_leaves(views):
                if isinstance(view, torch.Tensor):
                    self.views[id(view)] = view
            return views
        if func is torch.nn.functional.linear:
            return self._linear(*args, **kwargs)
        if func in _PRODUCTS and len(args) == 2 and not kwargs:
            return self._product(*args)
        return func(*pytree.tree_map(self._upcast, args), **pytree.tree_map(self._upcast, kwargs))

    def _upcast(self, value):
        """A held tensor's float64 copy (anything else as it is)."""
        return value.to(torch.float64) if self._is_held(value) else value

    def _product(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """`a @ b` with a held 2-D operand upcast a block at a time: the right one's columns, the left one's rows."""
        if self._is_held(b) and b.dim() == 2 and _blocked(b):
            a = self._upcast(a)
            return _by_blocks(b.shape[1], _per_block(b.shape[0]), a.shape[:-1] + (b.shape[1],), a.dtype, a.device,
                              lambda j, k: torch.matmul(a, b[:, j:k].to(torch.float64)), columns=True)
        if self._is_held(a) and a.dim() == 2 and _blocked(a) and b.dim() >= 1:
            b = self._upcast(b)
            shape = (a.shape[0],) if b.dim() == 1 else b.shape[:-2] + (a.shape[0], b.shape[-1])
            return _by_blocks(a.shape[0], _per_block(a.shape[1]), shape, b.dtype, b.device,
                              lambda i, k: torch.matmul(a[i:k].to(torch.float64), b), columns=b.dim() == 1)
        return torch.matmul(self._upcast(a), self._upcast(b))

    def _linear(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """`linear(input, weight, bias)`, a held weight upcast a block of its rows (the output's columns) at a time."""
        x, bias = self._upcast(input), self._upcast(bias) if bias is not None else None
        if not (self._is_held(weight) and weight.dim() == 2 and _blocked(weight)):
            return torch.nn.functional.linear(x, self._upcast(weight), bias)
        shape = x.shape[:-1] + (weight.shape[0],)
        bias = bias.expand(shape) if bias is not None else None  # (a bias of any shape that broadcasts to it)
        return _by_blocks(weight.shape[0], _per_block(weight.shape[1]), shape, x.dtype, x.device,
                          lambda j, k: torch.nn.functional.linear(x, weight[j:k].to(torch.float64))
                          + (bias[..., j:k] if bias is not None else 0), columns=True)


def upcast_call(model: torch.nn.Module, *args):
    """The model called on `args` with its parameters read in float64; what it returns in float64 too (a view of a
    parameter it returns is upcast)."""
    mode = UpcastOnUse(model.parameters())
    with mode:
        out = model(*args)
    return pytree.tree_map(mode._upcast, out)


def _in_place(func, kwargs: dict) -> bool:
    """Whether the operation writes into its first argument: `add_`, `__setitem__`, `__iadd__`, `inplace=True`."""
    name = getattr(func, "__name__", "")
    return (name.endswith("_") and not name.endswith("__") and name not in _FLAGS) or name in _IN_PLACE_DUNDERS \
        or bool(kwargs.get("inplace"))


def _blocked(t: torch.Tensor) -> bool:
    """Whether a held 2-D operand is upcast in blocks (over BLOCK_BYTES in float64), not whole."""
    return t.numel() * 8 > BLOCK_BYTES


def _per_block(length: int) -> int:
    """How many rows (or columns) of `length` elements make a block of BLOCK_BYTES in float64."""
    return max(1, BLOCK_BYTES // (8 * max(1, length)))


def _by_blocks(size: int, step: int, shape, dtype, device, block, columns: bool) -> torch.Tensor:
    """The output of `shape`, its last dimension (`columns`) or its second-to-last cut in `step`s of `size`, each
    part `block(start, stop)` written in place (no list of parts and no concatenation: one output's memory)."""
    out = torch.empty(shape, dtype=dtype, device=device)
    for start in range(0, size, step):
        stop = min(size, start + step)
        part = out[..., start:stop] if columns else out[..., start:stop, :]
        part.copy_(block(start, stop))
    return out
