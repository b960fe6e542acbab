"""One timing at a time per device, across processes: a file lock held around an evaluation's timing.

Two evaluations timing on the same GPU (or the same CPUs) at once slow each other down and neither can
tell (one report: 10.75 ms against 7.5 ms alone, with no word). The judge holds an exclusive lock on
`<cache dir>/locks/timing-<device>.lock` while its worker times the candidate and the baselines; a
second evaluation waits for it, says so (`on_wait`), and its result carries a `timing-lock-wait` finding
with the wait. The file holds the holder's pid while it is held, so the one waiting can say whom it
waits for. The lock is the kernel's (flock): it is released when its holder exits, however it exits.

The device key is what the judge can name without CUDA: `cpu`, or the GPU's entry in
CUDA_VISIBLE_DEVICES (else its index), so two processes that see the same GPU under different indices
still share a lock when they name it the same way. The lock folder is the cache folder, one per user:
evaluations of two users on one machine do not see each other's locks.
"""

from __future__ import annotations

import fcntl
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator


@dataclass(frozen=True)
class Wait:
    """How long an evaluation waited for the lock, and for whom (None: the holder's pid was unreadable)."""

    waited_ms: float
    holder_pid: int | None


def device_key(device: dict, environ: dict[str, str] | None = None) -> str:
    """`cpu`, or `cuda-<id>` where id is the GPU's CUDA_VISIBLE_DEVICES entry (a UUID or a physical
    index) when set, else its index as the worker reported it."""
    if device.get("type") != "cuda":
        return "cpu"
    index = int(device.get("index") or 0)
    visible = [v.strip() for v in (environ if environ is not None else os.environ).get(
        "CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return "cuda-" + (visible[index] if index < len(visible) else str(index))


def lock_path(lock_dir: Path, key: str) -> Path:
    return lock_dir / f"timing-{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.lock"


@contextmanager
def timing_lock(lock_dir: Path, key: str, *, on_wait: Callable[[int | None], None],
                clock_ms: Callable[[], float]) -> Iterator[Wait | None]:
    """Hold the timing lock of device `key`; yields None when it was free, else the Wait. `on_wait(pid)`
    is called once, before waiting, with the holder's pid."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(lock_dir, key), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        wait = None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            on_wait(holder)
            started = clock_ms()
            fcntl.flock(fd, fcntl.LOCK_EX)
            wait = Wait(clock_ms() - started, holder)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield wait
        finally:
            os.ftruncate(fd, 0)  # no stale pid for the next one to read
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return int(text) if text.isdigit() else None
