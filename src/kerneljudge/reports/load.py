"""From the results store to the samples the metrics read: which runs, which records, which baseline.

A report is about runs (`Store.runs`, the `run_id` column): by default the newest one. Each record of a
run becomes one `metrics.Sample`; the problem key ("level2/51") is what problems are matched on across
runs, so a KernelBench import named by problem id and a batch run named by file stem still line up.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any, Iterable

from kerneljudge.errors import KernelJudgeError
from kerneljudge.findings import CATALOG
from kerneljudge.reports.metrics import Sample

BASELINES = ("eager", "compile")
_LEVEL_NAME = re.compile(r"^level_?(\d+)$", re.IGNORECASE)


def level_of(problem: dict[str, Any]) -> str:
    """The KernelBench level of a recorded problem: from its name (`level2/51_...`), else from the folder
    its file is in (`.../level2/51_....py`); "?" when neither says."""
    head = (problem.get("name") or "").partition("/")[0]
    match = _LEVEL_NAME.match(head) or _LEVEL_NAME.match(PurePath(problem.get("path") or "").parent.name)
    return match.group(1) if match else "?"


def problem_key(problem: dict[str, Any]) -> str:
    """`level2/51` for a problem whose level and number are known, else its recorded name."""
    name = problem.get("name") or "?"
    number = re.match(r"^(\d+)(?:_|$)", name.rpartition("/")[2])
    level = level_of(problem)
    return f"level{level}/{number.group(1)}" if number and level != "?" else name


def failure_codes(findings: Iterable[dict[str, Any]]) -> tuple[str, ...]:
    """The codes of the findings that failed the candidate or stopped its judging, in order, once each."""
    codes: list[str] = []
    for finding in findings:
        code = finding.get("code")
        severity = CATALOG[code].severity if code in CATALOG else finding.get("severity")
        if severity in ("fail", "error") and code not in codes:
            codes.append(code)
    return tuple(codes)


def sample_of(record: dict[str, Any], baseline: str) -> Sample:
    """One store record (`Store.get`) as a Sample, its speedup against `baseline`."""
    result = record["result"]
    problem = result.get("problem") or {}
    timing = result.get("timing") or {}
    candidate = timing.get("candidate") or {}
    speedup = (timing.get("speedup") or {}).get(baseline)
    details = next((f.get("details") or {} for f in result.get("findings", ()) if f.get("code") == "kernelbench-verdict"),
                   {})
    return Sample(
        record_id=record["id"], problem=problem_key(problem), name=problem.get("name") or "?",
        level=level_of(problem), correct=bool(record["correct"]), verdict=record["verdict"],
        speedup=speedup if isinstance(speedup, (int, float)) and speedup > 0 else None,
        median_ms=candidate.get("median_ms"), mean_ms=candidate.get("mean_ms"), sem_ms=candidate.get("sem_ms"),
        percent_of_light=(timing.get("floor") or {}).get("percent_of_light"),
        failure_codes=failure_codes(result.get("findings", ())), candidate_sha256=record["candidate_sha256"],
        device=record.get("device_name") or record.get("device_type"), sample_id=details.get("sample_id"))


def resolve_runs(store, runs: Iterable[str]) -> list[str]:
    """The run ids asked for, or the newest run of the store."""
    runs = list(runs)
    if runs:
        return runs
    newest = store.runs(limit=1)
    if not newest:
        raise KernelJudgeError(f"the results store {store.path} holds no run: a run is what `kerneljudge batch` "
                               "or `kerneljudge report import-kernelbench` records; name one with RUN")
    return [newest[0]["run_id"]]


def load_records(store, runs: Iterable[str], limit: int = 1_000_000) -> list[dict[str, Any]]:
    """The complete records of the runs, oldest first; an unknown run is an error naming the known ones."""
    records = []
    for run in runs:
        summaries = store.history(run_id=run, limit=limit)
        if not summaries:
            known = ", ".join(r["run_id"] for r in store.runs(limit=10)) or "none"
            raise KernelJudgeError(f"no records of run {run!r} in the results store {store.path} "
                                   f"(newest runs: {known})")
        records += [store.get(s["id"]) for s in reversed(summaries)]
    return records


def load_samples(store, runs: Iterable[str], baseline: str) -> list[Sample]:
    """The samples of the runs (their records, oldest first), speedups against `baseline`."""
    if baseline not in BASELINES:
        raise KernelJudgeError(f"--baseline must be one of {', '.join(BASELINES)}, not {baseline!r}")
    return [sample_of(record, baseline) for record in load_records(store, runs)]
