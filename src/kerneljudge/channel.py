"""The private channel between the judge and a worker: length-prefixed JSON over inherited pipes.

Not stdout or stderr (the candidate prints there) and not a file the candidate could guess: two Unix
socket descriptors handed to the worker at spawn (`pair`; pipes work too, without sealed blobs). Only
JSON crosses, never pickles, so nothing the worker sends can run code in the judge. Tensors travel as
blobs after the JSON: raw bytes (a snapshot the sender can no longer change once written), or, for
large ones on a socket, sealed memory files passed as descriptors (`sealed`: a snapshot too, and the
bytes never pass through the judge). The judge relays both between the candidate's worker and the
referee without interpreting them; it checks a sealed blob's seals and size as it arrives.
"""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import struct
import time
from typing import Any

from kerneljudge import sealed

_HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_BLOB_BYTES = 1 << 40  # a tensor's bytes; the receiver checks each blob against what it expects
FIRST_BUFFER_BYTES = 64 << 20  # an inline blob's buffer at first (`_read_exact`)
MAX_SEALED = 200  # descriptors per message (the kernel's limit is 253); more blobs cross as bytes
Blob = bytes | bytearray | sealed.SealedBlob


class ChannelClosed(Exception):
    """The other end closed the pipe (for the judge: the worker died)."""


class ChannelForged(ChannelClosed):
    """What arrived is not a well-formed message (forged or corrupted by the sender)."""


class ChannelTimeout(Exception):
    """No message arrived before the deadline."""


