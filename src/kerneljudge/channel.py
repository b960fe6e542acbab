"""The private channel between the judge and a worker: length-prefixed JSON over inherited pipes.

Not stdout or stderr (the candidate prints there) and not a file the candidate could guess: two pipe
file descriptors handed to the worker at spawn. Only JSON crosses, never pickles, so nothing the
worker sends can run code in the judge. Tensors travel as raw byte blobs after the JSON (`blobs`):
bytes written to a pipe are a snapshot the sender can no longer change, and the judge relays them
between the candidate's worker and the referee without interpreting them.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

_HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
MAX_BLOB_BYTES = 1 << 40  # a tensor's bytes; the receiver checks each blob against what it expects


class ChannelClosed(Exception):
    """The other end closed the pipe (for the judge: the worker died)."""


class ChannelTimeout(Exception):
    """No message arrived before the deadline."""


def send(fd: int, message: dict[str, Any], blobs: list[bytes] | tuple[bytes, ...] = ()) -> None:
    """Write one message; `blobs` follow it as raw bytes (their lengths go in the message's `_blobs`)."""
    data = json.dumps({**message, "_blobs": [len(b) for b in blobs]}, allow_nan=True, default=str).encode()
    _write_all(fd, _HEADER.pack(len(data)) + data)
    for blob in blobs:
        _write_all(fd, blob)


def _write_all(fd: int, payload) -> None:
    view = memoryview(payload).cast("B")
    while view:
        written = os.write(fd, view)
        view = view[written:]


def receive(fd: int, deadline: float | None = None, clock=time.monotonic) -> dict[str, Any]:
    """Read one message; raise ChannelClosed on EOF and ChannelTimeout once `deadline` (clock time) passes.
    Blobs that follow it are in the message under `_blobs`, as bytes."""
    (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline, clock))
    if length > MAX_MESSAGE_BYTES:
        raise ChannelClosed(f"message of {length} bytes exceeds the channel limit")
    message = json.loads(_read_exact(fd, length, deadline, clock))
    if not isinstance(message, dict):
        raise ChannelClosed("a message that is not a JSON object")
    sizes = message.get("_blobs") or []
    if not isinstance(sizes, list) or not all(type(n) is int and 0 <= n <= MAX_BLOB_BYTES for n in sizes):
        raise ChannelClosed("a message with malformed blob sizes")
    message["_blobs"] = [_read_exact(fd, n, deadline, clock) for n in sizes]
    return message


def _read_exact(fd: int, size: int, deadline: float | None, clock) -> bytes:
    buffer = bytearray(size)
    view, done = memoryview(buffer), 0
    while done < size:
        if deadline is not None:
            wait_s = deadline - clock()
            if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                raise ChannelTimeout()
        got = os.readv(fd, [view[done:done + (16 << 20)]])
        if not got:
            raise ChannelClosed("the other end closed the channel")
        done += got
    return buffer  # a bytearray: torch.frombuffer takes it without a copy
