"""Regressions found by QA (2026-12-01): real evaluations of candidates nobody on the team had written.

Each test runs the judge on a candidate under tests/candidates/qa/ (CPU, small sizes, timing only where
timing is the point) and asserts what a user must see.
"""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from conftest import CANDIDATES, SEED, codes
from kerneljudge import api, isolation
from kerneljudge.stages import measure

QA = CANDIDATES / "qa"
RELU = "level1/19"

# The budget ends the timed loop after its first call (no warm-up time, a budget any call exceeds): the
# guaranteed positions among the first min_runs (10) calls are never reached (the tests leave the schedule none).
CUT_SHORT = {"enabled": True, "baselines": False, "warmup_runs": 0, "warmup_ms": 0.0, "min_time_ms": 0.0,
             "target_rel_sem": 0.0, "budget_ms": 1e-3}


def test_a_measurement_cut_short_by_the_budget_still_checks_a_timed_output(fast, monkeypatch):
    monkeypatch.setattr(measure.CheckSchedule, "wants", lambda self, position: False)  # only the fallback: no luck
    result = api.evaluate(RELU, QA / "zeros_while_timed.py", fast.replace(timing=CUT_SHORT))
    assert all(t.passed for t in result.trials)
    assert result.timing is not None and result.timing["candidate"]["n"] == 1
    assert result.timing["checked_outputs"] >= 1
    assert result.verdict == "fail" and "timed-output-mismatch" in codes(result)


def test_honest_control_cut_short_passes(fast, monkeypatch):
    monkeypatch.setattr(measure.CheckSchedule, "wants", lambda self, position: False)
    result = api.evaluate(RELU, "@pytorch", fast.replace(timing=CUT_SHORT))
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity in ("fail", "error")]
    assert result.timing["checked_outputs"] >= 1


# The parameters-replaced probe put float32, contiguous parameters in place of the candidate's own: an
# honest candidate with float64 parameters crashed (forward-error), one whose weight is channels_last
# read garbage and failed as stale-parameters. The new objects now take the candidate's dtype and layout.


def test_float64_parameters_survive_the_replaced_parameters_probe(fast):
    result = api.check(SEED, QA / "float64_parameters.py", fast)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity in ("fail", "error")]


def test_channels_last_weight_survives_the_replaced_parameters_probe(fast):
    result = api.check("level1/63", QA / "conv_weight_channels_last.py", fast)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity in ("fail", "error")]


def test_a_cache_of_replaced_parameters_is_still_stale(fast):
    result = api.check(SEED, CANDIDATES / "integrity" / "stale_replaced.py", fast)
    assert result.verdict == "fail" and "stale-parameters" in codes(result)


# A speedup divides a baseline's time: on a loaded CPU with a short budget the eager or compile baseline
# ended after one or two runs (once 1 run, 97% relative SEM) and "562x vs compile" was printed without a
# word; a noisy candidate time was already flagged. The baselines are now flagged the same way.


def test_a_baseline_measured_once_is_flagged_noisy(fast):
    timing = {**CUT_SHORT, "baselines": True, "compile_baseline": False, "target_rel_sem": 0.005}
    result = api.evaluate(RELU, "@pytorch", fast.replace(timing=timing))
    assert result.verdict == "pass"
    assert result.timing["baselines"]["eager"]["n"] == 1
    noisy = [f.message for f in result.findings if f.code == "timing-noisy"]
    assert any(m.startswith("baseline eager") for m in noisy), noisy


# Catalog row 28: a candidate that wrote {"gbps": 1e-6} into the cache folder's bandwidth entry (the worker
# can write there) made every later honest candidate fail as impossible-speed. A cached figure is now
# believed only within a plausible range, and measured again before it fails anyone.


