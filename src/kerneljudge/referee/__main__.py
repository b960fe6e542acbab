"""Referee entry point: `python -m kerneljudge.referee READ_FD WRITE_FD JUDGE_PID` (see proc/serve.py; or
`main` in a child of the fork server, proc/zygote.py, with JUDGE_PID the server's)."""

import sys

from kerneljudge.proc.lifeline import die_with_judge


def main(argv: list[str]) -> None:
    die_with_judge(int(argv[3]), undumpable=True)
    from kerneljudge.proc.serve import serve
    from kerneljudge.referee.server import Referee

    serve(lambda ask: Referee().handle, argv, profiled=True)


if __name__ == "__main__":
    main(sys.argv)
