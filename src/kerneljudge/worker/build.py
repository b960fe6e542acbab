"""Stage "build" inside the worker: import the problem and the candidate, compiling on the way.

Candidates compile when imported (load_inline at module level, Triton at first launch). Builds are
cached by what is compiled: while the candidate is imported, torch's `load_inline` and `load` are
wrapped so that each call builds in a folder named by a hash of its own arguments (sources, functions,
flags, include paths, name, with_cuda...; a `load` source file by its content) and of the torch and
CUDA versions, target architecture, platform, Python and compiler. The same extension is never compiled
twice, however the Python around it changes, and a file lock makes two workers building the same
extension at once build it once. Triton's cache is the worker's own (isolation.py says why).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import inspect
import os
import platform
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kerneljudge import cache, sourcefile
from kerneljudge.records import Build, Finding
from kerneljudge.proc.failures import Classified, classify

COMPLETE_MARKER = "complete"
LOCK_FILE = "kj.lock"  # not "lock": torch's own build baton is called that
BUILD_FUNCTIONS = ("load_inline", "load")  # torch.utils.cpp_extension's JIT entry points
NOT_COMPILED = ("build_directory", "verbose", "keep_intermediates")  # arguments that do not change the build


@dataclass
class Loaded:
    """The imported modules a worker evaluates."""

    problem: types.ModuleType
    candidate: types.ModuleType
    model_new: type


def target_arch(device: str, requested: str | None) -> str | None:
    """The CUDA architecture to build for: requested, else the visible GPU's, else none (CPU)."""
    if requested:
        return requested
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(torch.device(device))
        return f"{major}.{minor}"
    return os.environ.get("TORCH_CUDA_ARCH_LIST")


def preload_toolchain() -> None:
    """torch's JIT build module, imported when a GPU worker takes its device (a spare: before its evaluation)
    rather than in the build stage, where a CUDA candidate's import paid it (about 0.2 s; loading a cached
    build took 25 ms of the H200's 0.3 s build stage). Not on a CPU, where most candidates never build. Best
    effort: where it fails, the build stage meets the failure itself (a candidate that builds)."""
    try:
        importlib.import_module("torch.utils.cpp_extension")
    except Exception:  # noqa: BLE001 - a preload only
        pass


def toolchain(arch: str | None) -> list:
    """What besides its arguments decides what a build produces."""
    import torch

    return [torch.__version__, torch.version.cuda, arch, sys.platform, platform.machine(),
            list(sys.version_info[:2]), os.environ.get("CXX"), os.environ.get("CUDA_HOME")]


@dataclass
class ExtensionCache:
    """The build cache as the candidate's load_inline/load calls see it: builds/<key>/<name>/ per call,
    locked while it builds; records what each call cost and whether it was already built."""

    root: Path
    toolchain: list
    clock_ms: Callable[[], float]
    built: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, key, hit) per call, failed ones too
    waited_ms: float = 0.0  # for other workers' builds of the same extension: not this build's time
    progress: Callable[[str], None] = lambda message: None  # what is happening (a wait, a compile)

    def key(self, function, args: tuple, kwargs: dict) -> tuple[inspect.BoundArguments, str]:
        bound = inspect.signature(function).bind(*args, **kwargs)
        bound.apply_defaults()
        compiled = {k: v for k, v in bound.arguments.items() if k not in NOT_COMPILED}
        if function.__name__ == "load":
            sources = compiled["sources"]
            compiled["sources"] = [_file_digest(path) for path in ([sources] if isinstance(sources, str) else sources)]
        return bound, cache.key(function.__name__, compiled, self.toolchain)

    def wrap(self, function):
        @functools.wraps(function)
        def cached_build(*args, **kwargs):
            try:
                bound, key = self.key(function, args, kwargs)
            except (TypeError, OSError):  # a bad call or a missing source file: torch says what is wrong
                return function(*args, **kwargs)
            folder = self.root / key
            name = str(bound.arguments["name"])
            bound.arguments["build_directory"] = str(folder / name)
            (folder / name).mkdir(parents=True, exist_ok=True)
            with open(folder / LOCK_FILE, "w") as lock:
                before = self.clock_ms()
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    self.progress(f"waiting for another worker building {name}")
                    fcntl.flock(lock, fcntl.LOCK_EX)  # a second worker on the same extension waits, then hits
                self.waited_ms += self.clock_ms() - before
                hit = (folder / COMPLETE_MARKER).exists()
                self.progress(f"loading {name} (build cache hit)" if hit else f"compiling {name} (not in the build cache)")
                self.built.append((name, key, hit))
                extension = function(*bound.args, **bound.kwargs)
                (folder / COMPLETE_MARKER).write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
            return extension

        cached_build.kj_unwrapped = function
        return cached_build

    def install(self) -> None:
        """Route torch's JIT builds through this cache for the rest of the worker's life (the worker exists
        for this candidate; an extension built lazily in forward lands in the cache too)."""
        from torch.utils import cpp_extension

        for name in BUILD_FUNCTIONS:
            function = getattr(cpp_extension, name)
            setattr(cpp_extension, name, self.wrap(getattr(function, "kj_unwrapped", function)))

    def build(self, elapsed_ms: float) -> Build:
        if not self.built:
            return Build(elapsed_ms, "none", None)
        return Build(elapsed_ms - self.waited_ms, "hit" if all(hit for _, _, hit in self.built) else "miss",
                     ",".join(key for _, key, _ in self.built), tuple(sorted({name for name, _, _ in self.built})))


