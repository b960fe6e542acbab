"""What a batch holds: Jobs from a KernelBench run folder, a folder of candidates for one problem, or a
JSONL manifest.

* A KernelBench run folder holds `level_<L>_problem_<P>_sample_<S>_kernel.py` files (what its
  generation scripts write); problem P of level L is resolved in a KernelBench checkout (`kernelbench`),
  else in the built-in suite.
* A folder of candidates: every `*.py` in it, judged against one `problem`.
* A manifest: one JSON object a line, `{"problem": ..., "solution": ..., "id": ..., "options": {...}}` (a solution
  `@cuda` names one a built-in problem ships, as `kerneljudge eval` takes it);
  paths relative to the manifest's folder; `problem` may be a name (`level1/19`); `options` change the
  run's options for that line (`{"check": {"trials": 3}}`); any other fields are copied to the results.

Every problem is read once (no torch, no candidate code); a problem that cannot be found or read is a
UsageError naming it, before anything runs.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from kerneljudge import suite
from kerneljudge.batch.backend import Job
from kerneljudge.batch.keys import job_key
from kerneljudge.candidate import file_sha256, load_candidate
from kerneljudge.errors import CandidateError, KernelJudgeError, UsageError
from kerneljudge.options import Options, Verb
from kerneljudge.pipeline import resolve_solution
from kerneljudge.problem import load_problem
from kerneljudge.records import Problem

RUN_FILE = re.compile(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py")
MANIFEST_FIELDS = ("problem", "solution", "id", "options")


@dataclass(frozen=True)
class Setting:
    """What every job of a batch shares: options, verb, device type and hardware (for the keys), and
    where KernelBench names resolve."""

    options: Options
    device_type: str
    hardware: str
    verb: Verb = "evaluate"
    kernelbench: Path | None = None  # a KernelBench checkout; None: the built-in suite


def discover(source: Path, setting: Setting, problem: str | None = None) -> list[Job]:
    """The jobs of `source` (a run folder, a candidates folder with `problem`, or a .jsonl manifest)."""
    source = Path(source)
    if source.is_file():
        if source.suffix != ".jsonl":
            raise UsageError(f"{source}: give a folder of candidates or a .jsonl manifest")
        return _unique(_manifest(source, setting))
    if not source.is_dir():
        raise UsageError(f"{source} is neither a folder nor a manifest file")
    files = sorted(source.glob("*.py"))
    run_files = [f for f in files if RUN_FILE.fullmatch(f.name)]
    if problem is None and run_files:
        return _unique(_run_folder(run_files, setting))
    if problem is None:
        raise UsageError(f"{source} holds no KernelBench run files (level_L_problem_P_sample_S_kernel.py): "
                         "give the PROBLEM its candidates solve (--problem)")
    loaded = _Problems(setting)
    return _unique([_job(f.stem, loaded.get(problem), f, setting.options, setting) for f in files])


class _Problems:
    """Problems read once per reference and options."""

    def __init__(self, setting: Setting):
        self.setting = setting
        self.loaded: dict[tuple, Problem] = {}

    def get(self, ref: str, options: Options | None = None) -> Problem:
        options = options or self.setting.options
        key = (ref, options.preset, options.overrides)
        if key not in self.loaded:
            self.loaded[key] = load_problem(ref, preset=options.preset, overrides=options.overrides,
                                            small_if_builtin=self.setting.device_type == "cpu",
                                            problems_root=self.setting.kernelbench)
        return self.loaded[key]


def _run_folder(files: list[Path], setting: Setting) -> list[Job]:
    loaded = _Problems(setting)
    jobs = []
    for path in files:
        level, number, sample = map(int, RUN_FILE.fullmatch(path.name).groups())
        ref = f"level{level}/{number}"
        if setting.kernelbench is None and suite.find_builtin(ref) is None:
            raise UsageError(f"{path.name}: problem {ref} is not in the built-in suite; give a KernelBench "
                             "checkout (--kernelbench)")
        jobs.append(_job(f"level{level}/{number}/sample{sample}", loaded.get(ref), path, setting.options, setting,
                         level=level, problem_id=number, sample_id=sample))
    return jobs


def _manifest(path: Path, setting: Setting) -> list[Job]:
    entries = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                entries.append((f"{path.name} line {number}", f"line{number}", json.loads(line)))
            except ValueError as exc:
                raise UsageError(f"{path.name} line {number} is not JSON: {exc}") from exc
    return _entries(entries, path.parent, setting)


def entries_to_jobs(entries: Iterable[dict], setting: Setting, base: Path = Path(".")) -> list[Job]:
    """Jobs from manifest entries given as dicts ({problem, solution, id, options}; the API's batches)."""
    return _unique(_entries([(f"entry {i}", str(i), entry) for i, entry in enumerate(entries)], base, setting))


def _entries(entries: list[tuple[str, str, Any]], base: Path, setting: Setting) -> list[Job]:
    """(where, default id, entry) -> Jobs; paths relative to `base`."""
    loaded = _Problems(setting)
    jobs = []
    for where, default_id, entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("problem"), (str, Path)) or \
                not isinstance(entry.get("solution"), (str, Path)):
            raise UsageError(f"{where}: a manifest entry is an object with \"problem\" and \"solution\" strings")
        options = setting.options
        if entry.get("options"):
            if not isinstance(entry["options"], dict):
                raise UsageError(f"{where}: \"options\" is an object of option changes")
            options = options.replace(**entry["options"]).validate()
        ref = str(entry["problem"])
        local = base / ref
        problem = loaded.get(str(local) if local.is_file() else ref, options)
        level, number_id = _numbers(ref) if suite.is_short_name(ref) else (None, None)
        jobs.append(_job(str(entry.get("id") or default_id), problem, _solution(where, entry["solution"], problem,
                                                                                setting, base), options, setting,
                         level=level, problem_id=number_id,
                         labels={k: v for k, v in entry.items() if k not in MANIFEST_FIELDS}))
    return jobs


