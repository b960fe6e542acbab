"""The resident judge: `kerneljudge serve` keeps workers started between command-line calls.

Every evaluation runs in a fresh worker process, and a fresh worker spends its first seconds importing
torch and starting CUDA (4.7 s on an H200 host, docs/benchmarks.md): more than the whole strict
evaluation of a built candidate there. `serve` is a judge process (it never imports candidate code)
that keeps a spare worker started, listens on a Unix socket, runs the evaluations its clients send one
at a time (so no two share a GPU while one of them is being timed) and answers with each Result, which
it has also recorded, as a local evaluation does.

The evaluation verbs of the CLI use a running server on their own (`--no-server` evaluates in the
calling process) and evaluate themselves when none listens, or when the server's kerneljudge source,
Python or the environment its workers depend on (compilers, CUDA and library paths, visible GPUs,
thread counts) differ from the client's (they say so on stderr). Only JSON crosses the socket
(kerneljudge.channel's framing); the socket lives in a folder only its user may open, the server checks
the connecting process's user id and the client the server's, where the system reports them.
"""

from __future__ import annotations

import hashlib
import os
import select
import socket
import stat
import struct
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import kerneljudge
from kerneljudge import channel, spawn, suite
from kerneljudge.errors import KernelJudgeError, UsageError
from kerneljudge.options import VERBS, Options
from kerneljudge.records import Result

if TYPE_CHECKING:
    from kerneljudge.isolation import WorkerPool

#: How long the server waits for a connected client's request before hanging up.
REQUEST_WAIT_S = 30.0
#: How long a client waits for the server to take its request before saying that it waits.
ACCEPT_WAIT_S = 1.0
#: Environment variables the workers' behaviour depends on (compilers, libraries, devices, threads).


class ServerRefused(KernelJudgeError):
    """A server listens but cannot answer for this client (its environment differs, or its socket is
    not private to this user); the client evaluates in its own process instead."""


class ServerError(KernelJudgeError):
    """The server failed during an evaluation (it stopped, or the judge itself raised an error)."""


