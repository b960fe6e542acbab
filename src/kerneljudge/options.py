"""Every option of an evaluation, with its default and its legal range, in one place.

The CLI, the Python API and the MCP server all build one `Options` value and pass it down; nothing
reads globals or environment variables behind its back (the environment is read here, once, for the
two locations that are documented as overridable by environment variables). `Options.validate` is the
one rule for every interface: `pipeline.evaluate` calls it before anything is loaded or any worker
starts, and a value out of range is a UsageError naming the argument as the caller's interface
names it (`ARGUMENT_NAMES`), never a finding against the candidate.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from kerneljudge.errors import KernelJudgeError, UsageError
from kerneljudge.sandbox import LAYERS as SANDBOX_LAYERS  # the layers that can be turned off

Protocol = Literal["strict", "kernelbench"]
Interface = Literal["cli", "python", "mcp"]
#: The evaluation verbs (api.evaluate/check/bench/submit): the CLI's commands, what a server request and a
#: stored record name. Defined here once; the store, the server and `history --verb` use VERBS.
Verb = Literal["evaluate", "check", "bench", "submit"]
VERBS: tuple[Verb, ...] = get_args(Verb)

#: How an interface names an Options field where the name is not the default one (the CLI: the field's
#: last part as a flag, `timing.budget_ms` -> `--budget-ms`; Python and MCP: the last part, `budget_ms`).
ARGUMENT_NAMES: dict[str, dict[Interface, str]] = {
    "overrides": {"cli": "--set", "mcp": "sets"},
    "worker.timeout_s": {"cli": "--timeout"},
}

#: Tolerances per output dtype (atol = rtol). fp32 as KernelBench (1e-4); half types 1e-2.
DEFAULT_TOLERANCE = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2, "float64": 1e-7}


def default_cache_dir() -> Path:
    """Build, baseline and bandwidth caches: $KERNELJUDGE_CACHE_DIR, else ~/.cache/kerneljudge."""
    env = os.environ.get("KERNELJUDGE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "kerneljudge"


def default_store_path() -> Path:
    """Results database: $KERNELJUDGE_STORE, else ~/.local/share/kerneljudge/results.sqlite."""
    env = os.environ.get("KERNELJUDGE_STORE")
    if env:
        return Path(env).expanduser()
    return _home_store_path()


def _home_store_path() -> Path:
    data = os.environ.get("XDG_DATA_HOME")
    base = Path(data).expanduser() if data else Path.home() / ".local" / "share"
    return base / "kerneljudge" / "results.sqlite"


def default_server_socket() -> Path:
    """Where `kerneljudge serve` listens and the evaluation verbs look for it: $KERNELJUDGE_SOCKET, else
    in a folder only this user can open (the server runs the files its clients name):
    $XDG_RUNTIME_DIR/kerneljudge/judge.sock, else /tmp/kerneljudge-UID/judge.sock."""
    env = os.environ.get("KERNELJUDGE_SOCKET")
    if env:
        return Path(env).expanduser()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "kerneljudge" / "judge.sock"
    return Path(tempfile.gettempdir()) / f"kerneljudge-{os.getuid()}" / "judge.sock"


def default_fork_server() -> bool:
    return os.environ.get("KERNELJUDGE_FORK_SERVER", "1").strip().lower() not in ("0", "off", "false", "no")


def default_sandbox_off() -> tuple[str, ...]:
    """Sandbox layers turned off: $KERNELJUDGE_SANDBOX_OFF, comma-separated (none by default)."""
    return tuple(sorted(filter(None, (n.strip() for n in os.environ.get("KERNELJUDGE_SANDBOX_OFF", "").split(",")))))


def default_problems_root() -> Path | None:
    """Where `levelN/ID` names resolve: a KernelBench checkout in $KERNELJUDGE_PROBLEMS_ROOT, else the
    built-in suite (None)."""
    env = os.environ.get("KERNELJUDGE_PROBLEMS_ROOT")
    return Path(env).expanduser().resolve() if env else None


def argument_name(field_path: str, interface: Interface) -> str:
    """What `interface` calls the Options field `field_path` ("timing.budget_ms")."""
    leaf = field_path.rsplit(".", 1)[-1]
    default = "--" + leaf.replace("_", "-") if interface == "cli" else leaf
    return ARGUMENT_NAMES.get(field_path, {}).get(interface, default)


def spoken(error: KernelJudgeError, interface: Interface) -> str:
    """The error's message in `interface`'s words (a UsageError names its argument as that interface does)."""
    if isinstance(error, UsageError) and error.argument:
        return error.naming(argument_name(error.argument, interface))
    return str(error)


def check_device(device: str) -> str:
    """The device, lower-cased, if it is auto, cpu, cuda or cuda:N; else a UsageError."""
    name = device.strip().lower() if isinstance(device, str) else device
    if not isinstance(name, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", name):
        raise UsageError(f"{{argument}} {device!r} is not a device: use auto, cpu, cuda or cuda:N", "device")
    return name


def _check_number(value, argument: str, *, integer: bool = False, minimum: float = 0, above: bool = False,
                  optional: bool = False, unit: str = "") -> None:
    """A UsageError unless `value` is a finite number (an int when `integer`) >= minimum (> when `above`)."""
    if value is None and optional:
        return
    kind = int if integer else (int, float)
    ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < minimum or (above and value == minimum):
        what = "an integer" if integer else "a number"
        bound = f"{'>' if above else '>='} {minimum:g}{unit}"
        raise UsageError(f"{{argument}} must be {what} {bound}" + (" or unset" if optional else "")
                         + f" (got {value!r})", argument)


@dataclass(frozen=True)
class CheckOptions:
    """Correctness: how many trials, which tolerance, which seed."""

    trials: int = 5
    atol: float | None = None  # None: from the output dtype (DEFAULT_TOLERANCE)
    rtol: float | None = None
    seed: int | None = None  # None: a secret random seed per run
    float64_budget_mb: int | None = None  # the float64 reference runs in chunks beyond it; None: referee/plan.py


@dataclass(frozen=True)
class TimingOptions:
    """Timing: the stop rule (see kerneljudge.timing.StopRule) and the modes."""

    enabled: bool = True
    warmup_runs: int = 3
    warmup_ms: float = 20.0  # and at least this long: GPU clocks ramp up from idle
    min_runs: int = 10
    max_runs: int = 1000
    min_time_ms: float = 100.0
    budget_ms: float = 1000.0
    target_rel_sem: float = 0.005
    input_sets: int = 4  # timed calls rotate among this many input sets
    # about this many timed outputs compared with the reference over max_runs calls, drawn in secret call by call,
    # the same number expected in each doubling of the timed calls (stages/measure.CheckSchedule: about 4 in each
    # of the 7 spans of a 1,000-call timing; on a GPU the ~8 watched calls are checked besides), and 2 among the
    # first min_runs; never fewer than 3 per span however small this is (0: none)
    checked_calls: int = 32
    cuda_graph: bool = False
    baselines: bool = True  # time the reference eager and under torch.compile
    compile_baseline: bool = True


#: The share of the machine's memory a run may use when `worker.memory_limit_mb` is not given.
DEFAULT_MEMORY_SHARE = 0.75


def memory_limit_bytes(limit_mb: int | None) -> int:
    """`limit_mb` in bytes, or DEFAULT_MEMORY_SHARE of the machine's memory."""
    if limit_mb:
        return limit_mb * 2**20
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * DEFAULT_MEMORY_SHARE)


