"""The Python API: the verbs agents and scripts use, each returning a Result.

    evaluate(problem, solution, options)  everything: check, probes, timing
    check(problem, solution, options)     correctness and integrity, no timing (run_correctness)
    bench(problem, solution, options)     timing, after the checks that make a time meaningful
    submit(problem, solution, options)    evaluate plus a hidden re-check with secret seeds; recorded

Each takes `pool=` (an isolation.WorkerPool) to run on pre-started workers when evaluating many
candidates in a row, and `on_progress=` to be told what each stage is doing (progress.py).
"""

from __future__ import annotations

from pathlib import Path

from kerneljudge.isolation import WorkerPool
from kerneljudge.options import Options
from kerneljudge.pipeline import evaluate as _evaluate
from kerneljudge.progress import ProgressObserver, ignore
from kerneljudge.records import Result


def evaluate(problem: str | Path, solution: str | Path | None = None, options: Options | None = None, *,
             pool: WorkerPool | None = None, on_progress: ProgressObserver = ignore, **changes) -> Result:
    """Judge `solution` against `problem`. Keyword changes adjust the options: top-level fields as is
    (`device="cpu"`), nested groups as dicts (`check={"trials": 3}`, `timing={"enabled": False}`)."""
    options = (options or Options()).replace(**changes)
    return _evaluate(problem, solution, options, verb="evaluate", pool=pool, on_progress=on_progress)


def check(problem: str | Path, solution: str | Path | None = None, options: Options | None = None, *,
          pool: WorkerPool | None = None, on_progress: ProgressObserver = ignore, **changes) -> Result:
    """Correctness and integrity only."""
    options = (options or Options()).replace(**changes)
    return _evaluate(problem, solution, options.replace(timing={"enabled": False}), verb="check", pool=pool,
                     on_progress=on_progress)


def bench(problem: str | Path, solution: str | Path | None = None, options: Options | None = None, *,
          pool: WorkerPool | None = None, on_progress: ProgressObserver = ignore, **changes) -> Result:
    """Timing against the baselines, always after the full check and probes (a time of a wrong or
    dishonest kernel means nothing): `evaluate` with timing forced on, recorded as "bench"."""
    options = (options or Options()).replace(**changes)
    return _evaluate(problem, solution, options.replace(timing={"enabled": True}), verb="bench", pool=pool,
                     on_progress=on_progress)


def submit(problem: str | Path, solution: str | Path | None = None, options: Options | None = None, *,
           pool: WorkerPool | None = None, on_progress: ProgressObserver = ignore, **changes) -> Result:
    """The full strict evaluation plus a hidden re-check; the verdict is recorded."""
    options = (options or Options()).replace(**changes)
    return _evaluate(problem, solution, options.replace(hidden_recheck=True, protocol="strict"), verb="submit",
                     pool=pool, on_progress=on_progress)
