"""The build cache's one writer: the candidate's `load_inline`/`load` extensions compiled from their arguments
by the judge, in a sandboxed builder process, so that no worker can write the cache (with the sandbox's
`mount` layer: without it every process of the user's can).

Why: the worker imports the candidate, whose code runs there. When workers built into the shared `builds/`
themselves, a red-team worker could leave a compiled module under the key of a source another candidate
builds, and every later worker building that source would load the plant (README, the sandbox's `mount`
row). Now a worker's `load_inline` sends its arguments to the judge (an `ask` on the worker's channel,
worker/build.py); the judge keys them with this machine's toolchain and, when the key is not built yet,
runs `python -m kerneljudge.extensions` in the worker's sandbox layers and cgroups with a fresh staging
folder as the only writable place. The builder runs no candidate Python, but the compiler runs the
candidate's flags (`-wrapper` runs any program; torch writes them unescaped into the shell line ninja runs)
and torch imports the built module (its static constructors run): the staging folder is all either can
write, and no worker's folder, lock or other build is in its view. The judge copies the module alone (no
sources: a later worker reads none) under the key its arguments name; the worker loads it from the cache.

    builds/<key>/<name>/<name>.so   one extension (<name> alone for `load(is_standalone=True)`), with
                                    `kj.complete` beside <name>/ once the judge copied it in
    staging/<random>/               a build in progress: out/<name>/ (the build), src/ (`load`'s files), tmp/
    locks/build-<key>.lock          one build of a key at a time (staging/ and locks/ are hidden from workers)

A `load` call's source files are read by the worker and sent as bytes (the judge reads nothing a worker
names: a compile error would quote a file hidden from the worker), with the header files beside them; the
builder compiles copies side by side in one folder, with the sources' own folders on the include path for
what it can see there (not a worker's folder). Other headers are read where they are and are not in the key
(as in torch's own cache).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kerneljudge import cache, sandbox

FUNCTIONS = ("load_inline", "load")  # torch.utils.cpp_extension's JIT entry points
NOT_COMPILED = ("build_directory", "verbose", "keep_intermediates")  # arguments that do not change the build
COMPLETE_MARKER = "kj.complete"  # not an identifier: no extension's folder has its name
KEY_VERSION = "judge-built-1"  # entries written by workers (before this module) are never read
ERROR_HEAD_CHARS = 16_000  # of the builder's error passed back (torch's message starts with the first errors)
ERROR_TAIL_CHARS = 4_000
ELIDED = "\n[...]\n"
BUILDER_FILE_MB = 1024  # the largest file the builder may write: its output (the compiler's prints), a module
LOCK_POLL_S = 0.05
KILL_GRACE_S = 5  # for the launcher to kill and reap the builder's processes before SIGKILL
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")
_ARCH = re.compile(r"[0-9A-Za-z.;+ ]{1,64}")  # TORCH_CUDA_ARCH_LIST: "9.0", "8.0;9.0+PTX"


class BuildRefused(ValueError):
    """An ask whose arguments are not a build the judge makes (a malformed or forged message)."""


@dataclass(frozen=True)
class Request:
    """One `load_inline` or `load` call as data: its compiled arguments (JSON; `load`'s `sources` as
    [file name, base64 content] pairs, `headers` the header files beside them alike) and the target CUDA
    architecture; `source_paths`, the files' paths as the worker named them, only to say them in a compile
    error."""

    function: str
    arguments: dict[str, Any]
    arch: str | None
    headers: tuple[tuple[str, str], ...] = ()
    source_paths: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, data: Any) -> "Request":
        if not isinstance(data, dict) or data.get("function") not in FUNCTIONS:
            raise BuildRefused("not a load_inline or load call")
        arguments, arch = data.get("arguments"), data.get("arch")
        headers, paths = data.get("headers") or [], data.get("source_paths") or []
        if not isinstance(arguments, dict) or not isinstance(arguments.get("name"), str) \
                or not _NAME.fullmatch(arguments["name"]):
            raise BuildRefused("an extension needs a name that is a Python identifier")
        if arch is not None and not (isinstance(arch, str) and _ARCH.fullmatch(arch)):
            raise BuildRefused("the architecture must be a CUDA architecture list such as 9.0")
        if not (isinstance(paths, list) and all(isinstance(f, str) and "\0" not in f for f in paths)):
            raise BuildRefused("source_paths must be a list of paths")
        if data["function"] == "load":
            sources = arguments.get("sources")
            if not (isinstance(sources, list) and sources and _files(sources) and _files(headers)):
                raise BuildRefused("load's sources and headers must be [file name, base64 content] pairs of plain "
                                   "file names")
            if len({name for name, _ in sources + headers}) != len(sources) + len(headers):
                raise BuildRefused("load's sources and headers must have distinct file names")
            if paths and len(paths) != len(sources):
                raise BuildRefused("source_paths must name each source file")
        elif headers or paths:
            raise BuildRefused("headers and source_paths belong to load's source files")
        return cls(data["function"], {k: v for k, v in arguments.items() if k not in NOT_COMPILED}, arch,
                   tuple((name, content) for name, content in headers), tuple(paths))

    @property
    def name(self) -> str:
        return self.arguments["name"]

    def key(self) -> str:
        return cache.key(KEY_VERSION, self.function, self.arguments, self.headers, toolchain(self.arch))


def _files(files: Any) -> bool:
    """[file name, base64 content] pairs of plain file names (no folder, nothing hidden in the name)."""
    if not isinstance(files, list):
        return False
    for entry in files:
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry)
                and Path(entry[0]).name == entry[0] and entry[0] not in (".", "..") and "\0" not in entry[0]):
            return False
        try:
            base64.b64decode(entry[1], validate=True)
        except (binascii.Error, ValueError):
            return False
    return True


@functools.cache
def _torch_build() -> str:
    """torch's version file (version, CUDA, git revision), hashed: read, not imported (the judge runs no torch)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return "no torch"
    return hashlib.sha256((Path(spec.origin).parent / "version.py").read_bytes()).hexdigest()