def test_a_poisoned_bandwidth_cache_fails_no_later_honest_candidate(fast, tmp_path):
    import json

    options = fast.replace(cache_dir=tmp_path, timing={**CUT_SHORT, "budget_ms": 50.0})
    assert api.evaluate(RELU, "@pytorch", options).verdict == "pass"  # the figure is measured and cached
    entries = list((tmp_path / "bandwidth").glob("*.json"))
    assert entries
    # plausible but 50x too low for this machine (the absurd 1e-6 of the report: test_sandbox.py,
    # test_a_cached_bandwidth_out_of_range_is_measured_again)
    for entry in entries:
        entry.write_text(json.dumps({"gbps": 0.2}))
    result = api.evaluate(RELU, "@pytorch", options)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity in ("fail", "error")]
    assert result.timing["floor"]["bandwidth_gbps"] > 0.2
    assert all(json.loads(entry.read_text())["gbps"] > 0.2 for entry in entries)


# Outputs were compared as flat lists of tensors: a candidate returning [tensor] for a tensor passed.


def test_a_list_for_a_tensor_is_a_structure_mismatch(fast):
    result = api.check(RELU, QA / "returns_list.py", fast)
    assert result.verdict == "fail" and "output-shape" in codes(result)
    assert "returned a list of 1 tensors, the reference a tensor" in result.trials[0].message


# Under --protocol kernelbench the strict verdict was computed with KernelBench's own failing trials
# among its findings, so "KernelBench fails, strict passes" was never reported.


def test_kernelbench_fail_strict_pass_is_reported(fast):
    result = api.check(SEED, CANDIDATES / "core" / "param_order.py", fast, protocol="kernelbench")
    assert result.verdict == "fail" and "wrong-output" in codes(result)
    difference = [f for f in result.findings if f.code == "protocol-difference"]
    assert difference and difference[0].details["strict_verdict"] == "pass", [f.message for f in result.findings]
    assert "state_dict" in difference[0].message


# Options(cache_dir="...") from Python: a str path reached the timing lock as a str and the judge raised
# TypeError ('str' / 'str') with its own traceback. Paths given as str are Paths now.


def test_options_take_paths_as_strings(fast, tmp_path):
    from kerneljudge.options import Options

    options = Options(device="cpu", cache_dir=str(tmp_path / "cache"), store_path=str(tmp_path / "results.sqlite"))
    assert options.cache_dir == tmp_path / "cache" and options.store_path == tmp_path / "results.sqlite"
    timing = {**CUT_SHORT, "budget_ms": 20.0}
    result = api.evaluate(RELU, "@pytorch", options.replace(timing=timing))
    assert result.verdict == "pass" and (tmp_path / "results.sqlite").exists()


# QA 24 (a red-team round on the CPU): outputs the channel read by their bytes or could not carry, and a
# candidate's own constant taken for a copy of the problem's.

def test_a_negative_views_values_are_compared_not_its_bytes(fast):
    wrong = api.evaluate(RELU, QA / "neg_view_wrong.py", fast, probes=False)
    assert wrong.verdict == "fail" and "wrong-output" in codes(wrong), [f.message for f in wrong.findings]
    honest = api.evaluate(RELU, QA / "neg_view_honest.py", fast, probes=False)
    assert honest.verdict == "pass", [f.message for f in honest.findings if f.severity in ("fail", "error")]


def test_outputs_the_channel_does_not_carry_are_a_dtype_or_shape_mismatch(fast):
    float8 = api.evaluate(RELU, QA / "float8_output.py", fast, probes=False)
    assert float8.verdict == "fail" and codes(float8) >= {"output-dtype"}, [f.message for f in float8.findings]
    assert "judge-error" not in codes(float8)
    assert "torch.float8_e4m3fn, expected torch.float32" in next(f.message for f in float8.findings
                                                                  if f.code == "output-dtype")
    many = api.evaluate(RELU, QA / "many_dims_output.py", fast, probes=False)
    assert many.verdict == "fail" and "output-shape" in codes(many) and "tampering" not in codes(many), \
        [f.message for f in many.findings]


