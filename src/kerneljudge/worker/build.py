"""Stage "build" inside the worker: import the problem and the candidate, compiling on the way.

Candidates compile when imported (load_inline at module level, Triton at first launch). While the candidate
is imported, torch's `load_inline` and `load` are wrapped: each call's arguments go to the judge, which
builds them into the build cache, keyed on what is compiled (sources, functions, flags, include paths, name,
with_cuda...; a `load` source file by its content) and the toolchain, and the module is loaded from there.
The same extension is never compiled twice, however the Python around it changes; the worker cannot write
the cache, under the sandbox's `mount` layer (extensions.py says why). Triton's cache is the worker's own
(isolation.py says why).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import inspect
import json
import os
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

from kerneljudge import extensions, sourcefile
from kerneljudge.records import Build, Finding
from kerneljudge.proc.failures import Classified, classify
from kerneljudge.proc.serve import Ask


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
    """torch's JIT build module, imported when a GPU worker takes its device, or ahead of it where a batch lane
    prepares its spare (protocol.Prepare: outside the device's gate), rather than in the build stage, where a CUDA
    candidate's import paid it (about 0.2 s; loading a cached build took 25 ms of the H200's 0.3 s build stage). Not
    on a CPU, where most candidates never build. Best effort: where it fails, the build stage meets the failure
    itself (a candidate that builds)."""
    try:
        importlib.import_module("torch.utils.cpp_extension")
    except Exception:  # noqa: BLE001 - a preload only
        pass


@dataclass
class JudgeBuilds:
    """torch's load_inline/load as the candidate sees them: each call's arguments go to the judge, which builds
    them into the build cache (extensions.py: workers cannot write it), and the module is loaded from there.
    Records what each call cost and whether it was built already."""

    ask: Ask
    arch: str | None
    built: list[tuple[str, str, bool]] = field(default_factory=list)  # (name, key, hit) per call, failed ones too
    waited_ms: float = 0.0  # for another build of the same extension: not this build's time
    # each name's builds in this process, by what they compile: a name built again from other sources is loaded
    # as name_v1, name_v2..., as torch's own versioning does (a second module of one name would be the first)
    versions: dict[str, list[str]] = field(default_factory=dict)

    def wrap(self, function):
        @functools.wraps(function)
        def judge_built(*args, **kwargs):
            try:
                bound = inspect.signature(function).bind(*args, **kwargs)
                bound.apply_defaults()
                question = self._question(function.__name__, dict(bound.arguments))
            except (TypeError, OSError):  # a bad call, a source file missing: torch says what is wrong
                return function(*args, **kwargs)
            name = question["arguments"]["name"]
            answer = self.ask({"build": question})
            self.built.append((name, str(answer.get("key", "")), bool(answer.get("hit"))))
            if "error" in answer:
                raise RuntimeError(str(answer["error"]))
            self.waited_ms += float(answer.get("waited_ms") or 0.0)
            from torch.utils import cpp_extension

            if bound.arguments.get("is_standalone"):
                return cpp_extension._get_exec_path(name, answer["folder"])
            return cpp_extension._import_module_from_library(name, answer["folder"],
                                                             bound.arguments.get("is_python_module", True))

        judge_built.kj_unwrapped = function
        return judge_built

    def _question(self, function: str, arguments: dict) -> dict:
        """The call as data (JSON): include paths made absolute here (where torch would), `load`'s source files
        read here and sent as bytes with their paths and the headers beside them (the builder sees no worker's
        folder; their folders are on the include path too, for the includes of a folder it sees), the name
        versioned. Past the channel's size, an error (the message would be taken for a forged one)."""
        arguments = {k: v for k, v in arguments.items() if k not in extensions.NOT_COMPILED}
        if isinstance(arguments.get("extra_include_paths"), (list, tuple)):
            arguments["extra_include_paths"] = [os.path.abspath(p) for p in arguments["extra_include_paths"]]
        paths: list[str] = []
        headers: list[list[str]] = []
        if function == "load":
            files = [arguments["sources"]] if isinstance(arguments["sources"], (str, os.PathLike)) \
                else list(arguments["sources"])
            arguments["sources"] = [[Path(f).name, _base64(Path(f))] for f in files]
            paths = [str(Path(f).resolve()) for f in files]
            headers = _headers_beside(paths)
            arguments["extra_include_paths"] = [*(arguments.get("extra_include_paths") or []),
                                                *dict.fromkeys(str(Path(path).parent) for path in paths)]
        arguments = json.loads(json.dumps(arguments, default=str))
        if len(json.dumps(arguments)) + sum(len(content) for _, content in headers) > MOST_QUESTION_BYTES:
            raise RuntimeError(f"Error building extension '{arguments['name']}': its sources and headers are over "
                               f"{MOST_QUESTION_BYTES >> 20} MiB")
        compiled = json.dumps([function, {k: v for k, v in arguments.items() if k != "name"}, headers], sort_keys=True)
        builds = self.versions.setdefault(arguments["name"], [])
        if compiled not in builds:
            builds.append(compiled)
        version = builds.index(compiled)
        if version:
            arguments["name"] = f"{arguments['name']}_v{version}"
        return {"function": function, "arguments": arguments, "arch": self.arch, "headers": headers,
                "source_paths": paths}

    def install(self) -> None:
        """Route torch's JIT builds through the judge for the rest of the worker's life (the worker exists for this
        candidate; an extension built lazily in forward is the judge's build too)."""
        from torch.utils import cpp_extension

        for name in extensions.FUNCTIONS:
            function = getattr(cpp_extension, name)
            setattr(cpp_extension, name, self.wrap(getattr(function, "kj_unwrapped", function)))

    def build(self, elapsed_ms: float) -> Build:
        if not self.built:
            return Build(elapsed_ms, "none", None)
        return Build(elapsed_ms - self.waited_ms, "hit" if all(hit for _, _, hit in self.built) else "miss",
                     ",".join(key for _, key, _ in self.built), tuple(sorted({name for name, _, _ in self.built})))


