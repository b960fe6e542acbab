"""Tensors as data on the channel: a JSON description plus the raw bytes of each tensor.

`pack` runs where the values are (a snapshot taken at once: the bytes are copied off the device and out
of the process's reach, into the channel or, for a large tensor, straight from the device into a memory
file sealed before it is named: `sealed`; or, where the worker was told to share, a large CUDA tensor is
held and described by its CUDA IPC handle, which the referee copies from at once, or reads in place for a
look that keeps nothing: `deviceshare`). `unpack` runs on the receiving side and trusts nothing: every
dtype, shape and byte count is checked against the description, and only plain numbers, strings, booleans
and None come through as non-tensor values (no objects, no pickles).

An output is described with its structure (a tensor, a tuple or list of tensors, None, or something
else) and the facts only its own process can see: whether each tensor is exactly `torch.Tensor`, has real
storage, and on which device it lives. The referee decides what those facts mean.
"""

from __future__ import annotations

import ctypes
import math
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator

import torch

from kerneljudge import sealed
from kerneljudge.proc import deviceshare, failures

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int16,
    torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
MAX_DIMS = 16


class WireError(ValueError):
    """What arrived does not match its own description (malformed or forged data)."""


def host_bytes(flat: torch.Tensor) -> memoryview:
    """The bytes of a contiguous tensor in host memory, without a copy (valid while the tensor lives)."""
    return memoryview((ctypes.c_char * (flat.numel() * flat.element_size())).from_address(flat.data_ptr())).cast("B")


def _bytes_of(t: torch.Tensor) -> bytes | sealed.SealedBlob:
    """A copy of the tensor's bytes: for a large one a sealed memory file, written from host memory with
    pwrite or straight from the device through a mapping; else bytes (`bytes(storage)` would go element by
    element: 2 us each)."""
    flat = t.detach().reshape(-1).contiguous()
    size = flat.numel() * flat.element_size()
    if size >= sealed.MIN_BYTES and sealed.AVAILABLE:
        if flat.device.type == "cpu":
            return sealed.write_bytes(host_bytes(flat))
        return sealed.write(size, lambda mapped: _copy_into(mapped, flat))
    if flat.device.type != "cpu":
        flat = flat.cpu()
    if not flat.numel():
        return b""
    return ctypes.string_at(flat.data_ptr(), size)


def _copy_into(mapped, flat: torch.Tensor) -> None:
    """The tensor's bytes into a shared mapping (device to host in one copy); no reference to it is kept."""
    target = torch.frombuffer(mapped, dtype=flat.dtype)
    target.copy_(flat)
    del target


#: How a large CUDA tensor is shared (deviceshare.Exporter.export): its description, or None to send its bytes.
Export = Callable[[torch.Tensor], "dict[str, Any] | None"]


def pack_tensor(t: torch.Tensor, export: Export | None = None) -> tuple[dict[str, Any], bytes | None]:
    """A tensor's description and its bytes; None instead of bytes when `export` shared it (a large CUDA
    tensor: the description then holds its handle under "shared")."""
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise WireError(f"dtype {dtype} cannot cross the channel")
    t = t.resolve_conj().resolve_neg()  # its values, not its bytes: a negative or conjugate view's are the opposite
    meta = {"t": "tensor", "dtype": dtype, "shape": list(t.shape)}
    shared = export(t) if export is not None and t.is_cuda and t.numel() * t.element_size() >= sealed.MIN_BYTES \
        else None
    if shared is not None:
        return {**meta, "shared": shared}, None
    return meta, _bytes_of(t)


def _add(meta: dict[str, Any], data: bytes | None, blobs: list) -> None:
    """`data` appended to `blobs` and its index noted in `meta`; nothing for an exported tensor."""
    if data is not None:
        meta["blob"] = len(blobs)
        blobs.append(data)


def pack_values(values: list, export: Export | None = None) -> tuple[list[dict[str, Any]], list[bytes]]:
    """An argument list (tensors and plain values) as descriptions and blobs, in order."""
    meta, blobs = [], []
    for v in values:
        if isinstance(v, torch.Tensor):
            m, b = pack_tensor(v, export)
            _add(m, b, blobs)
            meta.append(m)
        elif v is None or isinstance(v, (bool, int, float, str)):
            meta.append({"t": "value", "v": v})
        elif isinstance(v, (tuple, list)) and all(x is None or isinstance(x, (bool, int, float, str)) for x in v):
            meta.append({"t": "value", "v": list(v), "seq": type(v).__name__})
        else:
            raise WireError(f"a {type(v).__name__} cannot cross the channel (tensors and plain values only)")
    return meta, blobs


def tensors_of(out) -> list:
    """The non-empty tensors of an output (a tensor, or a tuple or list holding some)."""
    items = out if isinstance(out, (tuple, list)) else (out,)
    return [t for t in items if isinstance(t, torch.Tensor) and t.numel()]


