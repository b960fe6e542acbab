"""The build cache's one writer: the candidate's `load_inline`/`load` extensions compiled from their arguments
by the judge, in a sandboxed process that runs no candidate Python, so that no worker can write the cache.

Why: the worker imports the candidate, whose code runs there. When workers built into the shared `builds/`
themselves, a red-team worker could leave a compiled module under the key of a source another candidate
builds, and every later worker building that source would load the plant (README, the sandbox's `mount`
row). Now the cache is read-only to workers. A worker's `load_inline` sends its arguments to the judge
(an `ask` on the worker's channel, worker/build.py); the judge keys them with this machine's toolchain and,
when the key is not built yet, runs `python -m kerneljudge.extensions` in the sandbox with a fresh staging
folder as the only writable place. The compiler runs with the candidate's flags (`-wrapper` runs any
program), so that folder is all a hostile build can reach, and the judge moves its content under the key
that the arguments themselves name. The worker then loads the module from the read-only cache.

    builds/<key>/<name>/<name>.so   one extension, with `complete` beside <name>/ once the judge moved it in
                                    (the module alone: its sources and objects are removed, no worker reads them)
    builds/.staging-*/               a build in progress (the builder's only writable folder)

A `load` call's source files are read by the worker and sent as text (the judge reads nothing a worker
names: a compile error would quote a file hidden from the worker); the builder compiles copies, with the
files' folders on the include path for their headers. Headers are not in the key (as in torch's own cache).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import platform
import re
import shutil
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
COMPLETE_MARKER = "complete"
LOCK_FILE = "kj.lock"  # not "lock": torch's own build baton is called that
STAGING_PREFIX = ".staging-"
KEY_VERSION = "judge-built-1"  # entries written by workers (before this module) are never read
ERROR_CHARS = 20_000  # of the builder's error, passed back to the worker (torch's message quotes the compiler)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,199}")


class BuildRefused(ValueError):
    """An ask whose arguments are not a build the judge makes (a malformed or forged message)."""


@dataclass(frozen=True)
class Request:
    """One `load_inline` or `load` call as data: its compiled arguments (JSON; `load`'s `sources` as
    [file name, text] pairs, `source_folders` where they were) and the target CUDA architecture."""

    function: str
    arguments: dict[str, Any]
    arch: str | None
    source_folders: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, data: Any) -> "Request":
        if not isinstance(data, dict) or data.get("function") not in FUNCTIONS:
            raise BuildRefused("not a load_inline or load call")
        arguments, arch = data.get("arguments"), data.get("arch")
        if not isinstance(arguments, dict) or not isinstance(arguments.get("name"), str) \
                or not _NAME.fullmatch(arguments["name"]):
            raise BuildRefused("an extension needs a name that is a Python identifier")
        if arch is not None and not isinstance(arch, str):
            raise BuildRefused("the architecture must be a string")
        folders = data.get("source_folders") or []
        if data["function"] == "load":
            sources = arguments.get("sources")
            if not (isinstance(sources, list) and sources and all(
                    isinstance(s, list) and len(s) == 2 and all(isinstance(part, str) for part in s)
                    and Path(s[0]).name == s[0] and s[0] not in (".", "..") for s in sources)):
                raise BuildRefused("load's sources must be [file name, text] pairs of plain file names")
            if not (isinstance(folders, list) and all(isinstance(f, str) for f in folders)):
                raise BuildRefused("source_folders must be a list of paths")
        return cls(data["function"], {k: v for k, v in arguments.items() if k not in NOT_COMPILED}, arch,
                   tuple(folders))

    @property
    def name(self) -> str:
        return self.arguments["name"]

    def key(self) -> str:
        return cache.key(KEY_VERSION, self.function, self.arguments, self.source_folders, toolchain(self.arch))


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


#: run(request, staging folder, seconds left) -> None when built there, else the error to pass back
Runner = Callable[[Request, Path, float], "str | None"]
#: sandboxed(command, env) -> the command run in the sandbox (env changed for it in place): isolation.py's
Sandboxed = Callable[[list[str], dict], list[str]]


def build(request: Request, cache_dir: Path, run: Runner, *, seconds_left: Callable[[], float],
          progress: Callable[[str], None] = lambda message: None, clock_ms=lambda: time.monotonic() * 1000) -> dict:
    """The answer to a worker's build ask: {"folder", "key", "hit", "waited_ms"} where the extension is built
    (now or before), else {"error", "key"}. One build per key at a time (a file lock: other judges building
    the same key wait, then hit)."""
    key = request.key()
    root = cache_dir / "builds"
    folder = root / key
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / LOCK_FILE, "w") as lock:
        before = clock_ms()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"waiting for another build of {request.name}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        waited_ms = clock_ms() - before
        built = {"folder": str(folder / request.name), "key": key, "waited_ms": waited_ms}
        if (folder / COMPLETE_MARKER).exists():
            return {**built, "hit": True}
        progress(f"compiling {request.name} (not in the build cache)")
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root))
        try:
            error = run(request, staging, seconds_left())
            output = staging / request.name
            if error is None and not (output.is_dir() and not output.is_symlink()):
                error = f"the build of {request.name} left no folder {request.name}/"
            if error is not None:  # the compiler's paths as the key's folder (where the build would have been)
                return {"error": error.replace(str(staging), str(folder)), "key": key}
            for path in output.iterdir():  # the module alone: its sources are no later worker's to read
                if path.name not in (request.name, request.name + ".so"):
                    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            shutil.rmtree(folder / request.name, ignore_errors=True)  # an earlier build that did not finish
            os.replace(output, folder / request.name)
            (folder / COMPLETE_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return {**built, "hit": False}


def run_builder(request: Request, staging: Path, seconds: float,
                sandboxed: Sandboxed = lambda command, env: command) -> str | None:
    """Run the builder process on `request`, its output in `staging`; None when it built, else its error."""
    env = sandbox.launcher_env(dict(os.environ, TMPDIR=str(staging / "tmp")))
    (staging / "tmp").mkdir()
    if request.arch:
        env["TORCH_CUDA_ARCH_LIST"] = request.arch
    order = {"function": request.function, "arguments": request.arguments, "folder": str(staging),
             "source_folders": list(request.source_folders)}
    command = sandboxed([sys.executable, "-m", "kerneljudge.extensions"], env)
    try:
        done = subprocess.run(command, input=json.dumps(order), capture_output=True, text=True, env=env,
                              cwd=str(staging), timeout=max(1.0, seconds))
    except subprocess.TimeoutExpired:
        return f"Error building extension '{request.name}': the build ran past the {seconds:.0f} s left"
    if done.returncode == 0:
        return None
    reported = done.stdout.strip().splitlines()[-1:]
    try:
        return str(json.loads(reported[0])["error"])[-ERROR_CHARS:]
    except (IndexError, ValueError, KeyError, TypeError):
        return (f"Error building extension '{request.name}': the build process ended with status "
                f"{done.returncode}: {done.stderr.strip()[-ERROR_CHARS:]}")


def main() -> None:
    """The builder process: one extension built with torch's own function, into the staging folder. Its
    result is the folder's content; a failure is one JSON line on standard output."""
    order = json.loads(sys.stdin.read())
    folder = Path(order["folder"])
    arguments = dict(order["arguments"], build_directory=str(folder / order["arguments"]["name"]), verbose=False)
    (folder / arguments["name"]).mkdir()
    if order["function"] == "load":
        sources = folder / "sources"
        sources.mkdir()
        for file_name, text in arguments["sources"]:
            (sources / file_name).write_text(text)
        arguments["sources"] = [str(sources / file_name) for file_name, _ in arguments["sources"]]
        arguments["extra_include_paths"] = [*(arguments.get("extra_include_paths") or []), *order["source_folders"]]
    try:
        from torch.utils import cpp_extension

        getattr(cpp_extension, order["function"])(**arguments)
    except BaseException as exc:  # noqa: BLE001 - the failure goes to the worker as torch said it
        print(json.dumps({"error": str(exc) if "Error building extension" in str(exc)
                          else f"{type(exc).__name__}: {exc}"}), flush=True)
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)  # the loaded module's threads and destructors are not waited for


if __name__ == "__main__":
    main()
