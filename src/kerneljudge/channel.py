"""The private channel between the judge and a worker: length-prefixed JSON over inherited pipes.

Not stdout or stderr (the candidate prints there) and not a file the candidate could guess: two pipe
file descriptors handed to the worker at spawn. Only JSON crosses, never pickles, so nothing the
worker sends can run code in the judge.
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


class ChannelClosed(Exception):
    """The other end closed the pipe (for the judge: the worker died)."""


class ChannelTimeout(Exception):
    """No message arrived before the deadline."""


def send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message, allow_nan=True, default=str).encode()
    payload = _HEADER.pack(len(data)) + data
    view = memoryview(payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def receive(fd: int, deadline: float | None = None, clock=time.monotonic) -> dict[str, Any]:
    """Read one message; raise ChannelClosed on EOF and ChannelTimeout once `deadline` (clock time) passes."""
    (length,) = _HEADER.unpack(_read_exact(fd, _HEADER.size, deadline, clock))
    if length > MAX_MESSAGE_BYTES:
        raise ChannelClosed(f"message of {length} bytes exceeds the channel limit")
    return json.loads(_read_exact(fd, length, deadline, clock))


def _read_exact(fd: int, size: int, deadline: float | None, clock) -> bytes:
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            wait_s = deadline - clock()
            if wait_s <= 0 or not select.select([fd], [], [], wait_s)[0]:
                raise ChannelTimeout()
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChannelClosed("the other end closed the channel")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)
