"""Worker entry point: `python -m kerneljudge.worker READ_FD WRITE_FD`.

Binds the judge's clocks first, then serves requests from the judge until the channel closes or a
CUDA error poisons the process (then it answers once more and exits: it is never reused).
"""

from kerneljudge.worker.guard import Guard

GUARD = Guard.bind()  # before anything else, above all before candidate code is imported

import os  # noqa: E402
import sys  # noqa: E402

from kerneljudge import channel  # noqa: E402
from kerneljudge.worker.server import Server  # noqa: E402


def main(argv: list[str]) -> int:
    read_fd, write_fd = int(argv[1]), int(argv[2])
    server = Server(GUARD)
    GUARD.refresh()  # torch and every judge module are imported now; the candidate is not
    while True:
        try:
            request = channel.receive(read_fd)
        except channel.ChannelClosed:
            return 0
        reply = server.handle(request)
        channel.send(write_fd, reply)
        if reply.get("poisoned"):
            return 3


if __name__ == "__main__":
    status = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # do not wait for threads a candidate may have left behind