def pair() -> tuple[int, int]:
    """The two ends of one direction of a channel: a Unix socket pair (descriptors can cross it)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return a.detach(), b.detach()


def send(fd: int, message: dict[str, Any], blobs: list[Blob] | tuple[Blob, ...] = (), deadline: float | None = None,
         clock=time.monotonic) -> None:
    """Write one message; `blobs` follow it: raw bytes (their lengths in the message's `_blobs`), or sealed
    memory files passed as descriptors beside it (`{"sealed": size}` there) where `fd` is a socket. On a
    non-blocking `fd`, ChannelTimeout once `deadline` passes with the message not all written (_write_all)."""
    passing = sealed.AVAILABLE and any(isinstance(b, sealed.SealedBlob) for b in blobs) and _is_socket(fd)
    fds: list[int] = []
    described: list[int | dict[str, int]] = []
    inline: list = []
    for blob in blobs:
        if isinstance(blob, sealed.SealedBlob) and passing and len(fds) < MAX_SEALED:
            fds.append(blob.fd)
            described.append({"sealed": len(blob)})
        else:
            described.append(len(blob))
            inline.append(blob.buffer() if isinstance(blob, sealed.SealedBlob) else blob)
    data = json.dumps({**message, "_blobs": described}, allow_nan=True, default=str).encode()
    head = _HEADER.pack(len(data)) + data
    if fds:
        with socket.socket(fileno=os.dup(fd)) as sock:
            while True:
                try:
                    sent = socket.send_fds(sock, [head], fds)
                    break
                except BlockingIOError:
                    _wait_for_room(fd, deadline, clock)
        head = head[sent:]
    _write_all(fd, head, deadline, clock)
    for blob in inline:
        _write_all(fd, blob, deadline, clock)


def _is_socket(fd: int) -> bool:
    return stat.S_ISSOCK(os.fstat(fd).st_mode)


def _write_all(fd: int, payload, deadline: float | None = None, clock=time.monotonic) -> None:
    """Write all of `payload`; on a non-blocking `fd` (the judge's side of a channel), waiting for room only
    until `deadline`: a process that stops reading (a candidate flooding questions and reading no answer)
    raises ChannelTimeout, not a judge blocked for ever."""
    view = memoryview(payload).cast("B")
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            _wait_for_room(fd, deadline, clock)
            continue
        view = view[written:]


def _wait_for_room(fd: int, deadline: float | None, clock) -> None:
    left = None if deadline is None else deadline - clock()
    if left is not None and left <= 0:
        raise ChannelTimeout("the other end read nothing before the deadline")
    select.select([], [fd], [], left)


def receive(fd: int, deadline: float | None = None, clock=time.monotonic) -> dict[str, Any]:
    """Read one message; raise ChannelClosed on EOF, ChannelForged on a malformed message and
    ChannelTimeout once `deadline` (clock time) passes. Blobs that follow it are in the message under
    `_blobs`: bytes, or SealedBlob for the sealed memory files that came beside it (checked here)."""
    fds: list[int] = []
    try:
        (length,) = _HEADER.unpack(_read_head(fd, deadline, clock, fds))
        if length > MAX_MESSAGE_BYTES:
            raise ChannelForged(f"message of {length} bytes exceeds the channel limit")
        try:
            message = json.loads(_read_exact(fd, length, deadline, clock))
        except (ValueError, RecursionError) as exc:  # not JSON, or nested past the parser's depth
            raise ChannelForged(f"a message that is not JSON ({type(exc).__name__})") from None
        if not isinstance(message, dict):
            raise ChannelForged("a message that is not a JSON object")
        sizes = message.get("_blobs") or []
        if not isinstance(sizes, list) or not all(_blob_size(n) is not None for n in sizes) \
                or sum(isinstance(n, dict) for n in sizes) != len(fds):
            raise ChannelForged("a message with malformed blob sizes")
        blobs: list[Blob] = []
        for n in sizes:
            if isinstance(n, dict):
                blobs.append(sealed.adopt(fds.pop(0), n["sealed"]))
            else:
                blobs.append(_read_exact(fd, n, deadline, clock))
    except sealed.SealError as exc:
        raise ChannelForged(str(exc)) from None
    finally:
        for left in fds:  # not taken: never leak a descriptor the sender pushed on us
            os.close(left)
    message["_blobs"] = blobs
    return message


def _blob_size(n: Any) -> int | None:
    """A blob's size as a message states it: an int (bytes inline) or {"sealed": int} (a memory file)."""
    if isinstance(n, dict) and set(n) == {"sealed"}:
        n = n["sealed"]
    return n if type(n) is int and 0 <= n <= MAX_BLOB_BYTES else None


def _read_head(fd: int, deadline: float | None, clock, fds: list[int]) -> bytes:
    """The length header, with the descriptors that came beside it (on a socket) appended to `fds`."""
    if not _is_socket(fd):
        return bytes(_read_exact(fd, _HEADER.size, deadline, clock))
    head = b""
    with socket.socket(fileno=os.dup(fd)) as sock:
        while len(head) < _HEADER.size:
            _wait(fd, deadline, clock)
            data, got, flags, _ = socket.recv_fds(sock, _HEADER.size - len(head), MAX_SEALED,
                                                  socket.MSG_CMSG_CLOEXEC)
            fds.extend(got)
            if flags & socket.MSG_CTRUNC:
                raise ChannelForged("more descriptors than a message may carry")
            if not data:
                raise ChannelClosed("the other end closed the channel")
            head += data
    return head


def _wait(fd: int, deadline: float | None, clock) -> None:
    if deadline is not None:
        wait_s = deadline - clock()
        if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
            raise ChannelTimeout()


def _read_exact(fd: int, size: int, deadline: float | None, clock) -> bytes:
    """`size` bytes, in a buffer that grows as they arrive (doubling from FIRST_BUFFER_BYTES), never allocated
    whole before they came: a worker that announced 8 GiB and sent nothing had the judge hold 8 GB until its
    deadline (1 TiB: a MemoryError that ended the judge)."""
    buffer, done = bytearray(min(size, FIRST_BUFFER_BYTES)), 0
    while done < size:
        if done == len(buffer):
            buffer.extend(bytes(min(len(buffer), size - len(buffer))))
        _wait(fd, deadline, clock)
        with memoryview(buffer) as view, view[done:min(len(buffer), done + (16 << 20))] as part:
            got = os.readv(fd, [part])
        if not got:
            raise ChannelClosed("the other end closed the channel")
        done += got
    return buffer  # a bytearray: torch.frombuffer takes it without a copy
