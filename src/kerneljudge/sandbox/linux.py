"""The few Linux calls the sandbox needs that Python 3.11's os module lacks (unshare, mount, prctl), through
ctypes; each raises OSError with the kernel's errno so a caller can say which layer the system refused."""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
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
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

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


def detach(target: str) -> None:
    """Unmount `target` lazily (umount2 with MNT_DETACH)."""
    _check(_libc.umount2(target.encode(), 2), f"umount {target}")


def prctl(option: int, value: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def drop_capabilities() -> None:
    """Forbid gaining privileges, empty the capability bounding set, then drop every capability this process
    holds (effective, permitted, inheritable, ambient): no remounting the read-only view, no uncovering a hidden
    path, no raw devices, whatever the worker's user id, and whether the worker then executes a program or runs
    in this process (a fork server's child: it kept the full set its new user namespace gave it, and a candidate
    remounted the package writable)."""
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
    clear_capabilities()


def clear_capabilities() -> None:
    """Drop every capability this process holds (ambient, effective, permitted, inheritable): always allowed, with
    or without a user namespace (a judge run as root without one gave its worker root's)."""
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except OSError as exc:  # EINVAL: a kernel before ambient capabilities (4.3) has none to clear
        if exc.errno != 22:
            raise
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()  # (version 3: two words of each set)
    _check(_libc.capset(ctypes.byref(header), data), "capset")