def describe_output(out, export: Export | None = None) -> tuple[dict[str, Any], list[bytes]]:
    """An output's structure, its tensors' bytes (or handles, with `export`), and what only this process can
    see about them."""
    if out is None:
        return {"kind": "none"}, []
    if isinstance(out, torch.Tensor):
        items, kind = [out], "tensor"
    elif isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        items, kind = list(out), type(out).__name__
    else:
        return {"kind": "other", "type": f"{type(out).__module__}.{type(out).__qualname__}"}, []
    tensors, blobs = [], []
    for t in items:
        exact = type(t) is torch.Tensor
        storageless = bool(t.numel()) and (t.is_meta or _storage_bytes(t) == 0)
        fact = {"exact": exact, "type": f"{type(t).__module__}.{type(t).__qualname__}", "device": str(t.device),
                "storageless": storageless}
        packed = None
        if exact and not storageless and crossable(t):
            try:
                packed = pack_tensor(t, export)
            except Exception as error:  # noqa: BLE001 - an allocation that failed, else raised again
                if not failures.is_out_of_memory(error):
                    raise
                # (an `expand`ed view of 2**40 elements, a large one not contiguous): the referee judges it by its
                # dtype and shape, or says why it could not compare it; not a fault of the judge's own code
                fact["uncopyable"] = (f"its {t.numel() * t.element_size():,} bytes could not be copied on {t.device}"
                                      f" ({str(error).strip().splitlines()[0][:160]})")
        if packed is not None:
            _add(*packed, blobs)
            fact.update(packed[0])
        else:
            fact.update(dtype=str(t.dtype).removeprefix("torch."), shape=list(t.shape))
        tensors.append(fact)
    return {"kind": kind, "tensors": tensors}, blobs


def crossable(t: torch.Tensor) -> bool:
    """Whether a tensor's values can cross: a dtype of DTYPES and at most MAX_DIMS dimensions. An output that
    cannot is described by its dtype and shape alone, which the referee finds differ from the reference's."""
    return str(t.dtype).removeprefix("torch.") in DTYPES and t.dim() <= MAX_DIMS


