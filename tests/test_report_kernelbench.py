"""KernelBench results in, end to end: real strict evaluations of three candidates are recorded as a run,
a KernelBench eval_results.json over the same kernel files is imported as another run, and the report
sets the two sets of verdicts side by side, each disagreement with the finding that explains it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kerneljudge import api
from kerneljudge.cli_report import report_command
from kerneljudge.errors import KernelJudgeError
from kerneljudge.options import Options
from kerneljudge.reports import kernelbench
from kerneljudge.store import Store

from scaled_relu import GOOD, MUTATES, PROBLEM, WRONG

# What KernelBench said about each kernel (sample id = position): the good one did not compile on its
# machine, the wrong one failed its allclose, the one writing into its input passed (KernelBench never
# looks at the inputs after the call).
KERNELBENCH = [
    {"sample_id": 0, "compiled": False, "correctness": False, "runtime": -1.0, "runtime_stats": {},
     "metadata": {"compilation_error": "nvcc: not found"}},
    {"sample_id": 1, "compiled": True, "correctness": False, "runtime": -1.0, "runtime_stats": {},
     "metadata": {"correctness_issue": "Output mismatch", "max_difference": ["1.2"]}},
    {"sample_id": 2, "compiled": True, "correctness": True, "runtime": 0.5, "metadata": {},
     "runtime_stats": {"mean": 0.5, "std": 0.01, "min": 0.49, "max": 0.53, "num_trials": 100,
                       "hardware": "NVIDIA H200", "device": "cuda:0"}},
]


def invoke(*args: str) -> str:
    done = CliRunner().invoke(report_command, list(args))
    assert done.exit_code == 0, f"{done.output}\n{done.exception!r}"
    return done.output


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict:
    """The three kernels in a KernelBench run folder, judged for real (CPU, no timing) as run "strict"."""
    folder = tmp_path_factory.mktemp("kb")
    problems = folder / "KernelBench" / "level1"
    problems.mkdir(parents=True)
    (problems / "1_ScaledReLU.py").write_text(PROBLEM)
    run_folder = folder / "runs" / "demo"
    run_folder.mkdir(parents=True)
    store = Store(folder / "results.sqlite")
    options = Options(device="cpu", store_path=None, cache_dir=folder / "cache").replace(
        timing={"enabled": False}, check={"trials": 2})
    for sample_id, source in enumerate((GOOD, WRONG, MUTATES)):
        kernel = run_folder / f"level_1_problem_1_sample_{sample_id}_kernel.py"
        kernel.write_text(source)
        result = api.check(problems / "1_ScaledReLU.py", kernel, options)
        store.record(result, verb="check", source=source, run_id="strict")
    (folder / "eval_results.json").write_text(json.dumps({"1": KERNELBENCH}))
    (folder / "baseline_time_torch.json").write_text(json.dumps({"level1": {"1_ScaledReLU.py": {"mean": 2.0}}}))
    return {"folder": folder, "store": store, "run_folder": run_folder, "problems": folder / "KernelBench"}


def test_the_strict_run_reports_its_real_verdicts(judged):
    data = json.loads(invoke("strict", "--store", str(judged["store"].path), "--json", "--resamples", "100"))
    levels = {r["scope"]: r for r in data["tables"]["levels"]["rows"]}
    assert levels["all"]["correct_rate"] == pytest.approx(1 / 3) and levels["all"]["samples"] == 3
    assert levels["level 1"]["problems"] == 1  # the problem file sits in a level1 folder
    failures = {r["code"]: r["samples"] for r in data["tables"]["failures"]["rows"]}
    assert failures == {"wrong-output": 1, "input-mutation": 1}
    assert data["tables"]["pass_at_k"]["rows"][0]["pass_at_k"] == pytest.approx(1 / 3)  # n=3, c=1, k=1


def test_import_then_disagreements_name_the_finding(judged):
    store, folder = judged["store"], judged["folder"]
    out = invoke("import-kernelbench", str(folder / "eval_results.json"), "--run-folder", str(judged["run_folder"]),
                 "--problems", str(judged["problems"]), "--baseline-times",
                 f"eager={folder / 'baseline_time_torch.json'}", "--store", str(store.path))
    assert "imported 3 samples as run kernelbench-demo" in out
    imported = [store.get(r["id"]) for r in store.history(run_id="kernelbench-demo")][::-1]
    assert [r["verdict"] for r in imported] == ["error", "fail", "pass"]
    assert imported[0]["problem"] == "level1/1_ScaledReLU"
    assert imported[2]["speedups"] == {"eager": pytest.approx(4.0)}  # 2.0 ms over KernelBench's 0.5 ms mean
    strict_shas = {r["candidate_sha256"] for r in store.history(run_id="strict")}
    assert {r["candidate_sha256"] for r in imported} == strict_shas  # the same kernel files, the same hashes

    data = json.loads(invoke("kernelbench-demo", "--disagreements", "--json", "--resamples", "100",
                             "--store", str(store.path)))
    agreement = {(r["kernelbench"], r["strict"]): r["candidates"] for r in data["tables"]["agreement"]["rows"]}
    assert agreement == {("fail", "pass"): 1, ("fail", "fail"): 1, ("pass", "fail"): 1}
    rows = {r["sample"]: r for r in data["tables"]["disagreements"]["rows"]}
    assert set(rows) == {0, 2}  # the wrong kernel: both say fail
    assert rows[2]["strict_codes"] == "input-mutation" and rows[2]["why"].startswith("input-mutation: ")
    assert rows[0]["strict"] == "pass" and rows[0]["why"] == "kernelbench compilation_error: nvcc: not found"
    failures = {r["code"] for r in data["tables"]["failures"]["rows"]}
    assert failures == {"kernelbench-incorrect", "kernelbench-not-compiled"}

    with pytest.raises(KernelJudgeError, match="already holds a run"):
        kernelbench.import_run(store, folder / "eval_results.json", judged["run_folder"], run_id="kernelbench-demo")
    with pytest.raises(KernelJudgeError, match="not imported from KernelBench"):
        kernelbench.disagreement_tables(store, "strict", [store.get(r["id"]) for r in store.history(run_id="strict")])


def test_old_layout_and_missing_kernels(judged, tmp_path):
    old = tmp_path / "eval_results.json"
    old.write_text(json.dumps({"1": KERNELBENCH[2], "7": {**KERNELBENCH[1], "sample_id": 0}}))
    assert [(s["problem_id"], s["sample_id"]) for s in kernelbench.read_eval_results(old)] == [(1, 2), (7, 0)]
    with pytest.raises(KernelJudgeError, match="problem 7 sample 0"):
        kernelbench.import_run(judged["store"], old, judged["run_folder"], run_id="other")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": [{"sample_id": 0}]}))
    with pytest.raises(KernelJudgeError, match="not in KernelBench's layout"):
        kernelbench.read_eval_results(bad)


def test_a_timed_real_evaluation_reports_its_own_speedup_and_speed_of_light(judged, cache_dir):
    """The figures of a report are the result's own: one timed sample, so the geomean is its speedup,
    fast_p follows speedup > p, and % of speed of light is the floor's. (The session's cache: a timing on
    a fresh one measures the copy bandwidth in full first.)"""
    store = judged["store"]
    options = Options(device="cpu", store_path=None, cache_dir=cache_dir).replace(
        check={"trials": 1}, timing={"compile_baseline": False, "min_time_ms": 5.0, "budget_ms": 50.0, "min_runs": 5})
    result = api.evaluate(judged["problems"] / "level1" / "1_ScaledReLU.py", judged["run_folder"] /
                          "level_1_problem_1_sample_0_kernel.py", options)
    assert result.verdict == "pass" and result.speedup["eager"] > 0
    store.record(result, verb="evaluate", source=GOOD, run_id="timed")
    data = json.loads(invoke("timed", "--store", str(store.path), "--json"))
    speedup, light = result.speedup["eager"], result.timing["floor"]["percent_of_light"]
    assert light > 0
    (problem,) = data["tables"]["problems"]["rows"]
    assert (problem["speedup"], problem["percent_of_light"]) == (speedup, light)
    assert problem["median_ms"] == result.timing["candidate"]["median_ms"]
    levels = {r["scope"]: r for r in data["tables"]["levels"]["rows"]}
    assert levels["all"]["geomean_speedup"] == pytest.approx(speedup) and levels["all"]["geomean_speedup_low"] is None
    fast = {r["p"]: r["fast_p"] for r in data["tables"]["fast_p"]["rows"] if r["scope"] == "all"}
    assert fast == {p: float(p == 0 or speedup > p) for p in (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)}
    assert json.loads(invoke("timed", "--store", str(store.path), "--json", "--baseline", "compile")
                      )["tables"]["problems"]["rows"][0]["speedup"] is None  # compile was not timed