def test_a_candidates_own_constant_of_a_problems_name_is_left_alone(fast):
    """level1/23's preset changes `dim` (the feature size, 16384 in the file); the candidate's `dim = 1` is its axis."""
    result = api.evaluate("level1/23", QA / "own_dim_constant.py", fast, probes=False)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity in ("fail", "error")]
    assert "candidate-constants" not in codes(result)


# QA 35 (a new user's 55 candidates over six problems, on the CPU): an expanded output no memory could copy was a
# fault of the judge's own; a thread started at the first call and left running passed; an RMSNorm without its eps
# passed; a KeyboardInterrupt from forward was "called exit"; a default dtype left set was "replaced torch.Storage"
# and "changed its input tensors"; a 10,000-times-slower candidate's speedup was 0.0.
KERNELBENCH = Path(__file__).parents[2] / "shared" / "kernelbench"
RMSNORM = KERNELBENCH / "level1" / "36_RMSNorm_.py"
RMSNORM_SMALL = (("batch_size", "4"), ("features", "16"), ("dim1", "32"), ("dim2", "32"))


def test_an_output_too_large_to_copy_is_judged_by_its_shape(fast):
    result = api.check(RELU, QA / "expand_huge_output.py", fast, probes=False)
    assert result.verdict == "fail" and codes(result) >= {"output-shape"}, [f.message for f in result.findings]
    assert not codes(result) & {"worker-fault", "judge-error"}
    assert "(1048576, 1048576)" in next(f.message for f in result.findings if f.code == "output-shape")


def test_a_thread_started_at_an_earlier_call_running_the_candidates_code_is_seen(fast):
    result = api.check(RELU, QA / "thread_from_first_call.py", fast)
    spawned = [f for f in result.findings if f.code == "thread-spawn"]
    assert result.verdict == "fail" and spawned, [f.message for f in result.findings]
    assert "started before this call" in spawned[0].message and "_spin" in spawned[0].message
    # a pool made at the first call, idle between calls, runs none of the candidate's code there; a helper thread
    # of its own code, blocked on a queue between calls, uses no CPU there
    for honest in ("pool_from_first_call.py", "helper_thread_blocked.py"):
        result = api.check(RELU, QA / honest, fast)
        assert result.verdict == "pass", (honest, [f.message for f in result.findings if f.severity in ("fail", "error")])


def test_a_thread_started_after_the_probes_is_seen_when_timing_starts(fast):
    """The threads probe's calls come before the timing: a thread that the probes' calls never started, but a
    later one did, is running the candidate's code when timing begins."""
    timing = {**CUT_SHORT, "baselines": False, "budget_ms": 20.0}
    result = api.evaluate(RELU, QA / "thread_from_first_call.py", fast.replace(timing=timing), probes=False)
    timed = [f for f in result.findings if f.code == "thread-spawn" and f.stage == "timing"]
    assert result.verdict == "fail" and timed, [(f.code, f.stage, f.message) for f in result.findings]


@pytest.mark.skipif(not RMSNORM.is_file(), reason="KernelBench's problems are not in ../shared/kernelbench")
def test_a_norm_without_its_epsilon_fails_where_the_inputs_are_small(fast):
    options = fast.replace(overrides=RMSNORM_SMALL)
    wrong = api.check(RMSNORM, QA / "rmsnorm_without_eps.py", options)
    missed = [f.message for f in wrong.findings if f.code == "range-mismatch"]
    assert wrong.verdict == "fail" and missed and "inputs x0.01" in missed[0], [f.message for f in wrong.findings]
    honest = api.check(RMSNORM, QA / "rmsnorm_rsqrt.py", options)
    assert honest.verdict == "pass", [f.message for f in honest.findings if f.severity in ("fail", "error")]


def test_a_keyboard_interrupt_from_forward_is_a_forward_error(fast):
    result = api.check(RELU, QA / "raises_keyboard_interrupt.py", fast, probes=False)
    assert result.verdict == "error" and codes(result) >= {"forward-error"}, [f.message for f in result.findings]
    assert "candidate-exit" not in codes(result)
    assert "KeyboardInterrupt: from forward" in next(f.message for f in result.findings if f.code == "forward-error")


