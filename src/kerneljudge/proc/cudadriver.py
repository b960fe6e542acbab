"""The process's CUDA driver library, for the few driver calls torch does not expose: IPC handles
(deviceshare.py), stream memory operations with a watchdog kernel (streamhold.py), and host memory registered for
the referee's parked parameters (`register_host`: the driver's calls leave no error pending in the runtime, where a
failed `cudaHostRegister` did until torch's next kernel launch checked it). One loader for both, so
the library is opened once per process and a call's versioned name (`_v2`) is looked up the same way."""

from __future__ import annotations

import ctypes
import functools


@functools.cache
def libcuda() -> ctypes.CDLL:
    """The driver torch loaded (raises OSError where there is none)."""
    return ctypes.CDLL("libcuda.so.1")


def entry(lib: ctypes.CDLL, name: str, argtypes: list, restype=ctypes.c_int):
    """The driver call `name`, its `_v2` version where the driver has one (raises AttributeError where it has
    neither), with its argument and result types set."""
    fn = getattr(lib, f"{name}_v2", None) or getattr(lib, name)
    fn.argtypes, fn.restype = argtypes, restype
    return fn


def register_host(address: int, nbytes: int) -> bool:
    """Page-lock `nbytes` of host memory at `address` for the device's copies (cuMemHostRegister, in the context
    current on this thread); whether it was."""
    fn = entry(libcuda(), "cuMemHostRegister", [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint])
    return fn(ctypes.c_void_p(address), ctypes.c_size_t(nbytes), ctypes.c_uint(0)) == 0


def unregister_host(address: int) -> None:
    """Undo `register_host` for the memory at `address` (before that memory is freed)."""
    entry(libcuda(), "cuMemHostUnregister", [ctypes.c_void_p])(ctypes.c_void_p(address))