def identity() -> dict[str, Any]:
    """What must match between a client and the server for the server's answer to be the client's own:
    the kerneljudge source, the Python, and the environment variables workers depend on."""
    package = Path(kerneljudge.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    environment = spawn.startup_environment(dict(os.environ))
    return {"kerneljudge source": f"{kerneljudge.__version__}+{digest.hexdigest()[:16]}",
            "python": sys.executable, "environment": environment}


# ----------------------------------------------------------------------------------------------- client
def evaluate_via_server(socket_path: Path, verb: str, problem: str | Path, solution: str | Path | None,
                        options: Options, *, on_wait: Callable[[], None] = lambda: None) -> Result | None:
    """`api.<verb>(problem, solution, options)` run by the server on `socket_path`; None when no server
    listens there. `on_wait` is called when the server has not taken the request within ACCEPT_WAIT_S
    (it is busy with another evaluation). Raises ServerRefused (evaluate locally instead), UsageError
    (the same errors a local evaluation raises) or ServerError."""
    options = options.replace(cache_dir=options.cache_dir.expanduser().absolute(),
                              store_path=options.store_path.expanduser().absolute() if options.store_path else None)
    request = {"op": "evaluate", "identity": identity(), "verb": verb, "problem": _problem_ref(problem),
               "solution": _solution_ref(solution), "options": options.to_json(keep_seed=True)}
    reply = _ask(socket_path, request, on_wait)
    if reply is None:
        return None
    if "refused" in reply:
        raise ServerRefused(reply["refused"])
    if "usage_error" in reply:
        raise UsageError(reply["usage_error"])
    if "result" not in reply:
        raise ServerError(f"the judge server on {socket_path} failed: {reply.get('judge_error', reply)}")
    return Result.from_json(reply["result"])


def server_status(socket_path: Path) -> dict[str, Any] | None:
    """The running server's pid, identity and count of evaluations; None when none listens."""
    return _ask(socket_path, {"op": "status"}, lambda: None)


def _ask(socket_path: Path, request: dict[str, Any], on_wait: Callable[[], None]) -> dict[str, Any] | None:
    """Send one request, return the final reply (after the server's "accepted", for an evaluation)."""
    if not socket_path.exists():
        return None
    _require_private(socket_path.parent, ServerRefused)
    try:
        connection = _connect(socket_path)
    except OSError:  # nothing listens there: a socket file left by a server that died
        return None
    with connection:
        if not _trusted_peer(connection):
            raise ServerRefused(f"the process listening on {socket_path} belongs to another user")
        try:
            channel.send(connection.fileno(), request)
            try:
                reply = channel.receive(connection.fileno(), time.monotonic() + ACCEPT_WAIT_S)
            except channel.ChannelTimeout:
                on_wait()
                reply = channel.receive(connection.fileno())
            if reply.get("accepted"):
                reply = channel.receive(connection.fileno())
        except (channel.ChannelClosed, OSError, ValueError) as exc:
            raise ServerError(f"the judge server on {socket_path} stopped before it answered ({exc}); its "
                              "output says why; run again, or with --no-server") from exc
    return reply


def _problem_ref(ref: str | Path) -> str:
    """As the local loader reads it (problem._resolve): a file is made absolute (the server works in
    another folder), a built-in name stays a name, anything else becomes the absolute path that is not
    there, so the server reports the same missing file instead of finding one of its own."""
    path = Path(ref).expanduser()
    if path.is_file() or suite.find_builtin(str(ref)) is None:
        return str(path.absolute())
    return str(ref)


def _solution_ref(ref: str | Path | None) -> str | None:
    """A shipped variant (@cuda) as it is; a path made absolute."""
    if ref is None or str(ref).startswith("@"):
        return None if ref is None else str(ref)
    return str(Path(ref).expanduser().absolute())


def _connect(socket_path: Path) -> socket.socket:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(socket_path))
    except OSError:
        connection.close()
        raise
    return connection


def _require_private(folder: Path, error: type[KernelJudgeError]) -> None:
    """The socket's folder must be a real folder of this user's that nobody else may open: whoever can
    put a socket there could answer with forged results, and whoever can connect has the server run
    the files they name."""
    info = folder.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise error(f"{folder} is not a folder of yours closed to others (chmod 700, not a link), so it cannot "
                    "hold the judge server's socket; choose another with --socket or $KERNELJUDGE_SOCKET")


def _trusted_peer(connection: socket.socket) -> bool:
    """The process at the other end runs as this user (Linux reports it; elsewhere the folder's
    permissions are the guard) and in this server's own mount and PID namespaces: a sandboxed worker (a
    candidate's code) is refused, whatever path reached the socket (a red team's worker started before the
    server, the socket made after the worker's view hid its path, and had the server judge a file with every
    sandbox layer off)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    credentials = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", credentials)
    return uid == os.getuid() and same_namespaces(pid)


def same_namespaces(pid: int) -> bool:
    """Process `pid` shares this one's mount and PID namespaces (False where that cannot be read)."""
    try:
        return all(os.readlink(f"/proc/{pid}/ns/{name}") == os.readlink(f"/proc/self/ns/{name}")
                   for name in ("mnt", "pid"))
    except OSError:
        return False