def _solution(where: str, given: str | Path, problem: Problem, setting: Setting, base: Path) -> Path:
    """An entry's solution: a path (relative to the manifest's folder), or `@variant`, a solution the built-in
    problem ships (as `kerneljudge eval l2/51 @cuda`)."""
    if not str(given).startswith("@"):
        return base / given
    try:
        return resolve_solution(given, problem, setting.device_type)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _numbers(ref: str) -> tuple[int, int]:
    level, number = re.match(r"(?:level|l)(\d+)/(\d+)", ref, re.IGNORECASE).groups()
    return int(level), int(number)


def _job(job_id: str, problem: Problem, solution: Path, options: Options, setting: Setting, **named) -> Job:
    """A job; an unreadable candidate is still a job (the pipeline reports it as an error result)."""
    try:
        candidate = load_candidate(solution)
        sha256, kinds = candidate.sha256, candidate.kinds
    except (CandidateError, KernelJudgeError):  # keyed by its content where it has one (a fixed file is new)
        sha256, kinds = file_sha256(solution) or "unreadable:" + str(solution), ()
    options = options.replace(store_path=None)
    return Job(id=job_id, problem=str(problem.path), solution=Path(solution).resolve(), options=options,
               key=job_key(problem, sha256, options, setting.hardware, setting.verb), verb=setting.verb,
               kinds=tuple(kinds), sha256=sha256, problem_json=problem.to_json(), **named)


def _unique(jobs: list[Job]) -> list[Job]:
    """The jobs, their ids checked unique; a job without KernelBench's sample id gets its place among its
    problem's jobs (so eval_results.json numbers a batch's samples the same way in every run)."""
    seen: set[str] = set()
    for job in jobs:
        if job.id in seen:
            raise UsageError(f"two candidates of the batch have the id {job.id!r}")
        seen.add(job.id)
    places: dict[str, int] = {}
    numbered = []
    for job in jobs:
        if job.sample_id is None:
            place = places[job.problem] = places.get(job.problem, -1) + 1
            job = dataclasses.replace(job, sample_id=place)
        numbered.append(job)
    return numbered
