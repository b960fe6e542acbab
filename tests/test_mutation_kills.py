"""Tests that kill the mutants the rest of the suite let live (issue #21, scripts/mutation_check.py).

Each asserts a precise behaviour of the code every verdict depends on: the tolerance bound at its edge
for each float dtype, the exact finding of a half-written output, the float64 -> native fallback, the
steps of KernelBench's protocol that a candidate can observe, the hidden re-check failing a candidate
that is wrong only after the calls it was judged on, and the torch.compile baseline's cache trusted only
beside an eager time that agrees. All but the last are real evaluations (worker and referee processes).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import CANDIDATES, SEED, codes
from kerneljudge.isolation import Frozen
from kerneljudge import api

MUTATION = CANDIDATES / "mutation"
TOLERANCE_PROBLEM = MUTATION / "tolerance_problem.py"
DTYPES = {0: ("float32", 1e-4), 1: ("float16", 1e-2), 2: ("bfloat16", 1e-2)}


def failing(result) -> list[str]:
    return sorted(f.code for f in result.findings if f.severity in ("fail", "error"))


def trials_only(options, **changes):
    """The check alone: the trials give the verdict, no probe calls the candidate."""
    return options.replace(probes=False, **changes)


# --- the comparison's bound, at its edge ---------------------------------------------------------------


@pytest.mark.parametrize("dtype_code", sorted(DTYPES), ids=[name for name, _ in DTYPES.values()])
@pytest.mark.parametrize("offset_percent, passes", [(50, True), (200, False)], ids=["half-the-bound", "twice"])
def test_an_output_off_by_twice_the_bound_fails_and_by_half_passes(fast, dtype_code, offset_percent, passes):
    """Every element off by f * (atol + rtol * |ref|): f = 0.5 passes, f = 2 fails, with the dtype's
    default tolerance (the reference is exact, so the float64 truth is its own output)."""
    name, tol = DTYPES[dtype_code]
    options = trials_only(fast, overrides=(("dtype_code", str(dtype_code)), ("offset_percent", str(offset_percent))))
    result = api.check(TOLERANCE_PROBLEM, MUTATION / "off_by_fraction.py", options)
    assert len(result.trials) == fast.check.trials
    assert {(t.atol, t.rtol, t.compared_to) for t in result.trials} == {(tol, tol, "float64")}
    if passes:
        assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
        assert all(t.passed and t.mismatched == 0 for t in result.trials)
        assert failing(result) == []
    else:
        assert result.verdict == "fail"
        assert failing(result) == ["wrong-output"]
        # every element is off by about twice its bound: nearly all of them miss (rounding to the dtype
        # can pull an element of a low-precision output back under it, never by half)
        assert all(not t.passed and t.mismatched > 0.9 * t.elements for t in result.trials), name


# --- NaN: a NaN output element fails, by its own code; an output left half unwritten fails -------------


def test_one_nan_element_where_the_reference_is_finite_fails_every_trial(fast):
    result = api.check(TOLERANCE_PROBLEM, MUTATION / "one_nan.py", trials_only(fast))
    assert result.verdict == "fail"
    assert failing(result) == ["output-nonfinite"]
    assert all(not t.passed and t.mismatched == 1 for t in result.trials)
    nonfinite = next(f for f in result.findings if f.code == "output-nonfinite")
    assert nonfinite.message.startswith("trial 0: 1 output elements are NaN or Inf where the reference is finite")


def test_half_written_output_fails_every_trial(fast):
    """unwritten_half.py writes the first half of its torch.empty output. The worker fills free memory with
    NaN bytes before each trial's call; on the CPU the allocator hands that block back only sometimes
    (docs/design.md: best effort), so the unwritten half reads NaN (output-nonfinite) or leftover bytes
    (wrong-output), never a right answer."""
    result = api.check(SEED, CANDIDATES / "integrity" / "unwritten_half.py", trials_only(fast))
    assert result.verdict == "fail"
    assert result.trials and not any(t.passed for t in result.trials)
    assert failing(result) and set(failing(result)) <= {"output-nonfinite", "wrong-output"}


# --- the float64 truth, and the fallback to the native reference ----------------------------------------


def test_a_reference_that_misses_the_bound_against_float64_is_the_one_compared_with(fast):
    result = api.check(MUTATION / "imprecise_problem.py", MUTATION / "imprecise_like_reference.py", trials_only(fast))
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert "reference-imprecise" in codes(result)
    assert all(t.passed and t.compared_to == "native" and t.max_abs_err == 0.0 for t in result.trials)


def test_a_candidate_exact_where_the_reference_is_imprecise_passes_against_float64(fast):
    """The fallback is for candidates that share the reference's rounding: one within the tolerance of the
    float64 truth passes, though the native reference misses it by about 1e-3."""
    result = api.check(MUTATION / "imprecise_problem.py", MUTATION / "imprecise_exact.py", trials_only(fast))
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert "reference-imprecise" not in codes(result)
    # float64's own rounding near 1e4 is about 2e-12
    assert all(t.passed and t.compared_to == "float64" and t.max_abs_err < 1e-9 for t in result.trials)


def test_the_truth_is_chosen_output_by_output(fast):
    """Of two outputs whose reference both round: the exact one passes against float64, the one rounded as
    the reference rounds passes against the reference; the finding names that output."""
    result = api.check(MUTATION / "imprecise_pair_problem.py", MUTATION / "imprecise_pair_mixed.py", trials_only(fast))
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    imprecise = [f for f in result.findings if f.code == "reference-imprecise"]
    assert imprecise and all("(output 1)" in f.message for f in imprecise)
    assert all(t.passed and t.compared_to == "native" for t in result.trials)


def test_an_exact_reference_is_compared_in_float64(fast):
    result = api.check(TOLERANCE_PROBLEM, MUTATION / "off_by_fraction.py", trials_only(fast))
    assert result.verdict == "pass"
    assert "reference-imprecise" not in codes(result)
    assert {t.compared_to for t in result.trials} == {"float64"}


# --- KernelBench's protocol, by what a candidate can observe of it --------------------------------------


def test_kernelbench_protocol_copies_no_state(fast):
    """param_order.py creates the reference's parameters in another order: under the strict protocol the
    reference's state is loaded into it and it passes; KernelBench's copies nothing, so it is wrong there."""
    candidate = CANDIDATES / "core" / "param_order.py"
    strict = api.check(SEED, candidate, trials_only(fast))
    kernelbench = api.check(SEED, candidate, trials_only(fast, protocol="kernelbench"))
    assert strict.verdict == "pass"
    assert kernelbench.verdict == "fail" and failing(kernelbench) == ["wrong-output"]
    assert all(not t.passed and t.compared_to == "native" for t in kernelbench.trials)


def test_kernelbench_protocol_fails_nan_where_the_reference_is_nan_as_allclose_does(fast):
    """KernelBench compares with `torch.allclose` without `equal_nan`: a candidate equal to a reference
    that outputs NaN fails there, as it does under KernelBench's own eval, and passes the strict rule."""
    problem, candidate = MUTATION / "nan_reference_problem.py", MUTATION / "nan_reference_copy.py"
    strict = api.check(problem, candidate, trials_only(fast))
    assert strict.verdict == "pass" and all(t.passed for t in strict.trials)
    kernelbench = api.check(problem, candidate, trials_only(fast, protocol="kernelbench"))
    assert kernelbench.verdict == "fail" and failing(kernelbench) == ["wrong-output"]
    assert all(not t.passed and t.compared_to == "native" for t in kernelbench.trials)


