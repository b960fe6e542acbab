"""Large CUDA outputs cross from the worker to the referee as CUDA IPC handles instead of through host memory.

Through host memory a 64 MiB output costs a device-to-host copy in the worker, a sealed memory file and a
host-to-device copy in the referee: about 1 GB/s end to end on the H200 host, the largest item of an
evaluation's time at KernelBench's sizes (docs/benchmarks.md, sixth session). With CUDA IPC the worker
keeps the output (a contiguous copy of it where it is not contiguous), waits for the caller's stream, and
hands over the driver's handle of the allocation holding it; the referee maps that allocation, copies the
bytes into its own memory at device speed (or, for a check trial's inputs after the call, compares them
where they lie: `viewed`, no second device copy of the inputs) and unmaps it at once.

What it trusts, and what not:
- Only the worker exports; the referee never hands its own memory to a process that runs candidate code.
- The handle, the offset and the size are checked: the referee asks the driver for the range it mapped
  and reads only bytes inside it, at an offset aligned to the dtype; a handle that does not open is a
  malformed reply (`WireError`).
- The output (and a check's inputs after the call, which the referee reads in place) stays in the
  candidate's process, held, until the worker's next request, so code the candidate left running could
  still write into it before the referee read it (a sealed memory file could not be changed after the
  reply). What that buys is nothing the candidate did not have: its process could
  always send any bytes it liked, a timed call's output is exported after its batch anyway (kept in the
  worker meanwhile), and what bounds lazy or hidden work is the referee's own end-to-end time of each timed
  batch. The judge relays every worker reply to the referee before the worker's next request
  (stages/context.py), which is what lets the worker let go of the outputs then.
- Whether handles open at all (the driver, the sandbox's namespaces) is asked once per evaluation with a
  small probe (pipeline.py); where it fails, outputs cross through host memory as before.
"""

from __future__ import annotations

import ctypes
import functools
import math
import re
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from kerneljudge.proc import cudadriver

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE
LAZY_ENABLE_PEER_ACCESS = 0x1
PROBE_ELEMENTS = 4096


class ShareError(ValueError):
    """A handle that cannot be exported or opened, or a description that does not fit what it maps."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class _Driver:
    """The four driver calls this needs, from the process's libcuda (loaded by torch)."""

    def __init__(self) -> None:
        try:
            lib = cudadriver.libcuda()
            self.get_handle = cudadriver.entry(lib, "cuIpcGetMemHandle", [ctypes.POINTER(_Handle), ctypes.c_uint64])
            self.open = cudadriver.entry(lib, "cuIpcOpenMemHandle", [ctypes.POINTER(ctypes.c_uint64), _Handle,
                                                                      ctypes.c_uint])
            self.close = cudadriver.entry(lib, "cuIpcCloseMemHandle", [ctypes.c_uint64])
            self.range = cudadriver.entry(lib, "cuMemGetAddressRange", [ctypes.POINTER(ctypes.c_uint64),
                                                                         ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64])
        except (OSError, AttributeError) as exc:
            raise ShareError(f"the CUDA driver's IPC calls are not available: {exc}") from None

    def allocation_of(self, pointer: int) -> tuple[int, int]:
        """(base, size) of the device allocation holding `pointer`."""
        base, size = ctypes.c_uint64(), ctypes.c_size_t()
        _check(self.range(ctypes.byref(base), ctypes.byref(size), pointer), "cuMemGetAddressRange")
        return base.value, size.value


@functools.cache
def _driver() -> _Driver:
    """The process's driver calls, looked up once (the referee opens a handle per tensor received)."""
    return _Driver()


def _check(status: int, call: str) -> None:
    if status != 0:
        raise ShareError(f"{call} failed (CUDA driver error {status})")


