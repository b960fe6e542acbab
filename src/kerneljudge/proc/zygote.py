"""The fork server: `python -m kerneljudge.proc.zygote CONTROL_FD WARM_CONTROL_FD JUDGE_PID`.

Every evaluation runs in two fresh processes (the referee and the candidate's worker), and a fresh
Python spends a second or more of CPU importing torch before it can do anything: on a 2-core machine
most of a small evaluation's time. This process imports torch and the judge's process code once, then
forks a child for each process the judge asks for; the child has everything imported and starts at
once. It never imports candidate code and runs no tensor operation (no thread pool is started to be
lost across a fork), so every child starts as clean as a fresh interpreter would: fresh process
session, its own descriptors only, the environment and folder the judge gave it.

Two servers answer, on two sockets: this one forks workers; a second one, forked from it once torch is
imported, first loads torch's meta registrations (the referee's first second, spent once) and forks
referees. The meta registrations import torch's compiler, which imports Triton, and Triton decides
once, at its import, whether its own library kernels are interpreted: a worker must import it itself,
after it has chosen (proc/machine.py: Triton's interpreter on a CPU run).

The judge sends one request per child over a Unix SEQPACKET socket: JSON (the command, environment,
folder, and the descriptor numbers the command names) with the descriptors themselves (the output
log, the channel's ends, and a pipe for the child's wait status). A command is only ever one of the
judge's own entries (`-m kerneljudge.worker`, `-m kerneljudge.referee`, either under
`-m kerneljudge.sandbox.launch`): they run in the child by calling their `main`, the sandbox launcher
in-process too, so the namespaces, the read-only view and the limits are set up in the child exactly
as in a fresh launch. The child closes this server's socket before anything else runs: no process it
starts can ask for another. When a child ends, its wait status goes down its pipe. The server is
undumpable and dies with the judge; its children die with it.
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import importlib
import json
import os
import select
import socket
import sys
import tempfile
import traceback

from kerneljudge.proc.lifeline import PR_SET_DUMPABLE, die_with_judge, with_parent

#: The commands a child may run: module -> the module whose `main(argv)` runs it.
ENTRIES = {"kerneljudge.worker": "kerneljudge.worker.__main__", "kerneljudge.referee": "kerneljudge.referee.__main__"}
LAUNCHER = "kerneljudge.sandbox.launch"
#: What the children need, imported here once (torch first: the rest imports it). Not torch's JIT build module:
#: its import starts the CUDA driver, and no child forked after that can use CUDA (seen on an H100).
PRELOAD = ("torch", "numpy", *ENTRIES.values(), "kerneljudge.worker.server", "kerneljudge.referee.server", LAUNCHER)
MAX_REQUEST_BYTES = 1 << 20
MAX_FDS = 16


def main(argv: list[str]) -> None:
    control, warm_control = socket.socket(fileno=int(argv[1])), socket.socket(fileno=int(argv[2]))
    die_with_judge(int(argv[3]), undumpable=True)
    for name in PRELOAD:
        importlib.import_module(name)
    if os.fork() == 0:  # the warm server
        control.close()
        die_with_judge(os.getppid(), undumpable=True)
        from kerneljudge.proc import memory
        memory.warm_meta_device()
        _serve(warm_control)
    warm_control.close()
    _serve(control)


#: cuDeviceGetCount's answer before anyone called cuInit (CUDA_ERROR_NOT_INITIALIZED).
CUDA_NOT_INITIALIZED = 3


def _cuda_untouched() -> None:
    """Exit (the judge then starts each process afresh) if anything imported here started the CUDA driver:
    a process forked after `cuInit` cannot use CUDA. A driver that is only loaded is fine (a CUDA build of
    torch maps libcuda at import): the loaded library is asked, without starting it, whether it was started."""
    with open("/proc/self/maps") as maps:
        loaded = {line.split()[-1] for line in maps if "/libcuda.so" in line}
    for path in loaded:
        driver = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        answer = driver.cuDeviceGetCount(ctypes.byref(ctypes.c_int()))
        if answer != CUDA_NOT_INITIALIZED:
            print(f"the CUDA driver was started while importing torch (cuDeviceGetCount answered {answer});"
                  " a forked process could not use it", flush=True)
            os._exit(1)


def _serve(control: socket.socket) -> None:
    """Say ready, then fork a child per request and pass on each child's wait status, until the judge
    closes its end. What was imported is frozen out of the garbage collector's reach first (gc.freeze):
    each child's first full collection walked torch's ~170,000 objects, 0.2 s of CPU at every worker's and
    referee's start on the 2-core VM (most of the evaluation's `worker` stage), and wrote to every page it
    shared with this server."""
    _cuda_untouched()
    gc.freeze()
    control.send(json.dumps({"ready": os.getpid()}).encode())
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (pid, status pipe)
    while True:
        readable, _, _ = select.select([control, *children], [], [])
        for ready in readable:
            if ready is control:
                message, fds, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, MAX_FDS)
                if not message:  # the judge closed its end: nothing more to start
                    os._exit(0)
                pid, status_pipe = _start(json.loads(message), fds, control)
                children[os.pidfd_open(pid)] = (pid, status_pipe)
                control.send(json.dumps({"pid": pid}).encode())
            else:
                pid, status_pipe = children.pop(ready)
                _, status = os.waitpid(pid, 0)
                os.write(status_pipe, str(status).encode())
                os.close(status_pipe)
                os.close(ready)


def _start(request: dict, fds: list[int], control: socket.socket) -> tuple[int, int]:
    """Fork the child; return its pid and the status pipe (the last descriptor), closing the others here."""
    *given, status_pipe = fds
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(status_pipe)
        control.detach()
        _become(request, given)
    for fd in given:
        os.close(fd)
    return pid, status_pipe


def _become(request: dict, given: list[int]) -> None:
    """In the child: the descriptors, session, environment and folder a fresh process would have, then the
    command. Never returns. `given`: the output log, then the descriptors for request["fds"]."""
    code = 1
    try:
        targets = [int(n) for n in request["fds"]]  # the numbers the command names, for given[1:]
        base = max([*targets, *given, 2]) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, base) for fd in given]  # out of the way of the targets
        os.closerange(0, base)  # this server's socket, other children's pipes, the originals
        os.open(os.devnull, os.O_RDONLY)  # descriptor 0, the lowest free
        os.set_inheritable(0, True)
        os.dup2(moved[0], 1)
        os.dup2(moved[0], 2)
        for fd, target in zip(moved[1:], targets):
            os.dup2(fd, target)
        os.closerange(base, os.sysconf("SC_OPEN_MAX"))
        os.setsid()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # read again from this environment's TMPDIR
        _allow_dumps()
        command = with_parent(request["command"], os.getppid())
        if command[1:3] == ["-m", LAUNCHER]:
            from kerneljudge.sandbox import launch
            launch.main(command[2:], run=_run)
        else:
            _run(command)
    except SystemExit as ended:
        code = ended.code if isinstance(ended.code, int) else (0 if ended.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _allow_dumps() -> None:
    """The server is undumpable; its children are as dumpable as a fresh process (the referee makes itself
    undumpable again)."""
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def _run(command: list[str]) -> None:
    """Run `python -m MODULE ARGS...` here, for the modules in ENTRIES only ("{parent}": this process's parent)."""
    if command[1:2] != ["-m"] or command[2] not in ENTRIES:
        raise SystemExit(f"kerneljudge fork server: not a command it runs: {command[1:3]}")
    argv = [command[2], *with_parent(command[3:], os.getppid())]
    _close_on_exec()
    sys.argv = argv
    importlib.import_module(ENTRIES[command[2]]).main(argv)


def _close_on_exec() -> None:
    """Close what an exec would (descriptors marked close-on-exec: the sandbox launcher's status pipe, any
    the preloaded libraries opened), so the process holds what a freshly executed one would."""
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                os.close(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass


if __name__ == "__main__":
    main(sys.argv)