def test_kernelbench_protocol_builds_the_reference_under_seed_42(fast):
    """seed42_pinned.py seeds 42 itself and builds Model's parameters: equal to the reference's only if the
    reference was built under seed 42. It passes both protocols (the strict one copies the state)."""
    candidate = MUTATION / "seed42_pinned.py"
    for protocol in ("kernelbench", "strict"):
        result = api.check(SEED, candidate, trials_only(fast, protocol=protocol))
        assert result.verdict == "pass", (protocol, [(f.code, f.message) for f in result.findings])
        assert "protocol-difference" not in codes(result)
    kernelbench = api.check(SEED, candidate, trials_only(fast, protocol="kernelbench"))
    assert all(t.passed and t.compared_to == "native" and t.max_abs_err == 0.0 for t in kernelbench.trials)


# --- submit's hidden re-check ----------------------------------------------------------------------------


def test_hidden_recheck_fails_a_candidate_wrong_only_after_the_calls_it_was_judged_on(fast):
    candidate = MUTATION / "wrong_after_visible_trials.py"
    checked = api.check(TOLERANCE_PROBLEM, candidate, trials_only(fast))
    assert checked.verdict == "pass"  # the visible trials cannot see it
    submitted = api.submit(TOLERANCE_PROBLEM, candidate, trials_only(fast))
    assert all(t.passed for t in submitted.trials) and len(submitted.trials) == fast.check.trials
    assert submitted.verdict == "fail"
    hidden = [f for f in submitted.findings if f.stage == "hidden-recheck"]
    assert [(f.code, f.severity) for f in hidden] == [("wrong-output", "fail")]
    assert hidden[0].message == "hidden re-check failed: (0 / 5) trials passed; details are withheld"