def _file_digest(path: str) -> list[str]:
    """A `load` source file: its name (the suffix picks the compiler) and the hash of its content."""
    return [Path(path).name, hashlib.sha256(Path(path).read_bytes()).hexdigest()]


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
    written = written_constants(source)
    typed = {k: type(written[k])(v) if isinstance(v, list) and isinstance(written.get(k), tuple) else v
             for k, v in constants.items()}
    return {k: v for k, v in typed.items() if k in written and written[k] != v}


def written_constants(source: str) -> dict:
    """The module-level constants as the problem file writes them."""
    return sourcefile.constants(sourcefile.parse(source, "<problem>"))


def candidate_constants(path: str, problem_source: str, constants: dict) -> tuple[dict, Finding | None]:
    """The run's changed sizes that the candidate also defines as module-level constants with the problem file's
    value (its copy of them), to be set in the candidate too (a candidate that builds its state from its own
    `batch_size` must see the run's), and the notice saying so. A constant of the same name and another value is
    the candidate's own (`dim = 1`, a softmax's axis, beside the problem's `dim = 16384`): left as it is."""
    changed = changed_constants(problem_source, constants)
    if not changed:
        return {}, None
    try:
        own = sourcefile.constants(sourcefile.parse(sourcefile.read(path), path))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return {}, None  # the import reports it
    written = written_constants(problem_source)
    shared = {k: v for k, v in changed.items()
              if k in own and type(own[k]) is type(written[k]) and own[k] == written[k]}
    if not shared:
        return {}, None
    told = ", ".join(f"{k} = {own[k]!r} -> {v!r}" for k, v in shared.items())
    return shared, Finding.of("candidate-constants", f"the candidate's module-level {told}: set to the "
                              "problem's values for this run", stage="build", constants=shared)


def import_candidate(path: str, sha256: str, kinds: list[str], *, cache_dir: Path, device: str,
                     arch: str | None, clock_ms, constants: dict | None = None, progress=lambda message: None,
                     ) -> tuple[types.ModuleType | None, Build, Classified | None]:
    """Import the candidate with its builds going through the build cache, with `constants` set
    (candidate_constants); the failure, if any, comes back classified. `progress(message)` says what is
    happening (a wait for another build, a compile)."""
    builds = None
    if kinds:
        # this worker process exists for this candidate: its environment is where torch looks
        resolved_arch = target_arch(device, arch)
        if resolved_arch:
            os.environ["TORCH_CUDA_ARCH_LIST"] = resolved_arch
        if {"cpp", "cuda"} & set(kinds):
            builds = ExtensionCache(cache_dir / "builds", toolchain(resolved_arch), clock_ms, progress=progress)
            builds.install()
    started = clock_ms()
    module, failure = _import(path, sha256, constants)
    elapsed_ms = clock_ms() - started
    return module, builds.build(elapsed_ms) if builds else Build(elapsed_ms, "none", None), failure


def find_model_new(module: types.ModuleType, stage: str) -> tuple[type | None, Finding | None]:
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type):
        defined = sorted(n for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__)
        hint = f" (classes defined: {', '.join(defined)})" if defined else ""
        what = "no class ModelNew" if model_new is None else \
            f"ModelNew as a {type(model_new).__name__}, not a class (an nn.Module subclass)"
        return None, Finding.of("missing-modelnew", f"the candidate defines {what}{hint}", stage=stage)
    return model_new, None


def _import(path: str, sha256: str, constants: dict | None = None
            ) -> tuple[types.ModuleType | None, Classified | None]:
    name = f"kj_candidate_{sha256[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        if constants:  # the same lines with the constants rewritten: tracebacks and inspect still match the file
            source = sourcefile.with_constants(sourcefile.read(path), constants, path)
            exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - the candidate runs in the worker
        else:
            spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything, even SystemExit
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None, classify(exc, stage="build", code="import-error", what="importing the candidate",
                              source_file=path)
    return module, None
