"""The report's metrics against values computed by hand, on the fixture store of report_fixture.py (built
with Store.record) and on small hand-made cases: ties, a single sample, no correct result, speedups from
1e-3 to 1e3, and a geometric mean whose plain product underflows."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from kerneljudge.cli_report import report_command
from kerneljudge.reports import load, metrics
from kerneljudge.reports.metrics import Bootstrap, Sample
from kerneljudge.reports.tables import compare_tables, report_tables

from report_fixture import fixture_store

B = Bootstrap(resamples=500, seed=7)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return fixture_store(tmp_path_factory.mktemp("report") / "results.sqlite")


def tables_of(store, run, baseline="eager", bootstrap=B):
    return {t.name: t for t in report_tables(load.load_samples(store, [run], baseline), baseline, bootstrap)}


def row(table, **match):
    (found,) = [r for r in table.rows if all(r[k] == v for k, v in match.items())]
    return found


def sample(problem="p", correct=True, speedup=None, **kw) -> Sample:
    return Sample(record_id=0, problem=problem, name=problem, level="1", correct=correct,
                  verdict="pass" if correct else "fail", speedup=speedup, **kw)


# ---------------------------------------------------------------- the fixture run, by hand
def test_fast_p_over_all_problems_with_a_tie_and_several_samples(store):
    fast = tables_of(store, "r1")["fast_p"]
    # problem shares (l1/1, l1/2, l1/3, l2/1, l2/2): p=0: 1,1,0,2/3,1; p=0.5/0.8: 1,1,0,1/3,0 (l2/2 untimed);
    # p=1: 1,0 (1.0 is not > 1),0,1/3,0; p=1.5: the same; p=2: 0 (2.0 is not > 2),0,0,1/3,0
    expected = {0.0: 11 / 15, 0.5: 7 / 15, 0.8: 7 / 15, 1.0: 4 / 15, 1.5: 4 / 15, 2.0: 1 / 15}
    for p, value in expected.items():
        assert row(fast, scope="all", p=p)["fast_p"] == pytest.approx(value)
    assert row(fast, scope="level 1", p=1.0)["fast_p"] == pytest.approx(1 / 3)
    assert row(fast, scope="level 2", p=0.0)["fast_p"] == pytest.approx((2 / 3 + 1) / 2)


def test_geomean_in_log_space_over_correct_samples_and_per_level(store):
    levels = tables_of(store, "r1")["levels"]
    everything = row(levels, scope="all")
    assert everything["geomean_speedup"] == pytest.approx(2 ** 0.25)  # 2, 1, 1e3, 1e-3
    assert everything["geomean_over"] == 4
    assert row(levels, scope="level 1")["geomean_speedup"] == pytest.approx(math.sqrt(2))
    assert row(levels, scope="level 2")["geomean_speedup"] == pytest.approx(1.0)  # 1e3 and 1e-3
    assert everything["correct_rate"] == pytest.approx(11 / 15) and everything["correct_samples"] == 5
    assert everything["median_percent_of_light"] == 80.0  # 40, 80, 90 (each problem's fastest correct)
    low, high = everything["geomean_speedup_low"], everything["geomean_speedup_high"]
    assert low <= everything["geomean_speedup"] <= high


def test_compile_baseline_halves_every_speedup(store):
    everything = row(tables_of(store, "r1", "compile")["levels"], scope="all")
    assert everything["geomean_speedup"] == pytest.approx(2 ** 0.25 / 2)
    assert row(tables_of(store, "r1", "compile")["fast_p"], scope="all", p=1.0)["fast_p"] == pytest.approx(1 / 15)


def test_pass_at_k_only_where_problems_have_k_samples(store):
    passk = tables_of(store, "r1")["pass_at_k"]
    assert row(passk, scope="all", k=1)["pass_at_k"] == pytest.approx(11 / 15)
    assert [(r["scope"], r["k"]) for r in passk.rows] == [("all", 1), ("all", 3), ("level 1", 1), ("level 2", 1),
                                                           ("level 2", 3)]  # 3: the most samples a problem has
    three = row(passk, scope="all", k=3)
    assert (three["pass_at_k"], three["problems"]) == (1.0, 1)  # level2/1 alone: 2 of 3 correct
    assert metrics.pass_at_k_values(1) == [1] and metrics.pass_at_k_values(12) == [1, 5, 10, 12]
    assert metrics.pass_at_k(3, 2, 1) == pytest.approx(2 / 3)
    assert metrics.pass_at_k(3, 2, 2) == 1.0  # one wrong sample cannot fill two draws
    assert metrics.pass_at_k(5, 1, 2) == pytest.approx(1 - math.comb(4, 2) / math.comb(5, 2))  # 0.4
    assert metrics.pass_at_k(4, 0, 3) == 0.0
    with pytest.raises(ValueError):
        metrics.pass_at_k(2, 1, 3)


def test_problems_failures_and_samples_tables(store):
    tables = tables_of(store, "r1")
    problem = row(tables["problems"], problem="level2/1")
    assert (problem["samples"], problem["correct"], problem["speedup"], problem["percent_of_light"]) == (3, 2, 1e3, 90.0)
    assert problem["failures"] == "compile-error" and problem["level"] == "2"
    assert row(tables["problems"], problem="level1/3")["speedup"] is None
    failures = {r["code"]: (r["samples"], r["problems"]) for r in tables["failures"].rows}
    assert failures == {"wrong-output": (1, 1), "compile-error": (1, 1)}
    assert len(tables["samples"].rows) == 7


def test_compare_new_passes_regressions_and_significance(store):
    before, after = (load.load_samples(store, [run], "eager") for run in ("r1", "r2"))
    summary, per_problem = compare_tables(before, after, ("r1", "r2"), B)
    status = {r["problem"]: r["status"] for r in per_problem.rows}
    assert status == {"level1/1": "regression", "level1/2": "both pass", "level1/3": "new pass",
                      "level2/1": "both pass", "level2/2": "both pass"}
    faster = row(per_problem, problem="level1/2")
    assert faster["speedup_ratio"] == pytest.approx(2.0) and faster["time_change"] == "faster"  # 1.0 -> 0.5 ms, sem 0.01
    assert row(per_problem, problem="level2/1")["time_change"] == "n.s."  # both 1.0 ms
    assert row(summary, metric="new passes")["b"] == 1 and row(summary, metric="regressions")["b"] == 1
    correct = row(summary, metric="correct_rate")
    assert correct["change"] == pytest.approx(4 / 5 - 11 / 15)
    ratio = next(r for r in summary.rows if r["metric"].startswith("speedup ratio"))
    assert ratio["ratio"] == pytest.approx(math.sqrt(2.0 * 0.01))  # level1/2: 2x, level2/1: 1e3 -> 10


# ---------------------------------------------------------------- the metrics alone
def test_bootstrap_percentiles_by_hand():
    draws = np.array([[0, 0, 0], [1, 2, 0], [1, 1, 1], [2, 2, 1]])
    # resampled means of (0, 1, 1): 0, 2/3, 1, 1; the 25th/75th percentiles (linear): 0.5 and 1
    estimate = metrics.ratio_estimate([0.0, 1.0, 1.0], [1.0, 1.0, 1.0], draws, confidence=0.5)
    assert (estimate.value, estimate.low, estimate.high, estimate.n) == (pytest.approx(2 / 3), 0.5, 1.0, 3)


def test_bootstrap_is_seeded_and_its_interval_holds_the_value():
    problems = [[sample(speedup=s)] for s in (0.5, 1.2, 3.0, 0.9, 2.2, 1.1)]
    one, two = metrics.geomean_speedup(problems, B), metrics.geomean_speedup(problems, B)
    assert one == two
    assert one.low < one.value < one.high
    other = metrics.geomean_speedup(problems, Bootstrap(resamples=500, seed=8))
    assert other.value == one.value and (other.low, other.high) != (one.low, one.high)


def test_a_single_sample_has_a_value_and_no_interval():
    (estimate,) = metrics.fast_p_curve([[sample(speedup=1.5)]], (1.0,), B).values()
    assert (estimate.value, estimate.low, estimate.high) == (1.0, None, None)
    geo = metrics.geomean_speedup([[sample(speedup=1.5)]], B)
    assert (geo.value, geo.low, geo.n) == (pytest.approx(1.5), None, 1)
    assert metrics.pass_at_k_estimate([[sample()]], 1, B).value == 1.0


def test_no_correct_result():
    problems = [[sample(correct=False)], [sample(correct=False), sample(correct=False)]]
    assert metrics.geomean_speedup(problems, B).value is None
    curve = metrics.fast_p_curve(problems, metrics.FAST_P_THRESHOLDS, B)
    assert all((e.value, e.low, e.high) == (0.0, 0.0, 0.0) for e in curve.values())
    assert metrics.pass_at_k_estimate(problems, 1, B).value == 0.0
    assert metrics.best_sample(problems[1]) is problems[1][0]


def test_speedups_from_1e_3_to_1e3_and_no_underflow():
    def geomean(speedups):
        return metrics.geomean_speedup([[sample(speedup=s)] for s in speedups], Bootstrap(resamples=50)).value

    assert geomean([1e-3, 1e3]) == pytest.approx(1.0)
    assert math.prod([1e-3] * 1000) == 0.0  # the plain product underflows ...
    assert geomean([1e-3] * 1000) == pytest.approx(1e-3)  # ... the log-space mean does not
    assert geomean([1e3] * 1000) == pytest.approx(1e3)  # nor overflows
    problems = [[sample(speedup=s)] for s in (1e-3, 1e-1, 1.0, 1e1, 1e3)]
    assert metrics.geomean_speedup(problems, B).value == pytest.approx(1.0)
    assert metrics.fast_p_curve(problems, (1.0,), B)[1.0].value == pytest.approx(2 / 5)  # 1.0 itself is a tie


def test_failures_group_by_code_and_count_a_sample_under_each():
    samples = [sample("a", False, failure_codes=("wrong-output", "input-mutation")),
               sample("b", False, failure_codes=("wrong-output",)), sample("c", False), sample("d", True)]
    assert metrics.failures_by_code(samples) == [
        {"code": "wrong-output", "samples": 2, "problems": 2}, {"code": "(none)", "samples": 1, "problems": 1},
        {"code": "input-mutation", "samples": 1, "problems": 1}]


def test_level_and_problem_key_from_names_and_paths():
    assert load.level_of({"name": "level2/51_Gemm"}) == "2"
    assert load.level_of({"name": "51_Gemm", "path": "/kb/level3/51_Gemm.py"}) == "3"
    assert load.level_of({"name": "prob"}) == "?"
    assert load.problem_key({"name": "51_Gemm", "path": "/kb/level2/51_Gemm.py"}) == "level2/51"
    assert load.problem_key({"name": "level2/51"}) == "level2/51"
    assert load.problem_key({"name": "prob", "path": "/tmp/prob.py"}) == "prob"


# ---------------------------------------------------------------- the command
def test_report_json_and_csv_hold_every_table(store, tmp_path):
    runner = CliRunner()
    done = runner.invoke(report_command, ["--store", str(store.path), "--json", "--csv", str(tmp_path / "csv"),
                                          "--resamples", "200"])
    assert done.exit_code == 0, done.output
    data = json.loads(done.output)
    assert data["runs"] == ["r2"]  # the newest run by default
    assert set(data["tables"]) == {"levels", "fast_p", "pass_at_k", "problems", "failures", "samples"}
    assert {p.stem for p in (tmp_path / "csv").iterdir()} == set(data["tables"])
    lines = (tmp_path / "csv" / "fast_p.csv").read_text().splitlines()
    assert lines[0] == "scope,p,fast_p,fast_p_low,fast_p_high,problems" and len(lines) == 1 + 6 * 3
    done = runner.invoke(report_command, ["--store", str(store.path), "--compare", "r1", "r2", "--json"])
    assert {"compare", "compare_summary"} <= set(json.loads(done.output)["tables"])
    done = runner.invoke(report_command, ["nope", "--store", str(store.path)])
    assert done.exit_code != 0 and "no records of run 'nope'" in str(done.exception)