def test_a_default_dtype_left_set_is_named_and_is_no_input_mutation(fast):
    result = api.check(RELU, QA / "default_dtype_left_set.py", fast, probes=False)
    messages = [f.message for f in result.findings if f.code == "tampering"]
    assert result.verdict == "fail" and "input-mutation" not in codes(result), [f.message for f in result.findings]
    assert any("default dtype (torch.float64" in m for m in messages), messages
    assert any("inputs of dtype float64, not float32" in m for m in messages), messages
    assert not any("torch.Storage" in m for m in messages), messages


def test_a_very_slow_candidates_speedup_keeps_its_significant_figures(fast):
    timing = {**CUT_SHORT, "baselines": True, "compile_baseline": False, "budget_ms": 1.0}
    result = api.evaluate(RELU, QA / "slow_sleep.py", fast.replace(timing=timing), probes=False)
    assert result.verdict == "pass" and result.timing["candidate"]["n"] == 1
    speedup = result.speedup["eager"]
    baseline_ms = result.timing["baselines"]["eager"]["median_ms"]
    assert 0 < speedup < 1e-3
    assert speedup == pytest.approx(baseline_ms / result.timing["candidate"]["median_ms"], rel=1e-3)
    noisy = [f.message for f in result.findings if f.code == "timing-noisy" and "baseline" not in f.message]
    assert noisy and "1 run only, no spread known" in noisy[0], noisy


# --- QA 36 (a new user's candidates, 2026-12-08) ----------------------------------------------------------------


@pytest.fixture
def short_patience(monkeypatch):
    """The judge looks at busy processes for 2.5 s, not 15 (the honest helper's warm-up below takes 1 s)."""
    monkeypatch.setattr(isolation, "STRAY_PATIENCE_S", 2.5)


def _form(tmp_path: Path, form: str) -> Path:
    """process_detached_busy.py, hiding from the judge's look as FORM says."""
    copy = tmp_path / f"process_detached_{form}.py"
    copy.write_text((QA / "process_detached_busy.py").read_text().replace('FORM = "spin"', f'FORM = "{form}"'))
    return copy


@pytest.mark.parametrize("form, off", [("spin", ()), ("spin", ("pid",)), ("duty", ()), ("relay", ()),
                                       pytest.param("zombie", (), marks=pytest.mark.skipif(
                                           platform.machine() != "x86_64", reason="SYS_exit's number is x86-64's"))],
                         ids=["pid-namespace", "without-pid-namespace", "duty", "relay", "zombie"])
def test_a_detached_process_busy_between_calls_is_seen_by_the_judge(fast, short_patience, tmp_path, form, off):
    """A process detached twice (out of the worker's session and tree) at the first call passed: the worker's
    probe counted only its own children started by the probe's call. The judge measures what is below the
    sandbox's launcher itself, however it hides (a review's forms: resting 0.3 s a second, a relay of
    short-lived children, a main thread exited alone); a helper process that warms up for a second, then waits
    on a pipe, passes, with or without a PID namespace."""
    options = fast.replace(worker={"sandbox_off": off})
    result = api.check(RELU, _form(tmp_path, form), options)
    spawned = [f.message for f in result.findings if f.code == "thread-spawn"]
    assert result.verdict == "fail" and spawned, [f.message for f in result.findings]
    assert "process(es) the candidate started" in spawned[0] and "ms of CPU time in 1 s" in spawned[0], spawned
    if form == "spin":
        honest = api.check(RELU, QA / "process_idle_helper.py", options)
        assert honest.verdict == "pass", [f.message for f in honest.findings if f.severity in ("fail", "error")]


