"""Cache flushers: evict the device L2 or the CPU caches before each timed call.

Cache state: a kernel timed back-to-back on the same inputs reads them from
L2 and looks faster than it will in a real model.  :class:`L2Flusher` writes
a buffer of at least twice the L2 size *before* each timed call and outside
the timed region (NVBench and do_bench do the same; do_bench uses a fixed
256 MB).  :class:`CpuCacheFlusher` does the same for the CPU's last-level
cache when timing on the host.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import sys
from typing import Any, Callable

from kerneljudge.timing.stats import _check_number
from kerneljudge.timing.timers import _require_current_cuda_device


@functools.cache
def find_persisting_l2_reset() -> tuple[Callable[[], None] | None, str]:
    """Find ``cudaCtxResetPersistingL2Cache``; return ``(fn_or_None, note)``.

    ``torch.cuda`` does not expose this call (checked on torch 2.13).  A
    candidate could set an access-policy window that pins its data in the
    persisting part of L2, which a plain buffer write does not evict, so we
    reset persisting lines before each timed call when we can.  We try
    cuda-python (``cuda.bindings.runtime`` or ``cuda.cudart``) and then the
    CUDA runtime library already loaded by torch through ctypes.  The reset
    applies to the runtime's current device.  If nothing is found, the note
    says so and only the buffer write flushes L2.

    Looked up once per process (importing cuda-python's runtime bindings took
    63 ms on the H200), when the process takes its GPU
    (``proc/machine.take_device``), or ahead of it (``prepare_device``): outside every measured request, and
    before any candidate code is imported that could plant a module of that
    name.  A cuda-python that fails to import in any way counts as absent.
    """
    for modname in ("cuda.bindings.runtime", "cuda.cudart"):
        try:
            mod = __import__(modname, fromlist=["cudaCtxResetPersistingL2Cache"])
            fn = mod.cudaCtxResetPersistingL2Cache
        except Exception:  # noqa: BLE001 - not installed, or broken: the next way
            continue

        def reset_cuda_python(fn: Any = fn) -> None:
            (err,) = fn()
            if int(err) != 0:
                raise RuntimeError(f"cudaCtxResetPersistingL2Cache failed: {err}")

        return reset_cuda_python, f"cudaCtxResetPersistingL2Cache via {modname}"

    names = ["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"]
    for pattern in ("nvidia/cuda_runtime/lib/libcudart.so*", "nvidia/cu13/lib/libcudart.so*"):
        for base in sys.path:
            names.extend(sorted(glob.glob(os.path.join(base, pattern))))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            fn = lib.cudaCtxResetPersistingL2Cache
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int

        def reset_ctypes(fn: Any = fn) -> None:
            err = fn()
            if err != 0:
                raise RuntimeError(f"cudaCtxResetPersistingL2Cache failed with cudaError {err}")

        return reset_ctypes, f"cudaCtxResetPersistingL2Cache via ctypes {name}"
    return None, "cudaCtxResetPersistingL2Cache not reachable (no cuda-python, no libcudart); persisting L2 lines are not reset"


class L2Flusher:
    """Evicts the device L2 cache by writing a buffer of ``multiple`` x L2 size.

    Call it before each timed call, outside the timed region (the timers do
    this).  Writing (not reading) is used so dirty lines of the previous call
    are evicted too, and the fill value changes on every call so no layer can
    treat the write as a no-op.  The write is enqueued on the current stream,
    so with CUDA events it is ordered before ``start.record()``.

    ``l2_cache_bytes`` defaults to ``get_device_properties(device).L2_cache_size``
    (needs CUDA); pass it explicitly to use the flusher on other devices, e.g.
    ``"cpu"`` in tests.  ``reset_persisting_l2`` is called first on each flush
    (see :func:`find_persisting_l2_reset`; :meth:`for_cuda_device` wires it).
    ``write(buffer, value)`` does the write (``buffer.fill_(value)`` by default;
    the judge passes a kernel that occupies the whole device meanwhile, so no
    other stream's work runs during the flush: proc/occupy.py).  The buffer is
    a whole number of 16-byte words.
    """

    def __init__(
        self,
        device: Any,
        *,
        l2_cache_bytes: int | None = None,
        multiple: int = 2,
        reset_persisting_l2: Callable[[], None] | None = None,
        write: Callable[[Any, int], None] | None = None,
    ) -> None:
        import torch

        _check_number("multiple", multiple, integer=True)
        if multiple < 2:
            raise ValueError(f"multiple must be >= 2 to evict the whole L2, got {multiple}")
        if l2_cache_bytes is None:
            if not torch.cuda.is_available():
                raise ValueError("CUDA is not available; pass l2_cache_bytes=... or use CpuCacheFlusher")
            l2_cache_bytes = int(torch.cuda.get_device_properties(device).L2_cache_size)
        _check_number("l2_cache_bytes", l2_cache_bytes, integer=True)
        if l2_cache_bytes <= 0:
            raise ValueError(f"l2_cache_bytes must be > 0, got {l2_cache_bytes}")
        self.l2_cache_bytes = l2_cache_bytes
        n_words = -(-multiple * l2_cache_bytes // 16) * 4  # ceil, int32 words in 16-byte groups
        self.buffer = torch.empty(n_words, dtype=torch.int32, device=device)
        self.buffer_bytes = self.buffer.numel() * self.buffer.element_size()
        self._reset = reset_persisting_l2
        self._write = write or (lambda buffer, value: buffer.fill_(value))
        self.persisting_l2_note = "not requested" if reset_persisting_l2 is None else "enabled"
        self._value = 0
        self.flushes = 0

    @classmethod
    def for_cuda_device(cls, device: Any = None, *, multiple: int = 2,
                        write: Callable[[Any, int], None] | None = None) -> "L2Flusher":
        """Flusher for a CUDA device, resetting persisting L2 lines if possible.

        The reset is probed once; if the probe fails it is disabled and
        ``persisting_l2_note`` records why.
        """
        import torch

        _require_current_cuda_device(torch, device)
        reset, note = find_persisting_l2_reset()
        if reset is not None:
            try:
                reset()
            except RuntimeError as exc:
                reset, note = None, f"probe failed, persisting L2 not reset: {exc}"
        flusher = cls(device, multiple=multiple, reset_persisting_l2=reset, write=write)
        flusher.persisting_l2_note = note
        return flusher

    def __call__(self) -> None:
        if self._reset is not None:
            self._reset()
        self._value = (self._value + 1) & 0x7FFFFFFF
        self._write(self.buffer, self._value)
        self.flushes += 1


def _parse_cache_size(text: str) -> int:
    """Parse sysfs cache sizes like ``"32768K"``, ``"1M"``, ``"512"`` into bytes."""
    s = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    digits = s[:-1] if s[-1:] in "KMG" else s
    return int(digits) * mult


def last_level_cache_bytes(
    sysfs_cpu0_cache: str = "/sys/devices/system/cpu/cpu0/cache",
    fallback_bytes: int = 32 << 20,
) -> int:
    """Largest cache size listed for cpu0 in sysfs (the LLC); ``fallback_bytes`` if unreadable."""
    sizes = []
    for path in glob.glob(os.path.join(sysfs_cpu0_cache, "index*", "size")):
        try:
            with open(path) as fh:
                sizes.append(_parse_cache_size(fh.read()))
        except (OSError, ValueError):
            continue
    return max(sizes) if sizes else fallback_bytes


# The most cache the CPU flush counts on: a 2-vCPU VM listed its host's whole 300 MiB L3, a 600 MiB flush took 66 ms
# before every timed call, and the timing cross-check's tolerance, 30% of the reference's unexplained time (most of
# it the flush), let a candidate hide 21 ms per call (stages/measure.py). A VM's share of a shared L3 is far less.
FLUSHED_CACHE_MAX_BYTES = 64 << 20


class CpuCacheFlusher:
    """Evicts CPU caches by writing a buffer of ``multiple`` x LLC size.

    Uses ``ctypes.memset`` on a private buffer (no torch, no Python loop), with
    a value that changes per call.  Optional for CPU timing: pass it as
    ``HostTimer(flush=...)``.  ``cache_bytes`` defaults to
    :func:`last_level_cache_bytes` (sysfs, else 32 MiB), at most
    ``FLUSHED_CACHE_MAX_BYTES``.
    """

    def __init__(self, *, cache_bytes: int | None = None, multiple: int = 2) -> None:
        _check_number("multiple", multiple, integer=True)
        if multiple < 2:
            raise ValueError(f"multiple must be >= 2 to evict the whole cache, got {multiple}")
        if cache_bytes is None:
            cache_bytes = min(last_level_cache_bytes(), FLUSHED_CACHE_MAX_BYTES)
        _check_number("cache_bytes", cache_bytes, integer=True)
        if cache_bytes <= 0:
            raise ValueError(f"cache_bytes must be > 0, got {cache_bytes}")
        self.buffer_bytes = multiple * cache_bytes
        self.buffer = (ctypes.c_ubyte * self.buffer_bytes)()
        self._value = 0
        self.flushes = 0

    def __call__(self) -> None:
        self._value = (self._value + 1) & 0xFF
        ctypes.memset(self.buffer, self._value, self.buffer_bytes)
        self.flushes += 1

