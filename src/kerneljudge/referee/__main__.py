"""Referee entry point: `python -m kerneljudge.referee READ_FD WRITE_FD` (see proc/serve.py)."""

import sys

from kerneljudge.proc.serve import serve
from kerneljudge.referee.server import Referee

if __name__ == "__main__":
    serve(Referee().handle, sys.argv)
