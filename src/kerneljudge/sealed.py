"""Large tensors cross the channel as sealed memory files instead of bytes through the judge.

Relaying a 64 MiB tensor as bytes costs five copies (device to host, into the pipe, out of it in the
judge, into the next pipe, out of it in the receiver): seconds per evaluation on level2/51. Instead the
sender writes the bytes once into an anonymous memory file (`memfd_create`) and seals it against writing,
growing and shrinking before it names it in a message. From then on nobody can change those bytes, not
the sender either, through any descriptor or mapping it kept (the kernel refuses the seal while a writable
shared mapping exists, and refuses every write after it): the file is the same snapshot the bytes in a
pipe were. Its descriptor travels beside the message (SCM_RIGHTS on the channel's Unix socket, so no
name in any folder, nothing to clean up and nothing to guess); the judge checks the seals and the size
without reading a byte (`adopt`) and relays the descriptor; the receiver maps it and copies at once.
The memory is freed when the last descriptor and mapping are gone.

Small tensors (under MIN_BYTES), systems without memfd, and channels that are not sockets keep the bytes
in the channel. Nothing here imports torch: the judge uses it to check and relay.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
from typing import Callable

MIN_BYTES = 1 << 20  # a smaller tensor crosses as bytes: a memory file costs a few system calls
WRITE_CHUNK = 1 << 30  # bytes per pwrite (one call may write less than asked)
AVAILABLE = hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS")
REQUIRED_SEALS = (fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) if AVAILABLE else 0


class SealError(ValueError):
    """A descriptor that is not a sealed memory file of the size its message says."""


class SealedBlob:
    """One sealed memory file of `size` bytes, owned through its descriptor (closed with the object)."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size

    def __len__(self) -> int:
        return self.size

    def buffer(self) -> mmap.mmap:
        """The bytes, mapped privately (writes, if any, go to this process's own copy of a page); close it
        when done (the mapping holds a descriptor of its own)."""
        return mmap.mmap(self.fd, self.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.close()


def write(size: int, fill: Callable[[mmap.mmap], None]) -> SealedBlob:
    """A sealed memory file of `size` bytes (> 0) that `fill` writes through a shared mapping; `fill` must
    keep no reference to the mapping (it is unmapped before the seal)."""
    fd = os.memfd_create("kerneljudge-blob", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        mapped = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0))
        try:
            fill(mapped)
        finally:
            mapped.close()
        seal(fd)
        return SealedBlob(fd, size)
    except BaseException:
        os.close(fd)
        raise


def write_bytes(data: memoryview) -> SealedBlob:
    """A sealed memory file holding `data` (a flat byte view, not empty), written with pwrite: one copy,
    and no mapping whose pages the kernel zero-fills first (half the time of `write` on the CPU VM)."""
    fd = os.memfd_create("kerneljudge-blob", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        done = 0
        while done < data.nbytes:
            done += os.pwrite(fd, data[done:done + WRITE_CHUNK], done)
        seal(fd)
        return SealedBlob(fd, data.nbytes)
    except BaseException:
        os.close(fd)
        raise


def seal(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, REQUIRED_SEALS | fcntl.F_SEAL_SEAL)


def adopt(fd: int, size: int) -> SealedBlob:
    """A received descriptor, taken only if it is a regular memory file of exactly `size` bytes sealed
    against any change; otherwise it is closed and SealError says why."""
    try:
        info = os.fstat(fd)
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS) if AVAILABLE else 0
    except OSError as exc:  # F_GET_SEALS on a file that is not a memory file
        os.close(fd)
        raise SealError(f"a descriptor that is not a sealed memory file ({exc.strerror})") from None
    problem = ("not a regular file" if not stat.S_ISREG(info.st_mode) else
               "of no bytes" if size < 1 else
               "not sealed against writes" if seals & REQUIRED_SEALS != REQUIRED_SEALS else
               f"{info.st_size} bytes where its message says {size}" if info.st_size != size else None)
    if problem:
        os.close(fd)
        raise SealError(f"a memory file {problem}")
    return SealedBlob(fd, size)
