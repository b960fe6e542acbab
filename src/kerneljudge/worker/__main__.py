"""Worker entry point: `python -m kerneljudge.worker READ_FD WRITE_FD JUDGE_PID`.

First asks the kernel to kill this process when the judge dies (a judge killed outright gets no chance
to clean up; see isolation.py), then binds the judge's clocks, then serves requests from the judge
until the channel closes or a CUDA error poisons the process (then it answers once more and exits: it
is never reused).
"""

import ctypes
import os
import signal
import sys

from kerneljudge import channel

PR_SET_PDEATHSIG = 1


def die_with_judge(judge_pid: int) -> None:
    """SIGKILL to this process when the thread that started it ends (Linux; elsewhere the channel's end
    stops an idle worker); exit now if the judge already died before the request took effect."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != judge_pid:
        os._exit(0)


def main(argv: list[str]) -> int:
    read_fd, write_fd = int(argv[1]), int(argv[2])
    die_with_judge(int(argv[3]))
    from kerneljudge.worker.guard import Guard
    from kerneljudge.worker.server import Server

    guard = Guard.bind()  # torch and every judge module are imported now; candidate code is not
    server = Server(guard, send=lambda message: channel.send(write_fd, message))
    while True:
        try:
            request = channel.receive(read_fd)
        except channel.ChannelClosed:
            return 0
        reply = server.handle(request)
        channel.send(write_fd, {**reply, "nonce": request.get("nonce")})
        if reply.get("poisoned"):
            return 3


if __name__ == "__main__":
    status = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # do not wait for threads a candidate may have left behind