def test_hidden_recheck_passes_an_honest_candidate(fast):
    submitted = api.submit(TOLERANCE_PROBLEM, MUTATION / "off_by_fraction.py", trials_only(fast))
    assert submitted.verdict == "pass"
    hidden = [f for f in submitted.findings if f.stage == "hidden-recheck"]
    assert [(f.code, f.severity) for f in hidden] == [("hidden-recheck", "info")]
    assert hidden[0].message == "hidden re-check: (5 / 5) trials passed"


# --- timed outputs: checks in every doubling of the measurement, beyond the guaranteed ones --------------


@pytest.mark.parametrize("offset_percent, tolerance", [(50, None), (200, 3e-4)], ids=["default", "user-tolerance"])
def test_timed_outputs_are_checked_beyond_the_guaranteed_positions(fast, offset_percent, tolerance):
    """200 timed calls: the schedule's checks in each of the spans [0, 16), [16, 32), ... [128, 256)
    (measure.CheckSchedule), more than the GUARANTEED_CHECKS a short measurement gets. The timed checks use
    the user's tolerance: outputs off by twice the default bound pass every check at --atol/--rtol 3e-4."""
    from kerneljudge.stages import measure

    timing = {"enabled": True, "baselines": False, "min_runs": 200, "max_runs": 200, "target_rel_sem": 0.0,
              "min_time_ms": 0.0, "budget_ms": 1e7}
    options = fast.replace(probes=False, timing=timing, overrides=(("offset_percent", str(offset_percent)),))
    if tolerance is not None:
        options = options.replace(check={"atol": tolerance, "rtol": tolerance})
    result = api.evaluate(TOLERANCE_PROBLEM, MUTATION / "off_by_fraction.py", options)
    # (the verdict is not asserted: the cross-check of claimed times can be upset by a loaded machine)
    assert all(t.passed for t in result.trials) and "timed-output-mismatch" not in codes(result)
    assert {t.atol for t in result.trials} == {tolerance or 1e-4}
    assert measure.GUARANTEED_CHECKS < result.timing["checked_outputs"]  # about checked_calls, drawn call by call


# --- the torch.compile baseline's cache ------------------------------------------------------------------


@pytest.mark.parametrize("ratio, planted_ms, trusted", [(1.0, 0.5, True), (1.9, 0.5, True), (1 / 1.9, 0.5, True),
                                                        (2.1, 0.5, False), (1 / 2.1, 0.5, False), (14.0, 0.5, False),
                                                        (1.0, 4.0 * 250, False), (1.0, 4.0 / 250, False)])
def test_a_cached_compile_time_is_used_only_beside_an_eager_time_that_agrees(fast, tmp_path, monkeypatch, ratio,
                                                                             planted_ms, trusted):
    """A planted cache entry whose eager time is `ratio` times this run's: within COMPILE_CACHE_FACTOR (2)
    both ways its compile time is used, beyond it torch.compile is measured again. The measurements are
    stand-ins (this is the decision, not the timing): eager takes 4 ms, a fresh compile 3 ms. The planted
    compile time must itself be within COMPILE_EAGER_FACTOR (20) of this run's eager time: one 250x off
    (a baseline inflated to flatter a candidate, issue 13) is measured again even beside an agreeing eager."""
    from kerneljudge import cache, timing
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import Judging

    eager_ms, compiled_ms = 4.0, 3.0
    measured: list[str] = []

    def fake_measure(j, process, model, stop, clock_ms, check=False, stage=measure.STAGE, part=(1, 1)):
        measured.append(model)
        return _stand_in(eager_ms if model == "eager" else compiled_ms), None, 0, None

    monkeypatch.setattr(measure, "_measure", fake_measure)
    options = fast.replace(cache_dir=tmp_path, timing={"enabled": True, "baselines": True, "compile_baseline": True})
    cache.save(tmp_path, "baselines", "the-problem", {"compile": {"median_ms": planted_ms},
                                                      "eager_median_ms": eager_ms * ratio})
    stop = timing.StopRule(min_runs=20, max_runs=20, min_time_ms=0.0, budget_ms=1e7, target_rel_sem=0.0)
    measured_now = measure._baselines(Judging(options, None, None, "cpu"), stop, lambda: 0.0, "the-problem")
    found, cached = measured_now.figures, measured_now.cached
    assert measured_now.eager_ms == eager_ms  # the watched calls' wait follows this run's eager time
    if trusted:
        assert measured == ["eager"] and cached == ["compile"] and found["compile"]["median_ms"] == planted_ms
    else:
        assert measured == ["eager", "compile"] and cached == [] and found["compile"]["median_ms"] == compiled_ms


