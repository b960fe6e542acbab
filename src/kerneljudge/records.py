"""The typed values that pass between the stages: Problem, Candidate, Build, Trial, Finding, Timing, Result.

They are plain frozen dataclasses with `to_json()` so that the worker process can send them to the judge
as data, the store can keep them, and agents can read them. `None` always means "not measured".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from kerneljudge.findings import CATALOG, Severity, spec

Verdict = Literal["pass", "fail", "error"]


@dataclass(frozen=True)
class Finding:
    """One observation about the candidate: a stable code, its severity, what happened and the fix."""

    code: str
    severity: Severity
    message: str
    fix: str
    stage: str
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, code: str, message: str, *, stage: str, **details: Any) -> "Finding":
        entry = spec(code)
        return cls(code, entry.severity, message, entry.fix, stage, details)

    @property
    def blocking(self) -> bool:
        return spec(self.code).blocking

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Finding":
        """The severity comes from the catalog (records stored before blocking findings were named
        "error" say "fail" for them)."""
        code = data["code"]
        severity = spec(code).severity if code in CATALOG else data["severity"]
        return cls(code, severity, data["message"], data["fix"], data["stage"], dict(data.get("details") or {}))


@dataclass(frozen=True)
class Problem:
    """A reference problem, read as text: the judge never imports it (workers do)."""

    name: str  # "level2/51_Gemm_..." for a built-in problem, else the file stem
    path: Path
    source: str
    sha256: str
    constants: dict[str, int | float]  # module-level size constants, after preset and overrides
    overrides: dict[str, int | float]  # what differs from the file's own values
    preset: str | None
    presets: tuple[str, ...]  # the presets the file offers
    builtin: bool

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "sha256": self.sha256,
                "constants": self.constants, "overrides": self.overrides, "preset": self.preset}


@dataclass(frozen=True)
class Candidate:
    """A candidate solution, read as text; `kinds` are what it builds on (from its imports and calls)."""

    path: Path
    source: str
    sha256: str
    kinds: tuple[str, ...]  # subset of ("cpp", "cuda", "triton"); empty: plain PyTorch

    @property
    def label(self) -> str:
        return "+".join(self.kinds) if self.kinds else "pytorch"

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "sha256": self.sha256, "kinds": list(self.kinds), "label": self.label}


@dataclass(frozen=True)
class Build:
    """What importing (and so compiling) the candidate cost."""

    build_ms: float
    cache: Literal["hit", "miss", "none"]  # "none": nothing to compile
    cache_key: str | None
    extensions: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Trial:
    """One correctness trial: fresh inputs from a fresh seed, errors against float64."""

    index: int
    passed: bool
    max_abs_err: float | None = None
    mean_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    compared_to: Literal["float64", "native"] | None = None
    mismatched: int | None = None  # elements beyond tolerance
    worst_index: tuple[int, ...] | None = None
    message: str | None = None
    elements: int | None = None  # elements compared (all outputs)
    worst: tuple[dict[str, Any], ...] = ()  # the elements that miss the tolerance by most: index, expected, got, abs_err

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Trial":
        data = dict(data)
        if data.get("worst_index") is not None:
            data["worst_index"] = tuple(data["worst_index"])
        data["worst"] = tuple(data.get("worst") or ())
        return cls(**data)


@dataclass(frozen=True)
class Result:
    """The answer for one candidate: verdict, evidence, timing, and where the time went."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    trials: tuple[Trial, ...]
    problem: dict[str, Any]
    candidate: dict[str, Any]
    device: dict[str, Any]
    versions: dict[str, str]
    protocol: str
    build: Build | None = None
    timing: dict[str, Any] | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)
    seed: int | None = None  # the run's seed (trial seeds derive from it); never a hidden re-check's
    worker_output_tail: str | None = None
    probes: dict[str, Any] = field(default_factory=dict)  # what the probes saw: op trace, streams
    reproduce: str | None = None  # the kerneljudge command that runs this evaluation again, same seed
    memory: dict[str, Any] = field(default_factory=dict)  # peaks per process and device, footprint (stages/memory)
    sandbox: dict[str, Any] = field(default_factory=dict)  # the worker's sandbox: active and inactive layers

    @property
    def correct(self) -> bool:
        """Every trial passed and nothing failed: the same as a "pass" verdict."""
        return self.verdict == "pass"

    @property
    def speedup(self) -> dict[str, float] | None:
        return (self.timing or {}).get("speedup")

    @property
    def exit_code(self) -> int:
        return {"pass": 0, "fail": 1, "error": 2}[self.verdict]

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "correct": self.correct,
            "findings": [f.to_json() for f in self.findings],
            "trials": [t.to_json() for t in self.trials],
            "timing": self.timing,
            "speedup": self.speedup,
            "problem": self.problem,
            "candidate": self.candidate,
            "device": self.device,
            "versions": self.versions,
            "protocol": self.protocol,
            "build": self.build.to_json() if self.build else None,
            "stage_ms": self.stage_ms,
            "seed": self.seed,
            "reproduce": self.reproduce,
            "worker_output_tail": self.worker_output_tail,
            "probes": self.probes,
            "memory": self.memory,
            "sandbox": self.sandbox,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Result":
        build = data.get("build")
        return cls(
            verdict=data["verdict"],
            findings=tuple(Finding.from_json(f) for f in data.get("findings", [])),
            trials=tuple(Trial.from_json(t) for t in data.get("trials", [])),
            problem=data.get("problem", {}), candidate=data.get("candidate", {}),
            device=data.get("device", {}), versions=data.get("versions", {}),
            protocol=data.get("protocol", "strict"),
            build=Build(**{**build, "extensions": tuple(build.get("extensions", ()))}) if build else None,
            timing=data.get("timing"), stage_ms=data.get("stage_ms", {}), seed=data.get("seed"),
            worker_output_tail=data.get("worker_output_tail"), probes=data.get("probes") or {},
            reproduce=data.get("reproduce"), memory=data.get("memory") or {}, sandbox=data.get("sandbox") or {},
        )


def decide_verdict(findings: tuple[Finding, ...] | list[Finding], trials: tuple[Trial, ...] | list[Trial]) -> Verdict:
    """error if the candidate could not be judged; fail on any failing finding or trial; else pass."""
    if any(f.blocking for f in findings):
        return "error"
    if not trials or not all(t.passed for t in trials) or any(f.severity == "fail" for f in findings):
        return "fail"
    return "pass"


def jsonsafe(value: Any) -> Any:
    """Strict JSON: non-finite floats become None (JSON has no Infinity or NaN)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {k: jsonsafe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonsafe(v) for v in value]
    return value