def toolchain(arch: str | None) -> list:
    """What besides its arguments decides what a build produces."""
    return [_torch_build(), arch, sys.platform, platform.machine(), list(sys.version_info[:2]),
            os.environ.get("CXX"), os.environ.get("CUDA_HOME")]


#: sandboxed(command, staging folder, seconds) -> the command as run in the sandbox: isolation.py's
Sandboxed = Callable[[list[str], Path, float], list[str]]


def build(request: Request, cache_dir: Path, sandboxed: Sandboxed, *, seconds_left: Callable[[], float],
          progress: Callable[[str], None] = lambda message: None, clock_ms=lambda: time.monotonic() * 1000) -> dict:
    """The answer to a worker's build ask: {"folder", "key", "hit", "waited_ms"} where the extension is built
    (now or before), else {"error", "key"}. One build per key at a time (a file lock: other judges building
    the same key wait, then hit), never past the worker's deadline (`seconds_left`)."""
    key = request.key()
    folder = cache_dir / "builds" / key
    built = {"folder": str(folder / request.name), "key": key, "waited_ms": 0.0}
    if (folder / COMPLETE_MARKER).exists():  # written once, after the module is in place: no lock needed
        progress(f"loading {request.name} (build cache hit)")
        return {**built, "hit": True}
    locks = cache_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"build-{key}.lock", "w") as lock:
        before = clock_ms()
        if not _locked(lock, seconds_left, lambda: progress(f"waiting for another build of {request.name}")):
            return {"error": f"Error building extension '{request.name}': the worker's time ran out waiting for "
                             "another build of it", "key": key}
        built["waited_ms"] = clock_ms() - before
        if (folder / COMPLETE_MARKER).exists():
            progress(f"loading {request.name} (build cache hit)")
            return {**built, "hit": True}
        if seconds_left() <= 0:
            return {"error": f"Error building extension '{request.name}': no time left to build it", "key": key}
        progress(f"compiling {request.name} (not in the build cache)")
        (cache_dir / "staging").mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=cache_dir / "staging"))
        try:
            error = run_builder(request, staging, seconds_left(), sandboxed)
            if error is not None:  # the compiler's paths as the worker knows them, or as the key's folder
                return {"error": _paths_said(request, error, staging, folder), "key": key}
            if not _keep_the_module(request.name, staging, folder):
                return {"error": f"Error building extension '{request.name}': the build left no module", "key": key}
        finally:  # links not followed; a folder its builder made unremovable is left, hidden from workers
            shutil.rmtree(staging, ignore_errors=True)
    return {**built, "hit": False}


def _paths_said(request: Request, error: str, staging: Path, folder: Path) -> str:
    """A compile error with the staging folder's paths as the worker knows them: `load`'s files at the paths it
    named, the build at the key's folder (where it would have been)."""
    for (file_name, _), path in zip(request.arguments.get("sources") or [], request.source_paths):
        error = error.replace(str(staging / "src" / file_name), path)
    return error.replace(str(staging / "out"), str(folder))


def _locked(lock, seconds_left: Callable[[], float], on_wait: Callable[[], None]) -> bool:
    """Hold `lock`, waiting for it while the worker's time lasts; False when it ran out."""
    waited = False
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if seconds_left() <= 0:
                return False
            if not waited:
                on_wait()
                waited = True
            time.sleep(LOCK_POLL_S)


