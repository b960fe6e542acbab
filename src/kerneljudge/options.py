"""Every option of an evaluation, with its default, in one place.

The CLI, the Python API and the MCP server all build one `Options` value and pass it down; nothing
reads globals or environment variables behind its back (the environment is read here, once, for the
two locations that are documented as overridable by environment variables).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Protocol = Literal["strict", "kernelbench"]

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
    base = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")).expanduser()
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


def default_problems_root() -> Path | None:
    """Where `levelN/ID` names resolve: a KernelBench checkout in $KERNELJUDGE_PROBLEMS_ROOT, else the
    built-in suite (None)."""
    env = os.environ.get("KERNELJUDGE_PROBLEMS_ROOT")
    return Path(env).expanduser().resolve() if env else None


@dataclass(frozen=True)
class CheckOptions:
    """Correctness: how many trials, which tolerance, which seed."""

    trials: int = 5
    atol: float | None = None  # None: from the output dtype (DEFAULT_TOLERANCE)
    rtol: float | None = None
    seed: int | None = None  # None: a secret random seed per run


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
    checked_calls: int = 16  # timed outputs compared with the reference, at secret random positions
    cuda_graph: bool = False
    baselines: bool = True  # time the reference eager and under torch.compile
    compile_baseline: bool = True


@dataclass(frozen=True)
class WorkerOptions:
    """Isolation limits for the worker process that runs candidate code."""

    timeout_s: float = 300.0  # whole worker lifetime, build included (a cold CUDA build takes ~1 min)
    memory_limit_mb: int | None = None  # None: 75% of RAM on a CPU run; no address-space limit on GPUs


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

    def replace(self, **changes) -> "Options":
        """A copy with some fields changed; nested groups take dicts (`check={"trials": 3}`)."""
        for name in ("check", "timing", "worker"):
            if isinstance(changes.get(name), dict):
                changes[name] = dataclasses.replace(getattr(self, name), **changes[name])
        return dataclasses.replace(self, **changes)

    def to_json(self, *, keep_seed: bool = False) -> dict:
        """JSON-ready fields. The seed is left out (a secret seed is never written out with a record)
        unless `keep_seed` (the options sent to `kerneljudge serve` for the evaluation itself)."""
        data = dataclasses.asdict(self)
        data["cache_dir"] = str(self.cache_dir)
        data["store_path"] = str(self.store_path) if self.store_path else None
        data["problems_root"] = str(self.problems_root) if self.problems_root else None
        data["overrides"] = [list(kv) for kv in self.overrides]
        if not keep_seed:
            data["check"]["seed"] = None
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Options":
        """The inverse of `to_json(keep_seed=True)`."""
        return cls().replace(**{**data, "cache_dir": Path(data["cache_dir"]),
                                "store_path": Path(data["store_path"]) if data["store_path"] else None,
                                "problems_root": Path(data["problems_root"]) if data.get("problems_root") else None,
                                "overrides": tuple(tuple(kv) for kv in data["overrides"])})