class Exporter:
    """The worker's side: outputs exported, held until `release` (the worker's next request)."""

    def __init__(self) -> None:
        self.driver = _driver()
        self.held: list[torch.Tensor] = []

    def export(self, t: torch.Tensor) -> dict[str, Any] | None:
        """`t` (a CUDA tensor; a contiguous copy of it where it is not contiguous), held, its work on the
        current stream finished, and described as the handle of its allocation and its offset there; None
        where the copy does not fit or the allocation cannot be exported (torch's expandable segments, the
        driver's own pools): that tensor then crosses through host memory.

        Not a copy of a contiguous output: a copy would add an output's size to the worker's peak (6.0x an
        elementwise problem's footprint against 5.1x, H200) and fix nothing, since the copy too stays in the
        candidate's process until the referee read it. Where candidate code runs again before the reply
        (the repeat probe's first output), the worker sends that output through host memory instead."""
        try:
            shared = t.detach().contiguous()
        except torch.OutOfMemoryError:
            return None
        torch.cuda.current_stream(t.device).synchronize()
        handle = _Handle()
        try:
            base, _ = self.driver.allocation_of(shared.data_ptr())
            _check(self.driver.get_handle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
        except ShareError:
            return None
        self.held.append(shared)
        return {"handle": bytes(handle).hex(), "offset": shared.data_ptr() - base}

    def release(self) -> None:
        self.held.clear()

    def probe(self, device: torch.device) -> dict[str, Any]:
        """The handshake's probe: PROBE_ELEMENTS int32 counting up (`check_probe` opens it)."""
        exported = self.export(torch.arange(PROBE_ELEMENTS, dtype=torch.int32, device=device))
        if exported is None:
            raise ShareError("this process's allocations cannot be exported")
        return exported


@contextmanager
def _opened(handle: _Handle) -> Iterator[tuple[int, int, int]]:
    """(mapped address, start and size of the allocation mapped) of `handle`, closed at the end (opening and
    closing a handle cost 0.03-0.06 ms each on the H200: nothing is kept open between copies)."""
    driver, base = _driver(), ctypes.c_uint64()
    _check(driver.open(ctypes.byref(base), handle, LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle")
    try:
        yield (base.value, *driver.allocation_of(base.value))
    finally:
        driver.close(base.value)


@contextmanager
def viewed(description: Any, dtype: torch.dtype, shape: list[int]) -> Iterator[torch.Tensor]:
    """The `shape`/`dtype` bytes the described handle maps, as a tensor viewing the worker's memory in place
    (no copy), valid inside the block (the handle is open for it, and closed once the work queued on it is
    done); ShareError when the description is malformed, the handle does not open, the bytes would reach
    past the allocation it maps or are not aligned to the dtype (a shape and an offset are the worker's
    claims: nothing is read before they are known to fit)."""
    if not (isinstance(description, dict) and set(description) == {"handle", "offset"}
            and isinstance(description["handle"], str) and re.fullmatch(r"[0-9a-f]{128}", description["handle"])
            and type(description["offset"]) is int and 0 <= description["offset"] < 1 << 48):
        raise ShareError("a malformed shared-memory description")
    item_bytes = torch.empty((), dtype=dtype).element_size()
    nbytes = math.prod(shape) * item_bytes  # Python ints: no overflow
    torch.cuda.init()
    device = torch.device("cuda", torch.cuda.current_device())
    if not nbytes:
        yield torch.empty(shape, dtype=dtype, device=device)
        return
    handle = _Handle.from_buffer_copy(bytes.fromhex(description["handle"]))
    with _opened(handle) as (base, start, size):
        offset = description["offset"]
        if base + offset + nbytes > start + size:
            raise ShareError(f"{nbytes} bytes at offset {offset} reach past the {size}-byte allocation shared")
        if (base + offset) % item_bytes:  # the allocator's are aligned; a misaligned read faults on the device
            raise ShareError(f"offset {offset} is not aligned to the {item_bytes}-byte elements of {dtype}")
        source = torch.as_tensor(_Span(base + offset, nbytes), device=device)
        try:
            yield source.view(dtype).reshape(shape)
        finally:
            torch.cuda.current_stream().synchronize()  # nothing queued may read the mapping once it is closed
            del source


def copy_shared(description: Any, dtype: torch.dtype, shape: list[int], device: torch.device) -> torch.Tensor:
    """A tensor of the referee's own on `device` (the CPU too) holding the bytes `viewed` names; ShareError as
    there, or when they cannot be read. Nothing is allocated before the bytes are known to lie inside the
    allocation shared."""
    with viewed(description, dtype, shape) as source:
        target = torch.empty(shape, dtype=dtype, device=device)
        try:
            target.copy_(source)
            torch.cuda.current_stream().synchronize()
        except RuntimeError as exc:  # not OutOfMemoryError (the referee's own want): the memory shared
            if isinstance(exc, torch.OutOfMemoryError):
                raise
            raise ShareError(f"the shared bytes could not be read: {type(exc).__name__}: {exc}") from None
    return target


def check_probe(description: Any) -> str | None:
    """None when the worker's probe opens here and holds what it should; else why not (the host path then)."""
    if isinstance(description, dict) and isinstance(description.get("unavailable"), str):
        return f"the worker could not export: {description['unavailable'][:300]}"
    try:
        device = torch.device("cuda", torch.cuda.current_device())
        got = copy_shared(description, torch.int32, [PROBE_ELEMENTS], device)
    except Exception as exc:  # noqa: BLE001 - whatever stops the probe, outputs cross through host memory
        return f"{type(exc).__name__}: {exc}"[:300]
    if not torch.equal(got, torch.arange(PROBE_ELEMENTS, dtype=torch.int32, device=device)):
        return "the probe's bytes differ"
    return None


class _Span:
    """`nbytes` of device memory at `address`, as the CUDA array interface describes them (torch.as_tensor
    views them without a copy)."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "version": 3, "strides": None, "stream": None}