def _stand_in(ms: float):
    """A measurement of 20 runs of `ms` each, in place of one the machine would make."""
    from kerneljudge import timing
    return timing.Measurement((ms,) * 20, timing.Stats.from_samples([ms] * 20), "min-runs", 3, 20 * ms)


def test_a_lanes_kept_baselines_are_reused_only_while_a_short_eager_time_agrees(fast, monkeypatch):
    """A batch lane's baselines (`Judging.baselines`) with stand-in measurements, since an evaluation's own
    are only as steady as the machine: measured in full, before its candidate is loaded, for the lane's first
    candidate of a problem (the pipeline's baselines stage); a later candidate's short eager run, its worker
    stopped meanwhile, is the cross-check's reference, and where it is not within COMPILE_CACHE_FACTOR (2) of
    the kept one, `baseline-disagrees`: the kept figures still give the speedups (this run was made with the
    candidate's code loaded), and the lane forgets them, so its next candidate measures them in full first."""
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import DeviceMemo, Judging

    medians, asked, frozen, copies = iter([1.0, 1.5, 3.0, 2.5, 2.0, 2.2, 2.4, 9.0]), [], [], []
    batches = {2.2: 12}  # a fast reference's short run times more batches than it must (its minimum time)

    def fake_measure(j, process, model, stop, clock_ms, check=False, stage=measure.STAGE, part=(1, 1),
                     batches_at_least=measure.MIN_CROSS_CHECK_BATCHES):
        short = stop is measure.KEPT_CHECK and batches_at_least == measure.KEPT_CHECK_BATCHES
        asked.append((model, "short" if short else "full", stage, len(frozen)))
        ms = next(medians)
        timer = SimpleNamespace(name=f"timer {ms}", slacks_ms=[ms] * batches.get(ms, batches_at_least))
        return _stand_in(ms), timer, 0, None

    @contextlib.contextmanager
    def worker_frozen():
        frozen.append(True)
        yield Frozen()  # none kept running
        frozen.remove(True)

    monkeypatch.setattr(measure, "_measure", fake_measure)
    j = Judging(fast.replace(timing={"enabled": True, "compile_baseline": False}), SimpleNamespace(frozen=worker_frozen),
                SimpleNamespace(call=lambda request: copies.append(request) or {"gbps": 12.0}
                                if request.op == "copy-bandwidth" else {}), "cpu")
    j.memo = DeviceMemo()

    def baselines():
        kept = j.kept_baselines("the-problem")
        measured = measure._kept(j, "the-problem", kept, lambda: 0.0) if kept else \
            measure.run_baselines(j, "the-problem", "the-device", lambda: 0.0)
        slacks.append(measured.timer.slacks_ms)
        return measured.figures["eager"]["median_ms"], measured.timer.name, measured.cached

    # the cross-check's reference (its batches' slacks): a short run's own, topped up to 8 with the last ones of the
    # full run (made before any candidate was loaded); a short run's own never serve another candidate
    slacks: list[list[float]] = []
    assert baselines() == (1.0, "timer 1.0", []) and asked == [("eager", "full", "baselines", 0)]
    assert j.memo.reference_slacks_ms["the-problem"] == [1.0] * 8
    assert j.memo.bandwidth_gbps == {"the-device": 12.0}  # settled there too, before any candidate is loaded
    settled = len(copies)
    assert baselines() == (1.0, "timer 1.5", ["eager"])  # 1.5 agrees: the kept figures, this run's timer
    assert asked[1] == ("eager", "short", measure.STAGE, 1) and not j.findings  # the worker stopped meanwhile
    assert slacks[-1] == [1.0] * 4 + [1.5] * 4 and j.memo.reference_slacks_ms["the-problem"] == [1.0] * 8
    assert baselines() == (1.0, "timer 3.0", ["eager"])  # 3.0 disagrees: still the kept figures, said, forgotten
    assert [f.code for f in j.findings] == ["baseline-disagrees"] and j.kept_baselines("the-problem") is None
    assert slacks[-1] == [3.0] * 4 and "the-problem" not in j.memo.reference_slacks_ms  # its own alone
    assert baselines() == (2.5, "timer 2.5", []) and asked[3] == ("eager", "full", "baselines", 0)
    assert len(copies) == settled  # the device's bandwidth settled once: a later full run keeps it
    assert baselines() == (2.5, "timer 2.0", ["eager"])  # measured again and kept: 2.0 agrees with 2.5
    assert slacks[-1] == [2.5] * 4 + [2.0] * 4
    assert baselines() == (2.5, "timer 2.2", ["eager"]) and slacks[-1] == [2.2] * 12  # enough of its own: all kept
    # the memo is the device's, its lanes' together: a lane whose run disagrees with the figures it read does
    # not forget newer ones another lane measured meanwhile
    read, newer = j.kept_baselines("the-problem"), {"eager": {"median_ms": 9.0}}
    j.baselines["the-problem"] = newer
    # (figures replaced since they were read: a run agreeing with the read ones is not topped up with the batches
    # of the newer figures' run)
    assert measure._kept(j, "the-problem", read, lambda: 0.0).timer.slacks_ms == [2.4] * 4 and not j.findings[1:]
    assert measure._kept(j, "the-problem", read, lambda: 0.0).figures == read  # 9.0 disagrees with 2.5
    assert j.kept_baselines("the-problem") is newer and j.memo.reference_slacks_ms["the-problem"] == [2.5] * 8


