"""The tables of a report, built from samples by the metrics: one list of named tables that the terminal,
`--json`, `--csv` and the HTML page all render, so every figure appears the same way everywhere.

A table is a title, its columns and its rows (plain dicts of numbers and strings). An estimate with an
interval takes three columns (`x`, `x_low`, `x_high`) so CSV readers need no parsing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

from kerneljudge.findings import CATALOG
from kerneljudge.reports import metrics
from kerneljudge.reports.metrics import Bootstrap, Estimate, Sample


@dataclass
class Table:
    name: str  # a file name stem: problems, levels, fast_p, ...
    title: str
    columns: tuple[str, ...]
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "columns": list(self.columns), "rows": self.rows}


def _est(prefix: str, estimate: Estimate | None) -> dict[str, Any]:
    estimate = estimate or Estimate(None)
    return {prefix: estimate.value, f"{prefix}_low": estimate.low, f"{prefix}_high": estimate.high}


def _est_columns(prefix: str) -> tuple[str, ...]:
    return prefix, f"{prefix}_low", f"{prefix}_high"


def _scopes(samples: Sequence[Sample]) -> list[tuple[str, list[list[Sample]]]]:
    """("all", problems) then ("level N", problems) for each level, in level order."""
    groups = metrics.by_problem(samples)
    levels = sorted({g[0].level for g in groups.values()}, key=lambda lv: (not lv.isdigit(), lv.zfill(4)))
    scopes = [("all", list(groups.values()))]
    if len(levels) > 1 or levels and levels[0] != "?":
        scopes += [(f"level {lv}", [g for g in groups.values() if g[0].level == lv]) for lv in levels]
    return scopes


def report_tables(samples: Sequence[Sample], baseline: str, bootstrap: Bootstrap) -> list[Table]:
    """Every table of a run's report."""
    if not samples:
        return []
    scopes = _scopes(samples)
    confidence = f"{bootstrap.confidence:.0%}"
    levels = Table("levels", f"By level, against {baseline} ({confidence} bootstrap intervals over problems)",
                   ("scope", "problems", "samples", "correct_samples", *_est_columns("correct_rate"),
                    *_est_columns("geomean_speedup"), "geomean_over", *_est_columns("fast_1"),
                    "median_percent_of_light"))
    fast = Table("fast_p", f"fast_p against {baseline}: share of all problems correct and more than p times faster",
                 ("scope", "p", *_est_columns("fast_p"), "problems"))
    passk = Table("pass_at_k", "pass@k (unbiased estimator), over problems with at least k samples",
                  ("scope", "k", *_est_columns("pass_at_k"), "problems"))
    for scope, problems in scopes:
        curve = metrics.fast_p_curve(problems, metrics.FAST_P_THRESHOLDS, bootstrap)
        geo = metrics.geomean_speedup(problems, bootstrap)
        bests = [metrics.best_sample(g) for g in problems]
        levels.rows.append({"scope": scope, "problems": len(problems), "samples": sum(map(len, problems)),
                            "correct_samples": sum(s.correct for g in problems for s in g),
                            **_est("correct_rate", curve[0.0]), **_est("geomean_speedup", geo),
                            "geomean_over": geo.n, **_est("fast_1", curve[1.0]),
                            "median_percent_of_light": metrics.median(
                                [b.percent_of_light for b in bests if b.correct and b.percent_of_light is not None])})
        fast.rows += [{"scope": scope, "p": p, **_est("fast_p", e), "problems": e.n} for p, e in curve.items()]
        for k in metrics.pass_at_k_values(max(map(len, problems))):
            estimate = metrics.pass_at_k_estimate(problems, k, bootstrap)
            passk.rows.append({"scope": scope, "k": k, **_est("pass_at_k", estimate), "problems": estimate.n})
    return [levels, fast, passk, problem_table(scopes[0][1], baseline), failure_table(samples),
            sample_table(samples, baseline)]


def problem_table(problems: Sequence[Sequence[Sample]], baseline: str) -> Table:
    table = Table("problems", f"By problem (shown by its fastest correct sample; speedup against {baseline})",
                  ("problem", "level", "name", "samples", "correct", "pass_at_1", "speedup", "median_ms",
                   "percent_of_light", "failures"))
    for group in problems:
        best = metrics.best_sample(group)
        correct = sum(s.correct for s in group)
        codes = dict.fromkeys(c for s in group if not s.correct for c in s.failure_codes or ("(none)",))
        table.rows.append({"problem": best.problem, "level": best.level, "name": best.name, "samples": len(group),
                           "correct": correct, "pass_at_1": correct / len(group),
                           "speedup": best.speedup if best.correct else None,
                           "median_ms": best.median_ms if best.correct else None,
                           "percent_of_light": best.percent_of_light if best.correct else None,
                           "failures": " ".join(codes)})
    return table


def failure_table(samples: Sequence[Sample]) -> Table:
    table = Table("failures", "Failed samples by finding (a sample with several codes counts under each)",
                  ("code", "samples", "problems", "title"))
    table.rows = [{**row, "title": CATALOG[row["code"]].title if row["code"] in CATALOG else ""}
                  for row in metrics.failures_by_code(samples)]
    return table


