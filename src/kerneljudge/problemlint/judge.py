"""The judge's side of the problem lint: which problems, at which sizes, one referee for all, the cache,
and the notice every evaluation carries (no torch here).

Sizes: `--preset`/`--set` as given; else the problem's `small` preset when it has one; else the file's
sizes lowered in the referee until a forward fits a laptop's budget (sizes.py). Every result says which
sizes it ran at, since several findings depend on them (a softmax's outputs shrink with its width).

The evaluation notice (`problem-degenerate`) looks the problem up in the cache folder by its content,
its sizes and the device type; on a miss the evaluation's referee lints it once (at the evaluation's
sizes, untimed) and the judge writes the entry. It is a warning: verdicts never depend on it.
"""

from __future__ import annotations

import re
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kerneljudge import cache, protocol, suite
from kerneljudge.errors import KernelJudgeError, UsageError
from kerneljudge.isolation import REFEREE, WorkerFailure, WorkerProcess
from kerneljudge.options import Options, WorkerOptions
from kerneljudge.problem import load_problem
from kerneljudge.problemlint.static import unreachable_sizes
from kerneljudge.records import Finding, Problem

VERSION = 2  # part of every cache key: a change to the analysis invalidates old entries
SECTION = "problemlint"
STAGE = "problem-lint"
#: What makes a passing or failing verdict on this problem mean less (the notice names these).
DEGENERATE = frozenset({"problem-trivial-output", "problem-insensitive-seed", "problem-insensitive-input",
                        "problem-insensitive-parameter", "problem-tiny-output", "problem-saturated",
                        "problem-nonfinite", "problem-nondeterministic", "problem-redundant-op",
                        "problem-algebraic-collapse"})


@dataclass(frozen=True)
class ProblemLint:
    """One problem's lint: where it ran, at which sizes, what it found, and the facts behind it."""

    name: str
    path: str
    constants: dict  # the sizes linted at
    shrunk: dict  # name -> [given, linted at] where the sizes were lowered
    preset: str | None
    findings: tuple[Finding, ...]
    facts: dict = field(default_factory=dict)
    lint_ms: float = 0.0

    @property
    def flagged(self) -> bool:
        return any(f.severity != "info" for f in self.findings)

    @property
    def sizes(self) -> str:
        """The sizes in words, for the report."""
        if self.shrunk:
            changed = ", ".join(f"{k}={v[1]} (file: {v[0]})" for k, v in self.shrunk.items())
            return f"lowered to fit the lint budget: {changed}"
        if self.preset:
            return f"preset {self.preset!r}"
        return "the problem's own sizes" + ("" if self.constants else " (no size constants)")

    def to_json(self) -> dict:
        return {"name": self.name, "path": self.path, "constants": self.constants, "shrunk": self.shrunk,
                "preset": self.preset, "sizes": self.sizes, "flagged": self.flagged,
                "findings": [f.to_json() for f in self.findings], "facts": self.facts, "lint_ms": self.lint_ms}


def expand(refs: tuple[str, ...]) -> list[str | Path]:
    """Problem references with folders replaced by their problem files (a KernelBench layout, or a folder
    of `N_Name.py` files such as `level1/`), in level and number order."""
    found: list[str | Path] = []
    for ref in refs:
        path = Path(ref).expanduser()
        if not path.is_dir():
            found.append(ref)
            continue
        files = [entry.path for entry in suite.list_problems(path)] or sorted(
            path.glob("*.py"), key=lambda p: (int(p.name.split("_")[0]) if p.name.split("_")[0].isdigit() else 0,
                                              p.name))
        if not files:
            raise UsageError(f"{ref}: no problem files in this folder")
        found.extend(files)
    return found


def display_name(problem: Problem) -> str:
    """level1/23_Softmax for a file in a levelN folder, else the problem's own name."""
    parent = problem.path.parent.name
    return f"{parent}/{problem.path.stem}" if not problem.builtin and re.fullmatch(r"level\d+", parent) \
        else problem.name


def _wire(problem: Problem) -> dict:
    return {"path": str(problem.path), "source": problem.source, "constants": problem.constants}


def _findings(data: list[dict]) -> tuple[Finding, ...]:
    """Findings rebuilt from the referee's data, with the judge's own catalog's severity and fix."""
    return tuple(Finding.of(f["code"], f["message"], stage=STAGE, **f.get("details", {})) for f in data)


def _key(problem: Problem, shrink: bool, device: str) -> str:
    return cache.key(VERSION, problem.sha256, problem.constants, shrink, device.split(":")[0])


