"""The Python API: the verbs agents and scripts use, each returning a Result.

    evaluate(problem, solution, options)  everything: check, probes, timing
    check(problem, solution, options)     correctness and integrity, no timing (run_correctness)
    bench(problem, solution, options)     timing, after the checks that make a time meaningful
    submit(problem, solution, options)    evaluate plus a hidden re-check with secret seeds; recorded
    evaluate_many(pairs, options)         many candidates on the batch scheduler: an iterator of results

Each takes `pool=` (an isolation.WorkerPool) to run on pre-started workers when evaluating many
candidates in a row, and `on_progress=` to be told what each stage is doing (progress.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Iterator

from kerneljudge.batch.backend import Finished
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


def evaluate_many(pairs: Iterable[tuple[str | Path, str | Path] | dict], options: Options | None = None, *,
                  verb: str = "evaluate", lanes: int | None = None, lanes_per_gpu: int = 1,
                  build_jobs: int | None = None,
                  journal_dir: str | Path | None = None, force: bool = False, **changes) -> Iterator[Finished]:
    """Judge many candidates on the batch scheduler (`kerneljudge run`'s): builds on every CPU, one lane
    per GPU (`lanes`: how many; on a CPU run, CPU lanes; `lanes_per_gpu` to overlap one candidate's checks
    with another's, timings still alone), each lane taking the next built candidate.
    `pairs` are (problem, solution) tuples or manifest entries ({problem, solution, id, options}).
    Yields a `batch.Finished` per candidate as it ends (`.job.id`: the entry's id, else its index as a
    string; `.result`: the Result). With `journal_dir`, what an earlier call finished is skipped. Leaving
    the loop early stops what is in flight."""
    from kerneljudge.batch.runner import local_batch

    options = (options or Options()).replace(**changes)
    entries = [p if isinstance(p, dict) else {"problem": p[0], "solution": p[1]} for p in pairs]
    with local_batch(entries, options, verb=verb, lanes=lanes, lanes_per_gpu=lanes_per_gpu, build_jobs=build_jobs,
                     force=force,
                     journal_dir=Path(journal_dir) if journal_dir is not None else None) as batch:
        for finished, _ in batch:
            yield finished