def sample_table(samples: Sequence[Sample], baseline: str) -> Table:
    table = Table("samples", f"Every sample (speedup against {baseline})",
                  ("record", "problem", "level", "sample", "verdict", "speedup", "median_ms", "percent_of_light",
                   "candidate_sha256", "failures"))
    table.rows = [{"record": s.record_id, "problem": s.problem, "level": s.level, "sample": s.sample_id,
                   "verdict": s.verdict, "speedup": s.speedup, "median_ms": s.median_ms,
                   "percent_of_light": s.percent_of_light, "candidate_sha256": s.candidate_sha256,
                   "failures": " ".join(s.failure_codes)} for s in samples]
    return table


def compare_tables(before: Sequence[Sample], after: Sequence[Sample], names: tuple[str, str],
                   bootstrap: Bootstrap) -> list[Table]:
    """Run A against run B: per-problem deltas and status, then the paired changes of the headline
    metrics over the problems both runs hold, with intervals (a change is significant when its interval
    excludes no change)."""
    a_groups, b_groups = metrics.by_problem(before), metrics.by_problem(after)
    a_name, b_name = names
    rows = []
    for key in list(a_groups) + [k for k in b_groups if k not in a_groups]:
        a, b = a_groups.get(key), b_groups.get(key)
        best_a, best_b = a and metrics.best_sample(a), b and metrics.best_sample(b)
        pass_a, pass_b = bool(a and best_a.correct), bool(b and best_b.correct)
        status = ("only in A" if b is None else "only in B" if a is None else
                  "new pass" if pass_b and not pass_a else "regression" if pass_a and not pass_b else
                  "both pass" if pass_a else "both fail")
        speed_a = best_a.speedup if pass_a else None
        speed_b = best_b.speedup if pass_b else None
        rows.append({"problem": key, "status": status, "correct_a": pass_a, "correct_b": pass_b,
                     "speedup_a": speed_a, "speedup_b": speed_b,
                     "speedup_ratio": speed_b / speed_a if speed_a and speed_b else None,
                     "time_change": metrics.time_change(best_a, best_b) if pass_a and pass_b else "n/a"})
    per_problem = Table("compare", f"{b_name} (B) against {a_name} (A), by problem; time_change: 95% intervals "
                        "of the mean times apart (same device only)",
                        ("problem", "status", "correct_a", "correct_b", "speedup_a", "speedup_b", "speedup_ratio",
                         "time_change"), rows)
    common = [k for k in a_groups if k in b_groups]
    summary = Table("compare_summary", f"Paired changes over the {len(common)} problems in both runs "
                    f"({bootstrap.confidence:.0%} bootstrap intervals)",
                    ("metric", "a", "b", *_est_columns("change"), *_est_columns("ratio"), "significant"))
    pairs = [(a_groups[k], b_groups[k]) for k in common]
    for p, metric in ((0.0, "correct_rate"), (1.0, "fast_1")):
        a_shares = [metrics.fast_share(a, p) for a, _ in pairs]
        b_shares = [metrics.fast_share(b, p) for _, b in pairs]
        change = metrics.paired_difference(a_shares, b_shares, bootstrap)
        summary.rows.append({"metric": metric, "a": metrics.mean(a_shares), "b": metrics.mean(b_shares),
                             **_est("change", change), "significant": metrics.significant(change)})
    timed = [(a, b) for a, b in ((metrics.best_sample(x), metrics.best_sample(y)) for x, y in pairs)
             if a.correct and b.correct and a.speedup and b.speedup]
    ratio = metrics.paired_difference([math.log(a.speedup) for a, _ in timed],
                                      [math.log(b.speedup) for _, b in timed], bootstrap, math.exp)
    summary.rows.append({"metric": f"speedup ratio B/A (geomean over {len(timed)} problems correct in both)",
                         "a": None, "b": None, **_est("ratio", ratio), "significant": metrics.significant(ratio, 1.0)})
    summary.rows.append({"metric": "new passes", "a": None, "b": sum(r["status"] == "new pass" for r in rows),
                         "significant": None})
    summary.rows.append({"metric": "regressions", "a": None, "b": sum(r["status"] == "regression" for r in rows),
                         "significant": None})
    return [summary, per_problem]


def _format(column: str, value: Any) -> str:
    """One cell as people read it: rates as percentages, speedups with an x, times in ms."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, float):
        return str(value)
    if column == "change":
        return f"{value:+.3g}"
    if "rate" in column or column.startswith(("fast_", "pass_at")):
        return f"{100 * value:.1f}%"
    if "speedup" in column or column == "ratio":
        return f"{value:.3g}x"
    if "percent" in column:
        return f"{value:.1f}%"
    return f"{value:.4g}"


def display(table: Table) -> tuple[list[str], list[list[str]]]:
    """Headers and formatted cells, an estimate's three columns shown as one `x [low, high]` cell."""
    shown = [c for c in table.columns if not c.endswith(("_low", "_high"))]
    rows = []
    for row in table.rows:
        cells = []
        for column in shown:
            text = _format(column, row.get(column))
            if row.get(f"{column}_low") is not None:
                text += f" [{_format(column, row[f'{column}_low'])}, {_format(column, row[f'{column}_high'])}]"
            cells.append(text)
        rows.append(cells)
    return shown, rows