def _keep_the_module(name: str, staging: Path, folder: Path) -> bool:
    """The built module alone (no sources or objects: no later worker reads them) copied into the key's folder,
    then the marker; False where the build left none. The builder's folder is hostile until removed (its
    builder could leave a link anywhere on the way, or a process given a descriptor of it swap one in between a
    check and a copy): each step from the staging folder, out/, <name>/ to the module is opened from the last
    one's descriptor, following no link, and the module is read from its own descriptor once checked as a
    regular file."""
    modules = []
    parent = os.open(staging, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for step in ("out", name):
            inner = os.open(step, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
            os.close(parent)
            parent = inner
        for file_name in (name + ".so", name):
            try:
                fd = os.open(file_name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=parent)
            except OSError:
                continue
            if stat.S_ISREG(os.fstat(fd).st_mode):
                modules.append((file_name, os.fdopen(fd, "rb")))
            else:
                os.close(fd)
    except OSError:  # a step missing, or a link
        pass
    finally:
        os.close(parent)
    if not modules:
        return False
    destination = folder / name
    shutil.rmtree(destination, ignore_errors=True)  # an earlier build that did not finish
    destination.mkdir(parents=True)
    for file_name, module in modules:
        with module, open(destination / file_name, "wb") as kept:
            shutil.copyfileobj(module, kept)
        os.chmod(destination / file_name, 0o755)
    (folder / COMPLETE_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    return True


def run_builder(request: Request, staging: Path, seconds: float, sandboxed: Sandboxed) -> str | None:
    """Run the builder process on `request`, its output in `staging`; None when it built, else its error.
    Its prints go to a file outside its reach, bounded by its file-size limit, read back head and tail."""
    for part in ("out", "src", "tmp"):
        (staging / part).mkdir()
    env = sandbox.launcher_env(dict(os.environ, TMPDIR=str(staging / "tmp")))
    if request.arch:
        env["TORCH_CUDA_ARCH_LIST"] = request.arch
    order = {"function": request.function, "arguments": request.arguments, "folder": str(staging),
             "headers": [list(header) for header in request.headers]}
    command = sandboxed([sys.executable, "-m", "kerneljudge.extensions"], staging, seconds)
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=output, stderr=output, env=env,
                                   cwd=str(staging / "tmp"), start_new_session=True)
        try:
            process.communicate(json.dumps(order).encode(), timeout=max(0.1, seconds))
        except subprocess.TimeoutExpired:
            _stop(process)
            return f"Error building extension '{request.name}': the build ran past the {seconds:.0f} s left"
        except BaseException:  # the judge interrupted: the builder goes with the evaluation
            _stop(process)
            raise
        finally:  # whatever the builder left in its session (without the sandbox's PID namespace)
            _kill_session(process.pid)
        if process.returncode == 0:
            return None
        said = _head_and_tail(output)
    reported = [line for line in said.splitlines() if line.startswith('{"kj_build_error"')]
    try:
        return _clipped(str(json.loads(reported[-1])["kj_build_error"]))
    except (IndexError, ValueError, KeyError, TypeError):
        return _clipped(f"Error building extension '{request.name}': the build process ended with status "
                        f"{process.returncode}: {said.strip()}")


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the launcher (it kills and reaps the builder's processes), SIGKILL to its session after a grace."""
    process.terminate()
    try:
        process.wait(KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        _kill_session(process.pid)
        process.wait()


def _kill_session(session_id: int) -> None:
    try:
        os.killpg(session_id, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _head_and_tail(output) -> str:
    """The builder's output file, read no further than its head and tail (its middle said elided)."""
    size = output.seek(0, os.SEEK_END)
    output.seek(0)
    head = output.read(ERROR_HEAD_CHARS)
    output.seek(max(len(head), size - ERROR_TAIL_CHARS))
    tail = output.read()
    return (head + (ELIDED.encode() if len(head) + len(tail) < size else b"") + tail).decode(errors="replace")


def _clipped(error: str) -> str:
    if len(error) <= ERROR_HEAD_CHARS + ERROR_TAIL_CHARS:
        return error
    return error[:ERROR_HEAD_CHARS] + ELIDED + error[-ERROR_TAIL_CHARS:]


def main() -> None:
    """The builder process: one extension built with torch's own function, into the staging folder's out/.
    Its result is that folder's content; a failure is one JSON line on its output."""
    order = json.loads(sys.stdin.read())
    folder = Path(order["folder"])
    arguments = dict(order["arguments"], build_directory=str(folder / "out" / order["arguments"]["name"]),
                     verbose=False)
    Path(arguments["build_directory"]).mkdir()
    if order["function"] == "load":
        for file_name, content in [*arguments["sources"], *order["headers"]]:
            (folder / "src" / file_name).write_bytes(base64.b64decode(content))
        arguments["sources"] = [str(folder / "src" / file_name) for file_name, _ in arguments["sources"]]
    try:
        from torch.utils import cpp_extension

        getattr(cpp_extension, order["function"])(**arguments)
    except BaseException as exc:  # noqa: BLE001 - the failure goes to the worker as torch said it
        message = str(exc) if "Error building extension" in str(exc) else f"{type(exc).__name__}: {exc}"
        print(json.dumps({"kj_build_error": message}), flush=True)
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)  # the loaded module's threads and destructors are not waited for


if __name__ == "__main__":
    main()
