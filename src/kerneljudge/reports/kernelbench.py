"""KernelBench results in: an `eval_results.json` and its run folder become a run in the results store,
and the candidates KernelBench and the strict judge disagree on are listed with the reason.

KernelBench's `scripts/eval_from_generations.py` writes `{problem_id: [{sample_id, compiled, correctness,
metadata, runtime, runtime_stats}]}` (older releases: one dict per problem instead of a list), and keeps
the kernels it judged in the run folder as `level_{L}_problem_{P}_sample_{S}_kernel.py`. Each sample is
recorded as one store record (protocol "kernelbench", its verdict KernelBench's: pass when correct, error
when not compiled, else fail), with KernelBench's own fields kept whole in a `kernelbench-verdict`
finding. The candidate's sha256 is that of the kernel file's text, as for a judged candidate, so a strict
evaluation of the same file (`kerneljudge batch`, `eval`) joins with it.

KernelBench times against baselines it measured elsewhere (`results/timing/<hardware>/baseline_time_*.json`,
`{"level1": {"19_ReLU.py": {"mean": ms, ...}}}`); given such files, the speedup is their mean over the
candidate's mean, as KernelBench computes it.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from kerneljudge.errors import KernelJudgeError
from kerneljudge.records import Finding, Result
from kerneljudge.reports.load import failure_codes
from kerneljudge.reports.tables import Table

_KERNEL = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
#: KernelBench's metadata keys that say why a sample failed, in the order they are looked at.
_WHY_KEYS = ("compilation_error", "runtime_error", "correctness_issue", "max_difference", "other_error")


def read_eval_results(path: Path) -> list[dict[str, Any]]:
    """The samples of an eval_results.json, each with its `problem_id` (int) added."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise KernelJudgeError(f"cannot read KernelBench results {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise KernelJudgeError(f"{path} is not a KernelBench eval_results.json (a JSON object keyed by problem id)")
    samples = []
    for problem_id, entries in data.items():
        for entry in entries if isinstance(entries, list) else [entries]:
            if not str(problem_id).isdigit() or not isinstance(entry, dict) or "correctness" not in entry:
                raise KernelJudgeError(f"{path}: problem {problem_id!r} is not in KernelBench's layout "
                                       "({problem_id: [{sample_id, compiled, correctness, ...}]})")
            samples.append({**entry, "problem_id": int(problem_id), "sample_id": int(entry.get("sample_id", 0))})
    return samples


def kernel_files(run_folder: Path) -> dict[tuple[int, int], tuple[int, Path]]:
    """(problem_id, sample_id) -> (level, kernel file) for the kernels of a KernelBench run folder."""
    found = {}
    for path in sorted(Path(run_folder).glob("level_*_problem_*_sample_*_kernel.py")):
        match = _KERNEL.match(path.name)
        if match:
            level, problem, sample = map(int, match.groups())
            found[(problem, sample)] = (level, path)
    return found


def problem_file(problems_dir: Path | None, level: int, problem_id: int) -> Path | None:
    """The problem file `level{L}/{P}_*.py` of a KernelBench folder, if it has one."""
    if problems_dir is None:
        return None
    matches = sorted((Path(problems_dir) / f"level{level}").glob(f"{problem_id}_*.py"))
    return matches[0] if matches else None


def read_baselines(files: dict[str, Path]) -> dict[str, dict]:
    """KernelBench baseline-time files by baseline name (eager, compile)."""
    out = {}
    for name, path in files.items():
        try:
            out[name] = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise KernelJudgeError(f"cannot read the KernelBench baseline times {path}: {exc}") from exc
    return out


def _baseline_ms(table: dict, level: int, problem_id: int) -> float | None:
    for file_name, stats in (table.get(f"level{level}") or {}).items():
        if file_name.split("_", 1)[0] == str(problem_id) and isinstance(stats, dict):
            mean = stats.get("mean")
            return float(mean) if isinstance(mean, (int, float)) and mean > 0 else None
    return None


def to_result(sample: dict[str, Any], level: int, source: str, kernel: Path, problem: Path | None,
              baselines: dict[str, dict]) -> Result:
    """One KernelBench sample as a Result whose verdict is KernelBench's."""
    problem_id = sample["problem_id"]
    stats = sample.get("runtime_stats") or {}
    runtime = sample.get("runtime")
    timed = isinstance(runtime, (int, float)) and runtime > 0
    verdict = "pass" if sample["correctness"] else "fail" if sample.get("compiled") else "error"
    kept = {k: sample.get(k) for k in ("sample_id", "compiled", "correctness", "metadata", "runtime", "runtime_stats")}
    findings = [Finding.of("kernelbench-verdict", f"KernelBench: compiled={sample.get('compiled')}, "
                           f"correctness={sample['correctness']}, runtime={runtime}", stage="import", **kept)]
    if verdict != "pass":
        code = "kernelbench-incorrect" if verdict == "fail" else "kernelbench-not-compiled"
        findings.append(Finding.of(code, why_kernelbench_failed(sample.get("metadata") or {}), stage="import"))
    base = {name: _baseline_ms(table, level, problem_id) for name, table in baselines.items()}
    timing = None
    if timed:
        # KernelBench's own figures (a mean, no median), kept apart from the strict timing block's
        # `candidate` statistics so nothing reads them as a kerneljudge measurement
        timing = {"method": "kernelbench", "kernelbench_ms": {"mean": float(runtime), "std": stats.get("std"),
                                                              "min": stats.get("min"), "max": stats.get("max"),
                                                              "n": stats.get("num_trials")},
                  "baselines": {name: {"mean_ms": ms} for name, ms in base.items() if ms},
                  "speedup": {name: ms / float(runtime) for name, ms in base.items() if ms}}
    name = f"level{level}/{problem.stem}" if problem else f"level{level}/{problem_id}"
    return Result(
        verdict=verdict, findings=tuple(findings), trials=(),
        problem={"name": name, "path": str(problem) if problem else None,
                 "sha256": hashlib.sha256(problem.read_bytes()).hexdigest() if problem else None},
        candidate={"path": str(kernel), "sha256": hashlib.sha256(source.encode()).hexdigest(), "kinds": [],
                   "label": "kernelbench"},
        device={"type": "cuda" if timed else None, "name": stats.get("hardware") or stats.get("device")},
        versions={}, protocol="kernelbench", timing=timing)


def why_kernelbench_failed(metadata: dict[str, Any]) -> str:
    """KernelBench's own reason for a failed sample, from its metadata."""
    for key in _WHY_KEYS:
        if metadata.get(key) not in (None, "", []):
            return f"{key}: {str(metadata[key])[:300]}"
    return "KernelBench gave no reason"


def import_run(store, eval_results: Path, run_folder: Path, *, run_id: str, problems_dir: Path | None = None,
               baseline_files: dict[str, Path] | None = None) -> list[int]:
    """Record every sample of a KernelBench run as run `run_id`; the record ids, in order. Every sample
    must have its kernel file in `run_folder` (its text is what the records keep and hash)."""
    samples = read_eval_results(eval_results)
    kernels = kernel_files(run_folder)
    missing = [f"problem {s['problem_id']} sample {s['sample_id']}" for s in samples
               if (s["problem_id"], s["sample_id"]) not in kernels]
    if missing:
        raise KernelJudgeError(f"{len(missing)} samples of {eval_results} have no kernel file "
                               f"level_L_problem_P_sample_S_kernel.py in {run_folder} (first: {missing[0]})")
    if store.history(run_id=run_id, limit=1):
        raise KernelJudgeError(f"the results store already holds a run {run_id!r}: give another --run-id")
    baselines = read_baselines(baseline_files or {})
    ids = []
    for sample in sorted(samples, key=lambda s: (s["problem_id"], s["sample_id"])):
        level, kernel = kernels[(sample["problem_id"], sample["sample_id"])]
        source = kernel.read_text()
        result = to_result(sample, level, source, kernel, problem_file(problems_dir, level, sample["problem_id"]),
                           baselines)
        ids.append(store.record(result, verb="evaluate", source=source, run_id=run_id))
    return ids


def _strict_record(store, sha: str, run_id: str) -> dict | None:
    """The newest strict record of the candidate outside the imported run."""
    for summary in store.history(candidate_sha=sha, limit=50):
        if summary["protocol"] == "strict" and summary["run_id"] != run_id:
            return store.get(summary["id"])
    return None


def disagreement_tables(store, run_id: str, records: list[dict]) -> list[Table]:
    """KernelBench's verdicts (the records of imported run `run_id`) against the strict judge's on the
    same candidates (joined on sha256): the agreement counts, and each candidate they disagree on with the
    finding that explains it (the strict failure, or KernelBench's reason when only it failed)."""
    counts: dict[tuple[str, str], int] = {}
    rows = []
    for record in records:
        imported = record["result"]
        kb = next((f["details"] for f in imported["findings"] if f["code"] == "kernelbench-verdict"), None)
        if kb is None:
            raise KernelJudgeError(f"run {run_id!r} was not imported from KernelBench (record {record['id']} has no "
                                   "KernelBench verdict)")
        strict = _strict_record(store, record["candidate_sha256"], run_id)
        kb_says = "pass" if record["correct"] else "fail"
        ours = "not judged" if strict is None else "pass" if strict["correct"] else "fail"
        counts[(kb_says, ours)] = counts.get((kb_says, ours), 0) + 1
        if strict is None or kb_says == ours:
            continue
        if ours == "fail":
            why = "; ".join(f"{f['code']}: {f['message']}" for f in strict["result"]["findings"]
                            if f["code"] in failure_codes([f]))[:500]
        else:
            why = "kernelbench " + why_kernelbench_failed(kb.get("metadata") or {})
        rows.append({"problem": imported["problem"]["name"], "sample": kb.get("sample_id"),
                     "candidate_sha256": record["candidate_sha256"], "kernelbench": kb_says, "strict": ours,
                     "strict_record": strict["id"], "strict_codes": " ".join(failure_codes(strict["result"]["findings"])),
                     "why": why})
    agreement = Table("agreement", f"KernelBench's verdicts (run {run_id}) against the strict judge's on the same "
                      "candidates (sha256)", ("kernelbench", "strict", "candidates"),
                      [{"kernelbench": k, "strict": s, "candidates": n} for (k, s), n in sorted(counts.items())])
    disagreements = Table("disagreements", "Candidates the two verdicts disagree on, and the finding that explains it",
                          ("problem", "sample", "candidate_sha256", "kernelbench", "strict", "strict_record",
                           "strict_codes", "why"), rows)
    return [agreement, disagreements]
