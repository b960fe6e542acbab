"""The process's CUDA driver library, for the few driver calls torch does not expose: IPC handles
(deviceshare.py) and stream memory operations with a watchdog kernel (streamhold.py). One loader for both, so
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