HEADER_SUFFIXES = (".h", ".hh", ".hpp", ".hxx", ".cuh", ".inc", ".inl")
MOST_HEADERS, LARGEST_HEADER_BYTES = 64, 1 << 20
MOST_QUESTION_BYTES = 48 << 20  # under the channel's message limit (channel.MAX_MESSAGE_BYTES, 64 MiB)


def _base64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _headers_beside(sources: list[str]) -> list[list[str]]:
    """The header files in the folders of `load`'s sources (plain files, the first of a name, a bounded few),
    as [file name, base64 content]: the sources' own includes, sent with them."""
    names = {Path(source).name for source in sources}
    headers = []
    for folder in dict.fromkeys(Path(source).parent for source in sources):
        for path in sorted(folder.iterdir()):
            if len(headers) < MOST_HEADERS and path.suffix in HEADER_SUFFIXES and path.name not in names \
                    and path.is_file() and not path.is_symlink() and path.stat().st_size <= LARGEST_HEADER_BYTES:
                names.add(path.name)
                headers.append([path.name, _base64(path)])
    return headers


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


def import_candidate(path: str, sha256: str, kinds: list[str], *, ask: Ask, device: str, arch: str | None,
                     clock_ms, constants: dict | None = None
                     ) -> tuple[types.ModuleType | None, Build, Classified | None]:
    """Import the candidate with its builds made by the judge (`ask`: JudgeBuilds), with `constants` set
    (candidate_constants); the failure, if any, comes back classified."""
    builds = None
    if kinds:
        # this worker process exists for this candidate: its environment is where torch looks
        resolved_arch = target_arch(device, arch)
        if resolved_arch:
            os.environ["TORCH_CUDA_ARCH_LIST"] = resolved_arch
        if {"cpp", "cuda"} & set(kinds):
            builds = JudgeBuilds(ask, resolved_arch)
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
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything, even SystemExit or a
        # KeyboardInterrupt (worker/calls.py: no Ctrl-C reaches a worker)
        return None, classify(exc, stage="build", code="import-error", what="importing the candidate",
                              source_file=path)
    return module, None
