"""Referee entry point: `python -m kerneljudge.referee READ_FD WRITE_FD JUDGE_PID` (see proc/serve.py)."""

import sys

from kerneljudge.proc.lifeline import die_with_judge

if __name__ == "__main__":
    die_with_judge(int(sys.argv[3]), undumpable=True)
    from kerneljudge.proc.serve import serve
    from kerneljudge.referee.server import Referee

    serve(lambda progress: Referee().handle, sys.argv)
