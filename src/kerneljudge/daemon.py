"""The resident judge: `kerneljudge serve` keeps workers started between command-line calls.

Every evaluation runs in a fresh worker process, and a fresh worker spends its first seconds importing
torch and starting CUDA (4.7 s on an H200 host, docs/benchmarks.md): more than the whole strict
evaluation of a built candidate there. `serve` is a judge process (it never imports candidate code)
that keeps a spare worker started, listens on a Unix socket, runs the evaluations its clients send one
at a time (so no two share a GPU while one of them is being timed) and answers with each Result, which
it has also recorded, as a local evaluation does.

The evaluation verbs of the CLI use a running server on their own (`--no-server` evaluates in the
calling process) and evaluate themselves when none listens, or when the server's kerneljudge source,
Python or visible GPUs differ from the client's (they say so on stderr). Only JSON crosses the socket
(kerneljudge.channel's framing); the socket lives in a folder only its user may open, and the server
also checks the connecting process's user id where the system reports it.
"""

from __future__ import annotations

import hashlib
import os
import socket
import stat
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import kerneljudge
from kerneljudge import api, channel
from kerneljudge.errors import KernelJudgeError, UsageError
from kerneljudge.isolation import WorkerPool
from kerneljudge.options import Options
from kerneljudge.records import Result

VERBS = ("evaluate", "check", "bench", "submit")
#: How long the server waits for a connected client's request before hanging up.
REQUEST_WAIT_S = 30.0


class ServerRefused(KernelJudgeError):
    """A server listens but cannot answer for this client (its environment differs, or its folder is
    not private); the client evaluates in its own process instead."""


class ServerError(KernelJudgeError):
    """The server failed during an evaluation (it stopped, or the judge itself raised an error)."""