@pytest.mark.parametrize("when", ["at the stop", "while stopped"])
def test_a_worker_that_keeps_running_while_stopped_for_the_reference_is_tampering(fast, monkeypatch, when):
    """`WorkerProcess.frozen` names the worker's processes still running after its stop (continued by another's
    SIGCONT: tests/test_sandbox.py), and after the block those that used CPU time while all were stopped: the
    reference is not timed beside the first, its figures are not used after the second, and the candidate fails."""
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import Judging, StageEnded

    timed = []

    @contextlib.contextmanager
    def resisting():
        seen = Frozen(running=[4321] if when == "at the stop" else [])
        yield seen
        seen.ran = [4321]

    monkeypatch.setattr(measure, "_measure", lambda *args, **kwargs: timed.append(True) or (None, None, 0, "x"))
    j = Judging(fast.replace(timing={"enabled": True}), SimpleNamespace(frozen=resisting), None, "cpu")
    with pytest.raises(StageEnded):
        measure._kept(j, "the-problem", {"eager": {"median_ms": 1.0}}, lambda: 0.0)
    assert [(f.code, f.severity) for f in j.findings] == [("tampering", "fail")] and "4321" in j.findings[0].message
    assert timed == ([] if when == "at the stop" else [True])


# --- the parameter probes change buffers too -------------------------------------------------------------


def test_a_value_cached_from_a_buffer_is_stale_after_each_kind_of_change(fast):
    result = api.check(MUTATION / "buffer_problem.py", MUTATION / "stale_buffer.py", fast)
    assert all(t.passed for t in result.trials)  # the trials alone do not see it
    assert result.verdict == "fail" and "stale-parameters" in failing(result)
    assert set(failing(result)) <= {"stale-parameters", "range-mismatch"}  # a range probe may move the buffer too
    stale = {f.details["change"]: f for f in result.findings if f.code == "stale-parameters"}
    assert set(stale) == {"in-place", "replace", "data", "state-dict"}  # a buffer is replaced by a new tensor too
    assert stale["in-place"].details["parameters"] == ["scale"] and "scale changed alone" in stale["in-place"].message


def test_every_mutants_snippet_is_still_in_the_source():
    """A change to the judge that moves a mutated line leaves its mutant unappliable: the script refuses
    then (as `--list` does here), and this says so in CI, not at the next full mutation run."""
    done = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "scripts" / "mutation_check.py"), "--list"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "timed-mismatch-ignored" in done.stdout


def test_a_reference_that_cannot_be_timed_leaves_the_candidate_checked_not_timed(fast, monkeypatch):
    """The baselines stage comes before the build: a failure there (a referee's timed call that fails) must not
    end the evaluation before the candidate is checked. The candidate is checked, not timed, and the result says
    why."""
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import StageEnded

    def failing(*args, **kwargs):
        raise StageEnded()

    monkeypatch.setattr(measure, "_baselines", failing)
    result = api.evaluate(SEED, CANDIDATES / "core" / "correct.py", fast.replace(timing={"enabled": True}))
    assert result.verdict == "pass" and result.trials and result.timing is None
    assert "baseline-unavailable" in codes(result) and "baselines" in result.stage_ms
