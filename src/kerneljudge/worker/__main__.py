"""Worker entry point: `python -m kerneljudge.worker READ_FD WRITE_FD`.

Binds the judge's clocks first, then serves requests from the judge until the channel closes or a
CUDA error poisons the process (then it answers once more and exits: it is never reused).
"""

import os
import sys

from kerneljudge import channel
from kerneljudge.worker.guard import Guard
from kerneljudge.worker.server import Server


def main(argv: list[str]) -> int:
    read_fd, write_fd = int(argv[1]), int(argv[2])
    guard = Guard.bind()  # torch and every judge module are imported now; candidate code is not
    server = Server(guard)
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
