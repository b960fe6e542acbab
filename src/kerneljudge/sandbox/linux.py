"""The few Linux calls the sandbox needs that Python 3.11's os module lacks (unshare, mount, prctl), through
ctypes; each raises OSError with the kernel's errno so a caller can say which layer the system refused."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4

try:
    _libc = ctypes.CDLL(None, use_errno=True)
except (OSError, TypeError):  # no C library to open this way (not a POSIX system): every call fails
    _libc = None


def _check(result: int, what: str) -> None:
    if result != 0:  # (on a system without _libc the calls raise AttributeError before getting here)
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    encode = lambda text: text.encode() if text is not None else None  # noqa: E731
    _check(_libc.mount(encode(source), encode(target), encode(fstype), ctypes.c_ulong(flags), encode(data)),
           f"mount {target}")


def prctl(option: int, value: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def drop_capabilities() -> None:
    """Empty the capability bounding set and forbid gaining privileges: whatever the worker's user id, the
    program it executes starts with no capability (no remounting the read-only view, no raw devices)."""
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    cap = 0
    while True:
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as exc:  # EINVAL past the kernel's last capability
            if exc.errno != 22 or cap == 0:
                raise
            break
        cap += 1
