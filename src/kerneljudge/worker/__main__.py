"""Worker entry point: `python -m kerneljudge.worker READ_FD WRITE_FD`.

Binds the judge's clocks first (every judge module is imported now; candidate code is not), then serves
requests until the channel closes or a CUDA error poisons the process (see proc/serve.py).
"""

import sys

from kerneljudge.proc.serve import serve
from kerneljudge.worker.guard import Guard
from kerneljudge.worker.server import Worker

if __name__ == "__main__":
    serve(Worker(Guard.bind()).handle, sys.argv)