def lint_problems(refs: tuple[str, ...], options: Options, *, full: bool = False, timed: bool = True,
                  on_result: Callable[[ProblemLint], None] = lambda result: None) -> list[ProblemLint]:
    """Lint each problem in one referee (started again if a problem kills it); `full`: the file's own
    sizes, never lowered. Each result goes to `on_result` as soon as it is known."""
    from kerneljudge.pipeline import resolve_device

    device = resolve_device(options.device)
    results: list[ProblemLint] = []
    with ExitStack() as stack:
        referee: WorkerProcess | None = None
        for ref in expand(refs):
            started = time.perf_counter()
            try:
                problem = load_problem(ref, preset=options.preset, overrides=options.overrides,
                                       problems_root=options.problems_root)
                if problem.preset is None and not full and "small" in problem.presets and not options.overrides:
                    problem = load_problem(problem.path, preset="small")
            except KernelJudgeError as exc:
                results.append(_skipped(str(ref), str(ref), f"not loaded: {exc}", started))
                on_result(results[-1])
                continue
            if referee is None or referee.dead:
                referee = stack.enter_context(_start(options.worker, device))
                started = time.perf_counter()  # the referee's start (importing torch) is not this problem's
            shrink = not full and problem.preset is None and not options.overrides
            result = _lint_one(problem, referee, shrink, timed, started)
            if not any(f.code == "problem-lint-skipped" for f in result.findings):  # else tried again next time
                cache.save(options.cache_dir, SECTION, _key(problem, shrink, device), result.to_json())
            results.append(result)
            on_result(result)
    return results


@contextmanager
def _start(worker: WorkerOptions, device: str):
    """A started referee on `device` (a usage error if the device is not there)."""
    with WorkerProcess(worker, module=REFEREE) as referee:
        try:
            reply = referee.call(protocol.Ping(device, worker.memory_limit_mb))
        except WorkerFailure as failure:
            raise KernelJudgeError(f"the referee could not start: {failure.finding.message}") from failure
        if reply.get("usage_error"):
            raise UsageError(reply["usage_error"])
        yield referee


def _lint_one(problem: Problem, referee: WorkerProcess, shrink: bool, timed: bool, started: float) -> ProblemLint:
    static = list(_findings(unreachable_sizes(problem.source, str(problem.path))))
    referee.deadline = referee.clock() + referee.options.timeout_s  # each problem has the whole limit
    try:
        reply = referee.call(protocol.LintProblem(_wire(problem), shrink=shrink, timed=timed))
    except WorkerFailure as failure:
        return _skipped(display_name(problem), str(problem.path), failure.finding.message, started, problem, static)
    if "error" in reply:
        first = reply["error"].split("\n")[0]
        return _skipped(display_name(problem), str(problem.path), f"the problem raised: {first}", started, problem, static)
    facts = reply["facts"]
    return ProblemLint(display_name(problem), str(problem.path), facts["constants"], facts["shrunk"], problem.preset,
                       tuple(static) + _findings(reply["findings"]), facts,
                       round((time.perf_counter() - started) * 1e3, 1))


def _skipped(name: str, path: str, why: str, started: float, problem: Problem | None = None,
             static: list[Finding] | None = None) -> ProblemLint:
    finding = Finding.of("problem-lint-skipped", f"not linted: {why}", stage=STAGE)
    return ProblemLint(name, path, problem.constants if problem else {}, {}, problem.preset if problem else None,
                       tuple(static or ()) + (finding,), {}, round((time.perf_counter() - started) * 1e3, 1))


def evaluation_notice(problem: Problem, options: Options, device: str, referee: WorkerProcess) -> list[Finding]:
    """The `problem-degenerate` warning for the problem being judged: from the cache, or linted once in the
    evaluation's referee at sizes lowered to the lint's budget, as `kerneljudge lint-problem` does by
    default (the same cache entry): cheap and bounded whatever the evaluation's sizes, so a full-size
    problem's lint never holds up or ends its evaluation. A problem whose sizes stay large once lowered
    (literal sizes, sizes.EVALUATION_SCALE), or whose size the meta device cannot tell, is not linted here: an
    info finding says so and where to lint it.
    A problem the lint cannot run gets no notice."""
    key = _key(problem, True, device)
    entry = cache.load(options.cache_dir, SECTION, key)
    if entry is None:
        reply = referee.call(protocol.LintProblem(_wire(problem), shrink=True, bounded=True))
        if "error" in reply:
            return []
        entry = {"findings": [Finding.of(f["code"], f["message"], stage=STAGE, **f.get("details", {})).to_json()
                              for f in reply["findings"]]}
        if reply.get("skipped"):  # kept apart from the findings: `lint-problem` run alone writes this entry too
            entry["skipped"] = reply["skipped"]
        cache.save(options.cache_dir, SECTION, key, entry)
    if entry.get("skipped"):
        return [Finding.of("problem-lint-skipped", f"the problem was not linted in this evaluation: "
                           f"{entry['skipped']}. `kerneljudge lint-problem {problem.path}` lints it on its own",
                           stage=STAGE)]
    flagged = [f for f in entry["findings"] if f["code"] in DEGENERATE]
    if not flagged:
        return []
    said = "; ".join(f"{f['code'].removeprefix('problem-')}: {f['message']}" for f in flagged[:4])
    more = f" (and {len(flagged) - 4} more)" if len(flagged) > 4 else ""
    return [Finding.of("problem-degenerate", f"this problem is degenerate or redundant: {said}{more}. "
                       f"The verdict stands; `kerneljudge lint-problem {problem.path}` explains",
                       stage=STAGE, lint=[{"code": f["code"], "message": f["message"]} for f in flagged])]