def identity() -> dict[str, str]:
    """What must match between a client and the server for the server's answer to be the client's own."""
    package = Path(kerneljudge.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return {"kerneljudge source": f"{kerneljudge.__version__}+{digest.hexdigest()[:16]}",
            "python": sys.executable, "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "")}


# ----------------------------------------------------------------------------------------------- client
def evaluate_via_server(socket_path: Path, verb: str, problem: str | Path, solution: str | Path | None,
                        options: Options) -> Result | None:
    """`api.<verb>(problem, solution, options)` run by the server on `socket_path`; None when no server
    listens there. Raises ServerRefused (evaluate locally instead), UsageError (the same errors a local
    evaluation raises) or ServerError."""
    options = options.replace(cache_dir=options.cache_dir.resolve(),
                              store_path=options.store_path.resolve() if options.store_path else None)
    reply = _ask(socket_path, {"op": "evaluate", "identity": identity(), "verb": verb,
                               "problem": _absolute(problem), "solution": _absolute(solution),
                               "options": options.to_json(keep_seed=True)})
    if reply is None:
        return None
    if "refused" in reply:
        raise ServerRefused(reply["refused"])
    if "usage_error" in reply:
        raise UsageError(reply["usage_error"])
    if "judge_error" in reply:
        raise ServerError(f"the judge server on {socket_path} failed: {reply['judge_error']}")
    return Result.from_json(reply["result"])


def server_status(socket_path: Path) -> dict[str, Any] | None:
    """The running server's pid, identity and count of evaluations; None when none listens."""
    return _ask(socket_path, {"op": "status"})


def _ask(socket_path: Path, request: dict[str, Any]) -> dict[str, Any] | None:
    if not socket_path.exists():
        return None
    _require_private(socket_path.parent, ServerRefused)
    try:
        connection = _connect(socket_path)
    except OSError:  # nothing listens there: no socket file, or one left by a server that died
        return None
    with connection:
        channel.send(connection.fileno(), request)
        try:
            return channel.receive(connection.fileno())
        except channel.ChannelClosed as exc:
            raise ServerError(f"the judge server on {socket_path} stopped before it answered (its log says "
                              "why); run again, or with --no-server") from exc


def _absolute(ref: str | Path | None) -> str | None:
    """A path the client can see, made absolute (the server has another working folder); built-in
    names (level2/51) and shipped variants (@cuda) as they are."""
    if ref is None:
        return None
    return str(Path(ref).resolve()) if Path(ref).exists() else str(ref)


def _connect(socket_path: Path) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(socket_path))
    except OSError:
        connection.close()
        raise
    return connection


def _require_private(folder: Path, error: type[KernelJudgeError]) -> None:
    """The socket's folder must belong to this user and be closed to everyone else: whoever can connect
    has the server run the files they name (a client) or can answer with forged results (a server)."""
    info = folder.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise error(f"{folder} must belong to you and be closed to others (chmod 700) to hold the judge "
                    "server's socket; remove it, or choose another path with $KERNELJUDGE_SOCKET")


# ----------------------------------------------------------------------------------------------- server
def serve(socket_path: Path, *, spares: int = 1, log: Callable[[str], None] = print) -> None:
    """Answer clients on `socket_path` one at a time until interrupted (the caller turns SIGTERM into
    SystemExit); the socket file is removed on the way out."""
    listener = _listen(socket_path)
    state = {"pid": os.getpid(), "identity": identity(), "socket": str(socket_path), "evaluations": 0,
             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        with WorkerPool(spares=spares) as pool:
            pool.fill()
            log(f"kerneljudge serve: listening on {socket_path} (pid {state['pid']}, {spares} spare worker(s))")
            while True:
                connection, _ = listener.accept()
                with connection:
                    _answer(connection, state, pool, log)
    finally:
        listener.close()
        socket_path.unlink(missing_ok=True)


def _listen(socket_path: Path) -> socket.socket:
    socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    _require_private(socket_path.parent, UsageError)
    if socket_path.exists():
        try:
            _connect(socket_path).close()
        except OSError:
            socket_path.unlink()  # left by a server that died
        else:
            raise UsageError(f"a judge server already listens on {socket_path} (`kerneljudge serve --status`)")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(socket_path))
    except OSError as exc:
        listener.close()
        raise UsageError(f"cannot listen on {socket_path}: {exc}") from exc
    os.chmod(socket_path, 0o600)
    listener.listen(16)
    return listener


def _answer(connection: socket.socket, state: dict[str, Any], pool: WorkerPool, log: Callable[[str], None]) -> None:
    """Read one request, send one reply. A client that leaves early loses only its own answer (the
    result is in the store)."""
    if not _same_user(connection):
        log("refused a connection from another user")
        return
    try:
        request = channel.receive(connection.fileno(), time.monotonic() + REQUEST_WAIT_S)
    except (channel.ChannelClosed, channel.ChannelTimeout, ValueError) as exc:
        log(f"dropped a connection without a readable request ({type(exc).__name__})")
        return
    reply = _reply(request, state, pool, log)
    try:
        channel.send(connection.fileno(), reply)
    except OSError:
        log("the client left before its answer was sent")


def _reply(request: dict[str, Any], state: dict[str, Any], pool: WorkerPool, log: Callable[[str], None]) -> dict:
    if request.get("op") == "status":
        return {**state, "spares_ready": len(pool.ready)}
    if request.get("op") != "evaluate" or request.get("verb") not in VERBS:
        return {"usage_error": f"the judge server does not know {request.get('op')!r} {request.get('verb')!r}"}
    theirs = request.get("identity") or {}
    differing = [name for name, value in state["identity"].items() if theirs.get(name) != value]
    if differing:
        return {"refused": f"the judge server (pid {state['pid']}) runs with another {', '.join(differing)}; "
                           "restart `kerneljudge serve` from this environment"}
    started = time.monotonic()
    try:
        result = getattr(api, request["verb"])(request["problem"], request["solution"],
                                               Options.from_json(request["options"]), pool=pool)
    except KernelJudgeError as exc:
        log(f"{request['verb']} {request['problem']} {request['solution']}: {exc}")
        return {"usage_error": str(exc)}
    except Exception as exc:  # a fault of the judge itself: the client is told, the server keeps serving
        log(traceback.format_exc())
        return {"judge_error": f"{type(exc).__name__}: {exc}"}
    state["evaluations"] += 1
    log(f"{request['verb']} {request['problem']} {request['solution'] or '(shipped)'}: {result.verdict} "
        f"in {time.monotonic() - started:.2f} s")
    return {"result": result.to_json()}


def _same_user(connection: socket.socket) -> bool:
    """The connecting process's user is the server's (Linux reports it; elsewhere the folder's
    permissions are the guard)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return uid == os.getuid()
