"""The request loop of the judge's torch processes (the referee and the candidate's worker).

Each request carries a nonce its reply must echo; the reply goes out with its blobs. A handler may send
progress messages before its reply (`progress(data)`, with the same nonce). A reply marked `poisoned`
(a CUDA error) ends the process after it is sent: such a process is never reused.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from kerneljudge import channel

Handle = Callable[[dict[str, Any]], tuple[dict[str, Any], list]]


def serve(make_handler: Callable[[Callable[[dict[str, Any]], None]], Handle], argv: list[str]) -> None:
    """Answer requests on the descriptors in argv until the channel closes; `make_handler(progress)`."""
    read_fd, write_fd = int(argv[1]), int(argv[2])
    current: dict[str, Any] = {"nonce": None}
    handle = make_handler(lambda data: channel.send(write_fd, {"progress": data, "nonce": current["nonce"]}))
    status = 0
    while True:
        try:
            message = channel.receive(read_fd)
        except channel.ChannelClosed:
            break
        current["nonce"] = message.get("nonce")
        reply, blobs = handle(message)
        channel.send(write_fd, {**reply, "nonce": message.get("nonce")}, blobs)
        if reply.get("poisoned"):
            status = 3
            break
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # do not wait for threads a candidate may have left behind
