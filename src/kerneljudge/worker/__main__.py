"""Worker entry point: `python -m kerneljudge.worker READ_FD WRITE_FD JUDGE_PID` (or `main` in a child of
the fork server, proc/zygote.py, with JUDGE_PID the server's).

First ties this process's life to the judge's (proc/lifeline.py), then imports torch and every judge
module and binds the judge's clocks (candidate code is not imported yet), then serves requests until the
channel closes or a CUDA error poisons the process (proc/serve.py).
"""

import sys

from kerneljudge.proc.lifeline import die_with_judge


def main(argv: list[str]) -> None:
    die_with_judge(int(argv[3]))
    from kerneljudge.proc.serve import serve
    from kerneljudge.worker.guard import Guard
    from kerneljudge.worker.server import Worker

    guard = Guard.bind()
    serve(lambda ask: Worker(guard, ask).handle, argv)


if __name__ == "__main__":
    main(sys.argv)
