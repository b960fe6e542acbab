"""How the judge starts its torch processes: forked by the fork server, or executed afresh.

A fresh referee or worker spends a second or more of CPU importing torch before it answers (twice per
evaluation; on a 2-core machine most of a small evaluation's time, and on a GPU host 4.7 s with CUDA's
start). The fork server (proc/zygote.py) imports torch once and forks each process from that state, so a
process starts in milliseconds; each is still a new process, never one that ran candidate code. One
server per judge process and environment (a server started for another environment is closed: what
torch and OpenMP read at import, such as thread counts, must be the judge's now). It is started from the
same long-lived thread as fresh processes (`_SPAWNER`), so it dies with the judge, and its children
with it.

Where the server cannot start or answer (no Linux, a broken import, `WorkerOptions.fork_server` off),
processes are executed afresh, and the judge says so once on stderr. Commands carry the PARENT word
(proc/lifeline.py), filled here with the pid of the process that starts them.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import IO

from kerneljudge.proc.lifeline import PARENT, with_parent

#: Starts every process, so the parent-death signal is tied to a thread that ends only with the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kerneljudge-spawn")
READY_TIMEOUT_S = 180.0  # the server's imports (torch), on a loaded machine
REPLY_TIMEOUT_S = 30.0  # a fork
#: The environment a torch process depends on from its start (compilers, CUDA and library paths, visible
#: GPUs, thread counts, Python's own settings): a fork server serves the environments that agree on it.
ENV_PREFIXES = ("CUDA_", "TORCH_", "PYTORCH_", "TRITON_", "OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "NVIDIA_",
                "PYTHON", "LD_")
ENV_NAMES = ("PATH", "CC", "CXX")
#: ... except what each process is given of its own (read by nothing at import time).
PER_PROCESS = ("TMPDIR", "CUDA_CACHE_PATH", "TRITON_CACHE_DIR")
MAX_REPLY_BYTES = 4096


class ForkServerFailed(Exception):
    pass


def start(command: list[str], *, env: dict[str, str], cwd: str, log: IO[bytes], pass_fds: tuple[int, ...],
          fork_server: bool, warm: bool = False) -> "subprocess.Popen | Forked":
    """Start `command` (a `python -m` entry of the judge, with PARENT for the parent's pid) in its own
    session, stdin from /dev/null, stdout and stderr to `log`, with `pass_fds` open at the same numbers.
    `warm`: a referee (forked with torch's meta registrations loaded)."""
    if fork_server and sys.platform.startswith("linux"):
        server = _servers.get(env)
        if server is not None:
            try:
                return server.spawn(command, env=env, cwd=cwd, log=log, pass_fds=pass_fds, warm=warm)
            except ForkServerFailed as exc:
                _servers.failed(server, str(exc))
    return _execute(command, env=env, cwd=cwd, log=log, pass_fds=pass_fds)


def _execute(command: list[str], *, env: dict[str, str], cwd: str | None, log: IO[bytes],
             pass_fds: tuple[int, ...]) -> subprocess.Popen:
    """`command` executed afresh from the spawning thread, in its own session, PARENT this process."""
    return _SPAWNER.submit(
        subprocess.Popen, with_parent(command, os.getpid()), stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, cwd=cwd, env=env, pass_fds=pass_fds, start_new_session=True).result()


class Forked:
    """A child of the fork server, with the part of `subprocess.Popen` the judge uses (pid, poll, wait,
    returncode). The server reaps it and sends its wait status down a pipe only the judge reads."""

    def __init__(self, pid: int, status_fd: int):
        self.pid = pid
        self.returncode: int | None = None
        self._status_fd = status_fd
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._collect(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
        return code

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None and select.select([self._status_fd], [], [], timeout)[0]:
                data = b""
                while chunk := os.read(self._status_fd, 64):
                    data += chunk
                os.close(self._status_fd)
                # no status: the server itself died, and its children with it (SIGKILL)
                self.returncode = os.waitstatus_to_exitcode(int(data)) if data else -9
            return self.returncode

    def __del__(self):
        if self.returncode is None:
            try:
                os.close(self._status_fd)
            except OSError:
                pass


class ForkServer:
    """One running fork server for one environment: its socket for workers, and its warm server's for
    referees (proc/zygote.py says why there are two)."""

    def __init__(self, env: dict[str, str]):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        warm_ours, warm_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log = tempfile.TemporaryFile()
        given = (theirs.fileno(), warm_theirs.fileno())
        command = [sys.executable, "-m", "kerneljudge.proc.zygote", *map(str, given), PARENT]
        try:
            self.process = _execute(command, env=env, cwd=None, log=self.log, pass_fds=given)
        finally:
            theirs.close()
            warm_theirs.close()
        self.sockets = {False: ours, True: warm_ours}
        self.lock = threading.Lock()
        try:
            for warm in self.sockets:
                self._reply(warm, READY_TIMEOUT_S, "ready")
        except ForkServerFailed:
            self.close()
            raise

    def spawn(self, command: list[str], *, env: dict[str, str], cwd: str, log: IO[bytes],
              pass_fds: tuple[int, ...], warm: bool) -> Forked:
        """Fork `command` from the server (`warm`: from the one with torch's meta registrations loaded)."""
        status_read, status_write = os.pipe()
        request = json.dumps({"command": command, "env": env, "cwd": str(cwd), "fds": list(pass_fds)}).encode()
        try:
            with self.lock:
                try:
                    socket.send_fds(self.sockets[warm], [request], [log.fileno(), *pass_fds, status_write])
                except OSError as exc:
                    raise ForkServerFailed(f"the fork server did not take the request ({exc})") from exc
                pid = self._reply(warm, REPLY_TIMEOUT_S, "pid")
        except ForkServerFailed:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        return Forked(pid, status_read)

    def _reply(self, warm: bool, timeout_s: float, key: str) -> int:
        self.sockets[warm].settimeout(timeout_s)
        try:
            message = json.loads(self.sockets[warm].recv(MAX_REPLY_BYTES) or b"{}")
        except (OSError, ValueError) as exc:
            raise ForkServerFailed(f"no answer from the fork server ({exc})") from exc
        if not isinstance(message.get(key), int):
            raise ForkServerFailed(f"the fork server ended{self._tail()}")
        return message[key]

    def _tail(self) -> str:
        self.log.seek(0)
        lines = self.log.read().decode(errors="replace").strip().splitlines()
        return f": {lines[-1][:300]}" if lines else ""

    def close(self) -> None:
        for end in self.sockets.values():
            end.close()  # the servers exit when their sockets close, and what they forked dies with them
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def startup_environment(env: dict[str, str]) -> dict[str, str]:
    """The part of `env` a torch process depends on from its start (ENV_PREFIXES, ENV_NAMES)."""
    return {name: value for name, value in env.items()
            if (name.startswith(ENV_PREFIXES) or name in ENV_NAMES) and name not in PER_PROCESS}


class _Servers:
    """The judge process's fork server, for the environment it was started with (the one a child needs,
    per-process variables aside); None where one cannot run here (said once, on stderr)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.current: tuple[tuple, ForkServer] | None = None
        self.broken: set[tuple] = set()

    def get(self, env: dict[str, str]) -> ForkServer | None:
        """The server for `env`'s startup environment; one for another is closed first (the judge's
        environment changed between evaluations: what it had forked has ended)."""
        key = tuple(sorted(startup_environment(env).items()))
        with self.lock:
            if self.current is not None and self.current[0] == key and self.current[1].process.poll() is None:
                return self.current[1]
            if self.current is not None:
                self.current[1].close()
                self.current = None
            if key in self.broken:
                return None
            try:
                self.current = (key, ForkServer({k: v for k, v in env.items() if k not in PER_PROCESS}))
            except ForkServerFailed as exc:
                self._give_up(key, str(exc))
                return None
            return self.current[1]

    def failed(self, server: ForkServer, why: str) -> None:
        """A server that stopped answering is closed (the next process starts another one)."""
        print(f"kerneljudge: {why}; this process starts afresh", file=sys.stderr)
        with self.lock:
            if self.current is not None and self.current[1] is server:
                server.close()
                self.current = None

    def _give_up(self, key: tuple, why: str) -> None:
        self.broken.add(key)
        print(f"kerneljudge: {why}; processes start afresh (slower)", file=sys.stderr)


_servers = _Servers()
