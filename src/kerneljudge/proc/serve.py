"""The request loop of the judge's torch processes (the referee and the candidate's worker).

Each request carries a nonce its reply must echo; the reply goes out with its blobs. A handler may ask the
judge a question before its reply and wait for the answer (`ask(data)`, with the same nonce: a worker's
extension build, worker/build.py). A reply marked `poisoned`
(a CUDA error) ends the process after it is sent: such a process is never reused.

With KERNELJUDGE_PROFILE_DIR set (a diagnostic for benchmarks, never a verdict's input), a `profiled`
process's request handling runs under cProfile and its statistics are written there when the channel
closes. Only the referee is: the worker's probes trace the candidate's calls with the same hook.
"""

from __future__ import annotations

import cProfile
import os
import sys
import threading
from typing import Any, Callable

from kerneljudge import channel

Handle = Callable[[dict[str, Any]], tuple[dict[str, Any], list]]
Ask = Callable[[dict[str, Any]], dict[str, Any]]


def serve(make_handler: Callable[[Ask], Handle], argv: list[str], *, profiled: bool = False) -> None:
    """Answer requests on the descriptors in argv until the channel closes; `make_handler(ask)`."""
    read_fd, write_fd = int(argv[1]), int(argv[2])
    current: dict[str, Any] = {"nonce": None}
    talking = threading.Lock()  # a question and its answer, or the reply, whole: threads take turns

    def ask(question: dict[str, Any]) -> dict[str, Any]:
        with talking:
            nonce = current["nonce"]
            if nonce is None:  # between requests (a thread of the candidate's): the judge is not listening
                raise RuntimeError("Error building extension: the judge answers questions only while it waits for a "
                                   "reply (not from a thread between requests)")
            channel.send(write_fd, {"ask": question, "nonce": nonce})
            message = channel.receive(read_fd)
            if message.get("nonce") != nonce or not isinstance(message.get("answer"), dict):
                raise channel.ChannelForged("the judge's message was not the answer to this process's question")
            return message["answer"]

    handle = make_handler(ask)
    status = 0
    profile_dir = os.environ.get("KERNELJUDGE_PROFILE_DIR") if profiled else None
    profiler = cProfile.Profile() if profile_dir else None
    while True:
        try:
            message = channel.receive(read_fd)
        except channel.ChannelClosed:
            break
        current["nonce"] = message.get("nonce")
        reply, blobs = profiler.runcall(handle, message) if profiler else handle(message)
        with talking:
            current["nonce"] = None
            channel.send(write_fd, {**reply, "nonce": message.get("nonce")}, blobs)
        if reply.get("poisoned"):
            status = 3
            break
    if profiler:
        profiler.dump_stats(os.path.join(profile_dir, f"referee-{os.getpid()}.prof"))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # do not wait for threads a candidate may have left behind