#: The share of a GPU's memory the candidate's process may allocate through torch when
#: `worker.gpu_memory_share` is not given; the referee, on the same GPU, keeps the rest (its peaks in the
#: memory sweep were up to 45 GB of the H200's 143, the worker's up to 37 GB: docs/memory-sweep.md).
DEFAULT_GPU_MEMORY_SHARE = 0.5

#: WorkerOptions fields holding paths (strings in JSON).
PATH_LISTS = ("writable", "watched", "hidden", "stores")


@dataclass(frozen=True)
class WorkerOptions:
    """Isolation limits for the worker process that runs candidate code."""

    timeout_s: float = 300.0  # whole worker lifetime, build included (a cold CUDA build takes ~1 min)
    # None: DEFAULT_MEMORY_SHARE of RAM. Each process's address space on CPU runs (none on GPUs: CUDA maps far
    # more than it uses), and the worker's processes together on both, where a memory cgroup can be made
    memory_limit_mb: int | None = None
    # GPU runs: the share of the GPU's memory torch's allocator gives the worker (a candidate over it fails with
    # out-of-memory instead of starving the referee). Set inside the worker's process: code that calls the
    # CUDA driver itself, or lifts the cap, gets past it (README, "What the judge trusts")
    gpu_memory_share: float = DEFAULT_GPU_MEMORY_SHARE
    # GPU runs: large outputs reach the referee as CUDA IPC handles (proc/deviceshare) where the referee opens
    # the worker's probe; False: always through host memory
    device_share: bool = True
    # sandbox layers left off (kerneljudge/sandbox: user, mount, dev, pid, net, ipc, rlimits, cgroup, memory); default
    # from $KERNELJUDGE_SANDBOX_OFF ("dev,pid"), e.g. where a layer breaks a GPU driver
    sandbox_off: tuple[str, ...] = field(default_factory=default_sandbox_off)
    cache_dir: Path | None = None  # the judge's cache (Options.cache_dir; None: the default): where it builds
    writable: tuple[Path, ...] = ()  # more folders the worker may write besides its own
    watched: tuple[Path, ...] = ()  # files the worker must not change (the results store), checked after it
    # files and folders the worker must not see: covered in its read-only view (sandbox/launch.py; the
    # results store with its journal files, and the judge server's socket, by Options.worker_options)
    hidden: tuple[Path, ...] = ()
    # results stores the worker must not read (other candidates' sources): hidden with their journal files, which
    # the judge holds open while the worker lives (store.HeldOpen: a journal made after it started is not covered)
    stores: tuple[Path, ...] = ()
    max_processes: int = 1024  # tasks (threads too) in the worker's cgroup, and that it may add to its user's
    max_file_mb: int = 16384  # largest file the worker may write
    max_open_files: int = 4096
    # CPU priority (os.nice) of the worker and its children: builders run at BUILD_NICENESS (builder.py) so that
    # a build beside a judging lane (batches, Ray nodes) does not take the cores its timing runs on
    niceness: int = 0
    # processes forked by the fork server, torch imported (spawn.py); False: each executed afresh. Default
    # from $KERNELJUDGE_FORK_SERVER ("0" turns it off)
    fork_server: bool = field(default_factory=default_fork_server)

    def launch_key(self) -> tuple:
        """What a worker's sandbox is started with: a spare started under another is not used."""
        return (self.sandbox_off, self.cache_dir, self.writable, self.watched, self.hidden, self.stores,
                self.max_processes,
                self.max_file_mb, self.max_open_files, self.memory_limit_mb, self.niceness)  # the memory cgroup's limit too


