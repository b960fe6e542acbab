"""What a batch writes: our JSON line per job, KernelBench's `eval_results.json`, a CSV, a summary.

`eval_results.json` has KernelBench's layout (`{problem_id: [{sample_id, compiled, correctness,
metadata, runtime, runtime_stats: {mean, std, min, max, num_trials, hardware, device}}]}`), so its
analysis scripts read it unchanged: `compiled` is False when loading or building the candidate failed,
`correctness` is our verdict "pass" (the strict protocol unless --protocol kernelbench), `runtime` the
candidate's mean time in ms (-1.0 when not timed, as KernelBench writes), `metadata` the trial count as
KernelBench writes it ("(p / n)") and the first error. A batch of several levels writes one file per
level (`eval_results_level<L>.json`): KernelBench's problem ids are per level.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from kerneljudge.batch.backend import Finished
from kerneljudge.records import jsonsafe

CSV_FIELDS = ("id", "problem", "level", "problem_id", "sample_id", "solution", "lane", "verdict", "compiled",
              "correct", "runtime_ms", "speedup_eager", "speedup_compile", "codes", "build_ms", "judge_ms",
              "waited_ms")


def line_of(finished: Finished) -> dict[str, Any]:
    """Our JSON line for a finished job (the journal's line; --json prints it without `result`)."""
    job, result = finished.job, finished.result
    timing = result.timing or {}
    compiled = not any(f.blocking and f.stage in ("load", "build") for f in result.findings)
    return jsonsafe({
        **naming(job), "key": job.key, "problem": result.problem.get("name") or job.problem_json.get("name"),
        "sha256": job.sha256, "lane": finished.lane, "verdict": result.verdict,
        "compiled": compiled, "correct": result.correct,
        "runtime_ms": (timing.get("candidate") or {}).get("mean_ms"), "speedup": result.speedup,
        "codes": [f.code for f in result.findings], "build_ms": round(finished.build_ms, 1),
        "judge_ms": round(finished.judge_ms, 1), "waited_ms": round(finished.waited_ms, 1),
        "stage_ms": result.stage_ms, "result": result.to_json(),
    })


def naming(job) -> dict[str, Any]:
    """How a job is named in the exports (its id, KernelBench's numbers, its file, its labels): a line the
    journal kept for the same key (the same content judged alike) is named anew for each job it stands for."""
    return jsonsafe({"id": job.id, "level": job.level, "problem_id": job.problem_id, "sample_id": job.sample_id,
                     "solution": str(job.solution), "labels": job.labels})


def public(line: dict[str, Any]) -> dict[str, Any]:
    """A line as --json streams it: everything but the full result."""
    return {k: v for k, v in line.items() if k != "result"}


def kernelbench_entry(line: dict[str, Any]) -> dict[str, Any]:
    """One sample in KernelBench's eval_results layout."""
    result = line["result"]
    device = result.get("device") or {}
    hardware = device.get("name") or device.get("type") or "unknown"
    where = line.get("lane") or device.get("type") or "unknown"
    trials = result.get("trials") or []
    metadata: dict[str, Any] = {"hardware": hardware, "device": where,
                                "correctness_trials": f"({sum(t['passed'] for t in trials)} / {len(trials)})",
                                "kerneljudge_id": line["id"], "kerneljudge_verdict": line["verdict"],
                                "kerneljudge_codes": line["codes"]}
    failing = [f for f in result.get("findings") or [] if f.get("severity") in ("error", "fail")]
    if failing:
        what = ("compilation_error" if not line["compiled"] else
                "runtime_error" if line["verdict"] == "error" else "correctness_issue")
        metadata[what] = failing[0]["message"]
    wrong = [t for t in trials if not t["passed"] and t.get("max_abs_err") is not None]
    if wrong:
        metadata["max_difference"] = [f"{t['max_abs_err']:.6f}" for t in wrong]
        metadata["avg_difference"] = [f"{t['mean_abs_err']:.6f}" for t in wrong if t.get("mean_abs_err") is not None]
    stats = ((result.get("timing") or {}).get("candidate") or {}) if line["correct"] else {}
    runtime_stats = {"mean": stats["mean_ms"], "std": stats["std_ms"], "min": stats["min_ms"], "max": stats["max_ms"],
                     "num_trials": stats["n"], "hardware": hardware, "device": where} if stats else {}
    return {"sample_id": line["sample_id"], "compiled": line["compiled"], "correctness": line["correct"],
            "metadata": metadata, "runtime": stats["mean_ms"] if stats else -1.0, "runtime_stats": runtime_stats}


def eval_results(lines: list[dict[str, Any]]) -> dict[int | None, dict[str, list[dict[str, Any]]]]:
    """Per level: {problem_id: [samples by sample_id]}. A job without KernelBench's problem id is filed under
    its problem's name (its sample id is its place in the batch, discover.py)."""
    levels: dict[int | None, dict[str, list[dict[str, Any]]]] = {}
    for line in lines:
        problem_id = str(line["problem_id"]) if line.get("problem_id") is not None else str(line["problem"])
        levels.setdefault(line.get("level"), {}).setdefault(problem_id, []).append(kernelbench_entry(line))
    for problems in levels.values():
        for samples in problems.values():
            samples.sort(key=lambda e: e["sample_id"])
    return levels


def write(folder: Path, lines: list[dict[str, Any]]) -> list[Path]:
    """eval_results.json (one per level when there are several) and kerneljudge_results.csv; their paths."""
    folder = Path(folder)
    written = []
    levels = eval_results(lines)
    for level, problems in levels.items():
        name = "eval_results.json" if len(levels) == 1 else f"eval_results_level{level}.json"
        ordered = dict(sorted(problems.items(), key=lambda kv: (not kv[0].isdigit(), int(kv[0]) if kv[0].isdigit()
                                                                else 0, kv[0])))
        (folder / name).write_text(json.dumps(ordered, indent=2, allow_nan=False))
        written.append(folder / name)
    with open(folder / "kerneljudge_results.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, CSV_FIELDS)
        writer.writeheader()
        for line in lines:
            speedup = line.get("speedup") or {}
            writer.writerow({**{k: line.get(k) for k in CSV_FIELDS}, "codes": " ".join(line["codes"]),
                             "speedup_eager": speedup.get("eager"), "speedup_compile": speedup.get("compile")})
    written.append(folder / "kerneljudge_results.csv")
    return written


def summary(lines: list[dict[str, Any]], fresh: list[dict[str, Any]], *, total: int, skipped: int, wall_s: float,
            lanes: int, device_seconds: dict[str, dict[str, float]] | None = None,
            interrupted: bool = False) -> dict[str, Any]:
    """Counts over every job's latest line; rate and where the time went over this run's (`fresh`), and each shared
    device's gate (`device_seconds`: where a timing and its wait for the requests in flight take most of it, the
    other lanes stall then, and more lanes per GPU buy little)."""
    verdicts = {v: sum(line["verdict"] == v for line in lines) for v in ("pass", "fail", "error")}
    judge_ms = sum(line["judge_ms"] for line in fresh)
    build_ms = sum(line["build_ms"] for line in fresh)
    return {"summary": True, "total": total, "finished": len(lines), "skipped": skipped, **verdicts,
            "interrupted": interrupted, "wall_s": round(wall_s, 2), "lanes": lanes,
            "judged_per_hour": round(3600 * len(fresh) / wall_s, 1) if wall_s > 0 else None,
            "sum_build_s": round(build_ms / 1e3, 2), "sum_judge_s": round(judge_ms / 1e3, 2),
            "lane_busy_fraction": round(judge_ms / 1e3 / (wall_s * lanes), 3) if wall_s > 0 and lanes else None,
            "device_seconds": device_seconds or {}}
