"""Stage "build" inside the worker: import the problem and the candidate, compiling on the way.

Candidates compile when imported (load_inline at module level, Triton at first launch). Builds are
cached by content: the extension folder is named by a hash of the candidate's source, the torch and
CUDA versions, the target architecture and the platform, so the same source is never compiled twice,
and a file lock makes two workers building the same source at once build it once.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time
import types
from dataclasses import dataclass
from pathlib import Path

from kerneljudge import sourcefile
from kerneljudge.records import Build, Finding
from kerneljudge.proc.failures import Classified, classify

COMPLETE_MARKER = "complete"


@dataclass
class Loaded:
    """The imported modules a worker evaluates."""

    problem: types.ModuleType
    candidate: types.ModuleType
    model_new: type


def build_key(candidate_sha256: str, arch: str | None) -> str:
    import torch

    parts = [candidate_sha256, torch.__version__, torch.version.cuda, arch, platform.machine(),
             list(sys.version_info[:2])]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def target_arch(device: str, requested: str | None) -> str | None:
    """The CUDA architecture to build for: requested, else the visible GPU's, else none (CPU)."""
    if requested:
        return requested
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        return f"{major}.{minor}"
    return os.environ.get("TORCH_CUDA_ARCH_LIST")


def import_problem(path: str, source: str, constants: dict) -> types.ModuleType:
    """Run the problem's source with the constants that differ from the file's rewritten (see
    sourcefile.with_constants)."""
    module = types.ModuleType("kj_problem")
    module.__file__ = path
    code = compile(sourcefile.with_constants(source, changed_constants(source, constants), path), path, "exec")
    exec(code, module.__dict__)  # noqa: S102 - the problem file is the user's reference, run in the worker
    return module


def changed_constants(source: str, constants: dict) -> dict:
    """The run's constants that differ from the values written in `source`. They came as JSON, where a
    tuple became a list: each takes its file value's type back."""
    written = sourcefile.constants(sourcefile.parse(source, "<problem>"))
    typed = {k: type(written[k])(v) if isinstance(v, list) and isinstance(written.get(k), tuple) else v
             for k, v in constants.items()}
    return {k: v for k, v in typed.items() if k in written and written[k] != v}


def candidate_constants(path: str, problem_source: str, constants: dict) -> tuple[dict, Finding | None]:
    """The run's changed sizes that the candidate also defines as module-level constants, to be set in the
    candidate too (a candidate that builds its state from its own `batch_size` must see the run's), and
    the notice saying so."""
    changed = changed_constants(problem_source, constants)
    if not changed:
        return {}, None
    try:
        own = sourcefile.constants(sourcefile.parse(Path(path).read_text(), path))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return {}, None  # the import reports it
    shared = {k: v for k, v in changed.items() if k in own and own[k] != v and type(own[k]) is type(v)}
    if not shared:
        return {}, None
    told = ", ".join(f"{k} = {own[k]!r} -> {v!r}" for k, v in shared.items())
    return shared, Finding.of("candidate-constants", f"the candidate's module-level {told}: set to the "
                              "problem's values for this run", stage="build", constants=shared)


def import_candidate(path: str, sha256: str, kinds: list[str], *, cache_dir: Path, device: str,
                     arch: str | None, clock_ms, constants: dict | None = None, progress=lambda message: None,
                     ) -> tuple[types.ModuleType | None, Build, Classified | None]:
    """Import the candidate under its build cache folder, with `constants` set (candidate_constants);
    the failure, if any, comes back classified. `progress(message)` says what is happening (a wait for
    another build, a compile)."""
    if not kinds:
        started = clock_ms()
        module, failure = _import(path, sha256, constants)
        return module, Build(clock_ms() - started, "none", None), failure
    resolved_arch = target_arch(device, arch)
    key = build_key(sha256, resolved_arch)
    folder = cache_dir / "builds" / key
    folder.mkdir(parents=True, exist_ok=True)
    # this worker process exists for this candidate: its environment is where torch and triton look
    os.environ["TORCH_EXTENSIONS_DIR"] = str(folder / "torch_extensions")
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache_dir / "triton"))
    if resolved_arch:
        os.environ["TORCH_CUDA_ARCH_LIST"] = resolved_arch
    with open(folder / "lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("waiting for another worker building the same source")
            fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker on the same source waits, then hits the cache
        hit = (folder / COMPLETE_MARKER).exists()
        progress(f"importing {Path(path).name} (build cache hit)" if hit else
                 f"compiling {Path(path).name} ({', '.join(kinds)}; not in the build cache)")
        started = clock_ms()  # the wait for another worker's build is not this build's time
        module, failure = _import(path, sha256, constants)
        if failure is None:
            (folder / COMPLETE_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
    extensions = tuple(sorted(p.name for p in (folder / "torch_extensions").glob("*") if p.is_dir()))
    return module, Build(clock_ms() - started, "hit" if hit else "miss", key, extensions), failure


def find_model_new(module: types.ModuleType, stage: str) -> tuple[type | None, Finding | None]:
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type):
        defined = sorted(n for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__)
        hint = f" (classes defined: {', '.join(defined)})" if defined else ""
        return None, Finding.of("missing-modelnew", f"the candidate defines no class ModelNew{hint}", stage=stage)
    return model_new, None


def _import(path: str, sha256: str, constants: dict | None = None
            ) -> tuple[types.ModuleType | None, Classified | None]:
    name = f"kj_candidate_{sha256[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        if constants:  # the same lines with the constants rewritten: tracebacks and inspect still match the file
            source = sourcefile.with_constants(Path(path).read_text(), constants, path)
            exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the candidate runs in the worker
        else:
            spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, classify(exc, stage="build", code="import-error", what="importing the candidate",
                              source_file=path)
    return module, None
