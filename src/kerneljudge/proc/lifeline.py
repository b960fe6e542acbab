"""A torch process of the judge never outlives the judge (imports nothing heavy: it runs first).

The kernel sends SIGKILL to this process when the thread that started it ends (PR_SET_PDEATHSIG, Linux;
isolation.py starts every process from one thread that lives as long as the judge); elsewhere the
channel's end stops an idle process. If the judge died before the request took effect, exit now.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4


def die_with_judge(judge_pid: int, *, undumpable: bool = False) -> None:
    """`undumpable` (the referee): no process of the same user may read or write this one's memory through
    /proc or ptrace (the worker, where the sandbox has no PID namespace to hide the referee from it)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if undumpable:
            libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    if os.getppid() != judge_pid:
        os._exit(0)


#: The word in a command that whoever starts the process replaces with its own pid (the judge's, or the fork
#: server's: the parent the process must die with), up to the first "--" (what follows is the sandbox
#: launcher's command, whose word the launcher fills).
PARENT = "{parent}"


def with_parent(command: list[str], parent_pid: int) -> list[str]:
    """`command` with PARENT, up to its first "--", replaced by `parent_pid`."""
    end = command.index("--") if "--" in command else len(command)
    return [str(parent_pid) if part == PARENT and k < end else part for k, part in enumerate(command)]