def _storage_bytes(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return 0


def _dtype_shape(meta: Any) -> tuple[torch.dtype, list[int]]:
    """A tensor description's dtype and shape, checked."""
    if not isinstance(meta, dict) or meta.get("t") != "tensor":
        raise WireError("expected a tensor description")
    dtype = DTYPES.get(meta.get("dtype"))
    shape = meta.get("shape")
    if dtype is None:
        raise WireError(f"unknown dtype {meta.get('dtype')!r}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(n) is int and 0 <= n < 1 << 40 for n in shape)):
        raise WireError(f"malformed shape {shape!r}")
    return dtype, shape


def output_bytes(meta: dict[str, Any]) -> int:
    """The bytes of a described output's tensors (its description checked as `unpack_output` does)."""
    return sum(_nbytes(*_dtype_shape(fact)) for fact in _output_facts(meta)[1] if "blob" in fact or "shared" in fact)


def values_bytes(meta: list) -> int:
    """The bytes of the tensors among described values (each description checked as `unpack_values` does)."""
    return sum(_nbytes(*_dtype_shape(m)) for m in _value_list(meta) if not _is_value(m))


def _nbytes(dtype: torch.dtype, shape: list[int]) -> int:
    return math.prod(shape) * torch.empty((), dtype=dtype).element_size()


def unpack_tensor(meta: dict[str, Any], blobs: list, device: torch.device, shared: bool = False) -> torch.Tensor:
    """The tensor a description names, checked; `shared`: whether a CUDA IPC description may be taken (only
    where the referee opened this worker's probe: otherwise none was agreed, and none is opened)."""
    dtype, shape = _dtype_shape(meta)
    index = meta.get("blob")
    if "shared" in meta:
        with _share_errors():
            return deviceshare.copy_shared(_agreed(meta, shared), dtype, shape, device)
    if type(index) is not int or not 0 <= index < len(blobs):
        raise WireError(f"no blob {index!r}")
    data = blobs[index]
    if len(data) != _nbytes(dtype, shape):
        raise WireError(f"{len(data)} bytes for a {meta['dtype']} tensor of shape {shape}")
    if not len(data):
        return torch.empty(shape, dtype=dtype, device=device)
    if isinstance(data, sealed.SealedBlob):  # copied at once: a mapping would hold a descriptor open
        with data.buffer() as mapped:
            view = torch.frombuffer(mapped, dtype=dtype)
            copied = view.reshape(shape).to(device, copy=True)
            del view
        return copied
    return torch.frombuffer(data if isinstance(data, bytearray) else bytearray(data), dtype=dtype).reshape(shape).to(device)


def unpack_values(meta: list, blobs: list, device: torch.device, shared: bool = False) -> list:
    """The inverse of pack_values (values the worker is sent, in host memory or the channel; `shared`: the
    referee's copies of values the worker shared, as `unpack_tensor`); raises WireError on anything that is not
    what it says."""
    return [_plain(m) if _is_value(m) else unpack_tensor(m, blobs, device, shared) for m in _value_list(meta)]


@contextmanager
def values_in_place(meta: list, blobs: list, shared: bool) -> Iterator[list]:
    """`unpack_values` for a look that copies nothing it need not: tensors shared as CUDA IPC handles are
    views of the worker's memory where it lies (valid inside the block), the others come to host memory."""
    with ExitStack() as stack:
        values = []
        for m in _value_list(meta):
            if _is_value(m):
                values.append(_plain(m))
            elif isinstance(m, dict) and "shared" in m:
                values.append(_view_in(stack, m, shared))
            else:
                values.append(unpack_tensor(m, blobs, torch.device("cpu")))
        yield values


def _agreed(meta: dict, shared: bool) -> Any:
    """A tensor's CUDA IPC description, where sharing was agreed (else it is malformed: none is opened)."""
    if not shared:
        raise WireError("a tensor described as shared CUDA memory where no sharing was agreed")
    return meta["shared"]


@contextmanager
def _share_errors() -> Iterator[None]:
    """A shared description the driver or its checks refuse is a malformed reply."""
    try:
        yield
    except deviceshare.ShareError as exc:
        raise WireError(str(exc)) from None


def _value_list(meta: Any) -> list:
    if not isinstance(meta, list):
        raise WireError("expected a list of values")
    return meta


def _is_value(m: Any) -> bool:
    return isinstance(m, dict) and m.get("t") == "value"


def _plain(m: dict) -> Any:
    """A non-tensor value, checked: plain numbers, strings, booleans, None, or a list or tuple of them."""
    v = m.get("v")
    plain = (type(v) in (bool, int, float, str) or v is None or
             (type(v) is list and all(x is None or type(x) in (bool, int, float, str) for x in v)))
    if not plain:
        raise WireError("a non-tensor value that is not a plain number, string or list of them")
    return tuple(v) if m.get("seq") == "tuple" else v


def unpack_output(meta: dict[str, Any], blobs: list, device: torch.device,
                  shared: bool = False) -> tuple[str, list[dict], list]:
    """(kind, per-tensor facts, tensors) of a described output; tensors are None where not transferable."""
    kind, facts = _output_facts(meta)
    return kind, facts, [_output_tensor(fact, blobs, device, shared) for fact in facts]


@contextmanager
def output_in_place(meta: dict[str, Any], blobs: list, device: torch.device,
                    shared: bool = False) -> Iterator[tuple[str, list[dict], list]]:
    """`unpack_output` for a look that keeps nothing after the block (a comparison): tensors shared as CUDA IPC
    handles are views of the worker's memory where it lies, valid inside the block, so the referee holds no copy
    of a large output beside its own expected ones (level1/9's 4 GiB: a fourth footprint); the others are
    unpacked as there. Code the candidate left running may change that memory while the comparison reads it (more
    than once: the verdict's pass, the figures, the unwritten count): each read sees what was there then, as a copy
    made at that moment would, and a pass needs every value read to be right; the candidate's process could send any
    bytes it liked anyway (proc/deviceshare.py). A timed output the referee holds for later is copied (one too large
    to hold is compared at once, after its batch, like this)."""
    kind, facts = _output_facts(meta)
    with ExitStack() as stack:
        yield kind, facts, [_output_tensor(fact, blobs, device, shared, stack) for fact in facts]


def _output_tensor(fact: dict, blobs: list, device: torch.device, shared: bool,
                   in_place: ExitStack | None = None) -> torch.Tensor | None:
    """One output tensor from its facts: None where not transferable; one shared as a CUDA IPC handle viewed where
    it lies until `in_place` closes, or (without it) copied; one in a blob unpacked."""
    if "shared" in fact and in_place is not None:
        return _view_in(in_place, fact, shared)
    return unpack_tensor(fact, blobs, device, shared) if "blob" in fact or "shared" in fact else None


def _view_in(stack: ExitStack, meta: dict, shared: bool) -> torch.Tensor:
    """A tensor shared as a CUDA IPC handle, viewed where it lies in the worker's memory until `stack` closes."""
    with _share_errors():
        return stack.enter_context(deviceshare.viewed(_agreed(meta, shared), *_dtype_shape(meta)))


def described_output(meta: Any) -> tuple[str, list[dict], list]:
    """An output as its process described it, none of its tensors unpacked (`unpack_output`'s shape, each tensor
    None): enough to see that its structure is wrong before its bytes are read."""
    kind, facts = _output_facts(meta)
    return kind, facts, [None] * len(facts)


def _output_facts(meta: Any) -> tuple[str, list[dict]]:
    """A described output's kind and per-tensor facts, checked (none for "none" and "other")."""
    if not isinstance(meta, dict) or meta.get("kind") not in ("none", "other", "tensor", "tuple", "list"):
        raise WireError("malformed output description")
    if meta["kind"] in ("none", "other"):
        return meta["kind"], []
    facts = meta.get("tensors")
    if not isinstance(facts, list) or not facts:
        raise WireError("an output description without tensors")
    if not all(isinstance(fact, dict) for fact in facts):
        raise WireError("malformed tensor facts")
    return meta["kind"], facts