def test_a_busy_process_the_probes_never_saw_is_seen_after_the_timing(fast, short_patience):
    timing = {**CUT_SHORT, "baselines": False, "budget_ms": 20.0}
    result = api.evaluate(RELU, QA / "process_detached_busy.py", fast.replace(timing=timing), probes=False)
    timed = [f.message for f in result.findings if f.code == "thread-spawn" and f.stage == "timing"]
    assert result.verdict == "fail" and timed and "after the timing" in timed[0], \
        [(f.code, f.stage, f.message) for f in result.findings]


def test_a_claim_shaved_within_the_machines_noise_is_said_with_what_the_judges_clock_saw():
    """A candidate that rewrote the worker timer's start through its stack claimed 17.6x on a 1.8 ms call and
    passed: on a CPU the cross-check's tolerance (1.7-4 ms) is larger than such a call. Where the judge's clock saw
    half the claim or more unexplained, within the tolerance, the result says so with the judge's own speedup (the
    figures are that candidate's); unexplained time within the noise but small against the claim, or past the
    tolerance (tampering, said elsewhere), gets no such warning. (The rule alone: whether a shaved claim lands
    within a machine's noise depends on the machine's load, so no evaluation here could assert it.)"""
    from types import SimpleNamespace

    def said(excess_ms, tolerance_ms, median_ms, eager_ms=1.84):
        judging = SimpleNamespace(findings=[])
        measure._warn_if_unconfirmed(judging, {"excess_ms": excess_ms, "tolerance_ms": tolerance_ms}, median_ms,
                                     eager_ms)
        return judging.findings

    (warned,) = said(1.62, 2.16, 0.1043)
    assert warned.code == "timing-unconfirmed" and warned.severity == "warn"
    assert warned.details["seen_ms"] == pytest.approx(1.7243) and "speedup against eager is 1.067x" in warned.message
    assert said(0.04, 2.16, 0.1043) == [] and said(2.5, 2.16, 0.1043) == [] and said(-1.0, 2.16, 0.1043) == []
    assert said(20.0, 32.4, 300.0) == []  # a 0.3 s honest call's noise
    assert "speedup" not in said(1.62, 2.16, 0.1043, eager_ms=None)[0].message  # no baseline timed
    assert said(None, None, 0.1043) == []  # no cross-check ran


def test_a_batchs_unparsable_candidate_is_keyed_by_its_content_so_a_fixed_one_is_judged_again(tmp_path):
    """`kerneljudge run` keyed a file with a syntax error as "unreadable:PATH": once fixed, its rerun was taken
    for done (the key of a done pair) and skipped."""
    from kerneljudge.batch.discover import Setting, entries_to_jobs
    from kerneljudge.options import Options

    setting = Setting(Options(device="cpu"), "cpu", "cpu-test")
    broken = tmp_path / "sample.py"
    broken.write_text("class ModelNew(:\n")
    before = entries_to_jobs([{"problem": RELU, "solution": str(broken)}], setting)[0]
    broken.write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
                      "        return torch.relu(x)\n")
    after = entries_to_jobs([{"problem": RELU, "solution": str(broken)}], setting)[0]
    assert not before.sha256.startswith("unreadable:") and len(before.sha256) == 64
    assert before.key != after.key and before.sha256 != after.sha256


def test_an_output_whose_own_code_raises_when_read_is_the_candidates_error(fast):
    result = api.check(RELU, QA / "subclass_output_raises.py", fast, probes=False)
    errors = [f.message for f in result.findings if f.code == "forward-error"]
    assert result.verdict == "error" and "worker-fault" not in codes(result), [f.message for f in result.findings]
    assert errors and "subclass_output_raises.py:20 in __torch_function__" in errors[0], errors


def test_operators_torch_defines_while_the_candidate_imports_are_not_its_kernels(fast):
    result = api.check(RELU, QA / "imports_inductor_config.py", fast)
    assert result.verdict == "pass" and "pytorch-rewrite" in codes(result), \
        [(f.code, f.message) for f in result.findings if f.severity in ("fail", "error")]