@dataclass(frozen=True)
class Options:
    """One evaluation's settings. `Options()` is the documented default."""

    device: str = "auto"  # "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:N"
    preset: str | None = None  # size preset of the problem; None: "small" for a built-in problem on a CPU
    overrides: tuple[tuple[str, str], ...] = ()  # --set NAME=VALUE, applied after the preset
    protocol: Protocol = "strict"
    probes: bool = True
    check: CheckOptions = field(default_factory=CheckOptions)
    timing: TimingOptions = field(default_factory=TimingOptions)
    worker: WorkerOptions = field(default_factory=WorkerOptions)
    cache_dir: Path = field(default_factory=default_cache_dir)
    store_path: Path | None = field(default_factory=default_store_path)  # None: do not record
    hidden_recheck: bool = False  # submit: another round of trials with secret seeds, details withheld
    arch: str | None = None  # TORCH_CUDA_ARCH_LIST for builds; None: the visible GPU's
    problems_root: Path | None = field(default_factory=default_problems_root)  # None: the built-in suite

    def __post_init__(self) -> None:
        # the folders and the store as Paths, whether given as Path, str or any os.PathLike (Python callers)
        for name in ("cache_dir", "store_path", "problems_root"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Path) and isinstance(value, (str, os.PathLike)):
                object.__setattr__(self, name, Path(value))
    def worker_options(self) -> WorkerOptions:
        """The worker's options with what the sandbox must know of this run: the cache (the judge builds the
        worker's extensions there; its locks and builds in progress are hidden), the results store (watched),
        every store this user's runs write by default besides it (one run with `--no-store` or another store is
        still the user's: hidden, as other candidates' sources: the default store's folder whole, a store elsewhere
        with its journal files, `stores`), the judge server's socket (hidden: there the worker could ask for
        evaluations)."""
        store = (Path(self.store_path).expanduser(),) if self.store_path else ()
        try:  # (the default store's folder is the judge's own: a journal made there after the worker started too)
            folder = (_home_store_path().parent,)
        except RuntimeError:  # no home directory: no default store there
            folder = ()
        default = (default_store_path(),) if folder or os.environ.get("KERNELJUDGE_STORE") else ()
        stores = tuple(path for path in dict.fromkeys(tuple(self.worker.stores) + store + default)
                       if not any(path.is_relative_to(hidden) for hidden in folder))
        return dataclasses.replace(self.worker, cache_dir=Path(self.cache_dir),
                                   watched=tuple(self.worker.watched) + store, stores=stores,
                                   hidden=tuple(self.worker.hidden) + folder + (default_server_socket(),))

    def replace(self, **changes) -> "Options":
        """A copy with some fields changed; nested groups take dicts (`check={"trials": 3}`).
        An unknown field is a UsageError listing the known ones."""
        for name in ("check", "timing", "worker"):
            if isinstance(changes.get(name), dict):
                changes[name] = _replaced(getattr(self, name), changes[name], f"{name}.")
        return _replaced(self, changes, "")

    def validate(self) -> "Options":
        """Raise UsageError for the first argument out of its legal range; return self when all are fine.
        (Problem constants, `overrides`, are checked against the problem file when it is loaded.)"""
        check_device(self.device)
        if self.protocol not in get_args(Protocol):
            raise UsageError(f"{{argument}} must be one of {', '.join(get_args(Protocol))} (got {self.protocol!r})",
                             "protocol")
        for name, value in (("preset", self.preset), ("arch", self.arch)):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise UsageError(f"{{argument}} must be a non-empty name or unset (got {value!r})", name)
        check, timing, worker = self.check, self.timing, self.worker
        _check_number(check.trials, "check.trials", integer=True, minimum=1)
        _check_number(check.atol, "check.atol", optional=True)
        _check_number(check.rtol, "check.rtol", optional=True)
        _check_number(check.float64_budget_mb, "check.float64_budget_mb", integer=True, minimum=1, optional=True,
                      unit=" MB")
        if check.seed is not None and (not isinstance(check.seed, int) or isinstance(check.seed, bool)):
            raise UsageError(f"{{argument}} must be an integer or unset (got {check.seed!r})", "check.seed")
        for name in ("warmup_runs", "checked_calls"):
            _check_number(getattr(timing, name), f"timing.{name}", integer=True)
        for name in ("min_runs", "input_sets"):
            _check_number(getattr(timing, name), f"timing.{name}", integer=True, minimum=1)
        _check_number(timing.max_runs, "timing.max_runs", integer=True, minimum=timing.min_runs)
        for name in ("warmup_ms", "min_time_ms", "target_rel_sem"):
            _check_number(getattr(timing, name), f"timing.{name}")
        _check_number(timing.budget_ms, "timing.budget_ms", above=True, unit=" ms")
        _check_number(worker.timeout_s, "worker.timeout_s", above=True, unit=" s")
        _check_number(worker.memory_limit_mb, "worker.memory_limit_mb", integer=True, minimum=256, optional=True,
                      unit=" MB")
        _check_number(worker.gpu_memory_share, "worker.gpu_memory_share", above=True)
        if not (type(worker.niceness) is int and 0 <= worker.niceness <= 19):
            raise UsageError(f"{{argument}} must be an integer from 0 to 19 (got {worker.niceness!r})",
                             "worker.niceness")
        if worker.gpu_memory_share > 1:
            raise UsageError(f"{{argument}} must be a share of the GPU's memory, at most 1 (got "
                             f"{worker.gpu_memory_share!r})", "worker.gpu_memory_share")
        for name in ("max_processes", "max_file_mb", "max_open_files"):
            _check_number(getattr(worker, name), f"worker.{name}", integer=True, minimum=16)
        unknown = set(worker.sandbox_off) - set(SANDBOX_LAYERS)
        if unknown:
            raise UsageError(f"{{argument}}: unknown layer {', '.join(sorted(unknown))} (the layers: "
                             f"{', '.join(SANDBOX_LAYERS)})", "worker.sandbox_off")
        return self

    def command_line(self, verb: str, problem: str, solution: str, *, seed: int, device: str,
                     preset: str | None) -> str:
        """The `kerneljudge` command that runs this evaluation again with the same seed, sizes and
        settings (`submit`'s hidden re-check is not part of it: its seeds are never shown)."""
        words = ["kerneljudge", "check" if verb == "check" else "bench" if verb == "bench" else "eval",
                 problem, solution, "--seed", str(seed), "--device", device]
        words += ["--preset", preset] if preset else []
        for name, value in self.overrides:
            words += ["--set", f"{name}={value}"]
        default = Options()
        for path in ("check.trials", "check.atol", "check.rtol", "check.float64_budget_mb", "protocol",
                     "timing.budget_ms",
                     "worker.timeout_s", "worker.memory_limit_mb", "worker.gpu_memory_share", "arch"):
            value = _field(self, path)
            if value is not None and value != _field(default, path):
                words += [argument_name(path, "cli"), str(value)]
        flags = {"--no-probes": not self.probes, "--no-timing": verb == "evaluate" and not self.timing.enabled,
                 "--cuda-graph": self.timing.cuda_graph, "--no-baselines": not self.timing.baselines}
        return shlex.join(words + [flag for flag, on in flags.items() if on])

    def to_json(self, *, keep_seed: bool = False) -> dict:
        """JSON-ready fields. The seed is left out (a record's options say what was asked; the seed a run
        used is on its Result) unless `keep_seed` (the options sent to `kerneljudge serve`)."""
        data = dataclasses.asdict(self)
        data["cache_dir"] = str(self.cache_dir)
        data["store_path"] = str(self.store_path) if self.store_path else None
        data["problems_root"] = str(self.problems_root) if self.problems_root else None
        data["overrides"] = [list(kv) for kv in self.overrides]
        data["worker"].update({name: [str(p) for p in data["worker"][name]] for name in PATH_LISTS},
                              cache_dir=str(self.worker.cache_dir) if self.worker.cache_dir else None)
        if not keep_seed:
            data["check"]["seed"] = None
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Options":
        """The inverse of `to_json(keep_seed=True)`."""
        return cls().replace(**{**data, "cache_dir": Path(data["cache_dir"]),
                                "store_path": Path(data["store_path"]) if data["store_path"] else None,
                                "problems_root": Path(data["problems_root"]) if data.get("problems_root") else None,
                                "overrides": tuple(tuple(kv) for kv in data["overrides"]),
                                "worker": {**data["worker"], "sandbox_off": tuple(data["worker"].get("sandbox_off", ())),
                                           "cache_dir": Path(data["worker"]["cache_dir"])
                                           if data["worker"].get("cache_dir") else None,
                                           **{name: tuple(Path(p) for p in data["worker"].get(name, ()))
                                              for name in PATH_LISTS}}})


def _replaced(value, changes: dict, prefix: str):
    """dataclasses.replace, with an unknown field named as a UsageError."""
    known = [f.name for f in dataclasses.fields(value)]
    unknown = [name for name in changes if name not in known]
    if unknown:
        raise UsageError(f"unknown option {', '.join(prefix + u for u in unknown)}; the options are: "
                         + ", ".join(prefix + k for k in known))
    return dataclasses.replace(value, **changes)


def _field(options: Options, path: str):
    value = options
    for part in path.split("."):
        value = getattr(value, part)
    return value