# ----------------------------------------------------------------------------------------------- server
def serve(socket_path: Path, *, spares: int = 1, log: Callable[[str], None] = print) -> None:
    """Answer clients on `socket_path` one at a time until interrupted (the caller turns SIGTERM into
    SystemExit); the socket file is removed on the way out. The judge itself is imported here, not with the
    module, which clients import too (their start is part of each call's wall time)."""
    from kerneljudge import pipeline
    from kerneljudge.isolation import WorkerPool

    listener = _listen(socket_path)
    state = {"pid": os.getpid(), "identity": identity(), "socket": str(socket_path), "evaluations": 0,
             "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    try:
        with WorkerPool(spares=spares) as pool:
            pool.fill(device=pipeline.resolve_device("auto"))  # the spares take the likely device at once
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
    if os.path.lexists(socket_path):
        if not stat.S_ISSOCK(socket_path.lstat().st_mode):
            raise UsageError(f"{socket_path} exists and is not a socket; choose another path with --socket")
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
    """Read one request, send one reply (an evaluation: "accepted" first). Nothing a client sends, and
    no fault of the judge, stops the server; a client that left loses only its own answer."""
    if not _trusted_peer(connection):
        log("refused a connection from another user, or from a sandboxed process")
        return
    try:
        request = channel.receive(connection.fileno(), time.monotonic() + REQUEST_WAIT_S)
        reply = _reply(request, connection, state, pool, log)
        if reply is not None:
            channel.send(connection.fileno(), reply)
    except (channel.ChannelClosed, channel.ChannelTimeout, OSError, ValueError) as exc:
        log(f"dropped a connection: {type(exc).__name__}: {exc}")
    except Exception as exc:  # a fault of the judge itself: logged, told to the client if it is there
        log(traceback.format_exc())
        try:
            channel.send(connection.fileno(), {"judge_error": f"{type(exc).__name__}: {exc}"})
        except OSError:
            pass


def _reply(request: Any, connection: socket.socket, state: dict[str, Any], pool: WorkerPool,
           log: Callable[[str], None]) -> dict[str, Any] | None:
    from kerneljudge import api  # the server's own (`serve` imported the judge already); not the clients'

    if not isinstance(request, dict):
        return {"usage_error": "the judge server takes a JSON object"}
    if request.get("op") == "status":
        return {**state, "spares_ready": {module.rsplit(".", 1)[-1]: len(ready) for module, ready in pool.ready.items()}}
    if request.get("op") != "evaluate" or request.get("verb") not in VERBS:
        return {"usage_error": f"the judge server does not know {request.get('op')!r} {request.get('verb')!r}"}
    theirs = request.get("identity")
    differing = _differences(state["identity"], theirs if isinstance(theirs, dict) else {})
    if differing:
        return {"refused": f"the judge server (pid {state['pid']}) runs with another {', '.join(differing)}; "
                           "restart `kerneljudge serve` from this environment"}
    if _client_gone(connection):
        log(f"{request['verb']} {request.get('problem')} {request.get('solution')}: the client left while "
            "waiting; not evaluated")
        return None
    channel.send(connection.fileno(), {"accepted": True})
    started = time.monotonic()
    try:
        result = getattr(api, request["verb"])(request["problem"], request["solution"],
                                               Options.from_json(request["options"]), pool=pool)
    except KernelJudgeError as exc:
        log(f"{request['verb']} {request['problem']} {request['solution']}: {exc}")
        return {"usage_error": str(exc)}
    state["evaluations"] += 1
    log(f"{request['verb']} {request['problem']} {request['solution'] or '(shipped)'}: {result.verdict} "
        f"in {time.monotonic() - started:.2f} s")
    return {"result": result.to_json()}


def _differences(ours: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """What differs between two identities, named (environment variables one by one)."""
    named = [name for name in ours if name != "environment" and theirs.get(name) != ours[name]]
    env_ours, env_theirs = ours["environment"], theirs.get("environment") or {}
    changed = sorted(k for k in set(env_ours) | set(env_theirs) if env_ours.get(k) != env_theirs.get(k))
    return named + [f"${k}" for k in changed]


def _client_gone(connection: socket.socket) -> bool:
    """The client closed its end (interrupted while its request waited in the queue)."""
    readable, _, _ = select.select([connection], [], [], 0)
    return bool(readable) and connection.recv(1, socket.MSG_PEEK) == b""
