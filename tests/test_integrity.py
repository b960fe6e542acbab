"""Regression tests for every run-time probe and integrity behaviour (shared/reference/integrity-catalog.md).

For each catalog row there is an exploit written for this suite (tests/candidates/integrity/) that the
judge must fail with a named finding, and an honest control that must pass without a failing finding.
All on the CPU with the seed problem level2/51 (preset small: batch 64, in 256, out 128). Side streams
(row 7) are GPU-only: their candidates live in tests/candidates/gpu/ and run on a GPU; on the CPU the
probe says it was skipped.
"""

from __future__ import annotations


import subprocess
import sys
import time

import pytest

from conftest import CANDIDATES, SEED, codes, parse_json
from kerneljudge import api
from kerneljudge.stages import measure

INTEGRITY = CANDIDATES / "integrity"
RELU = "level1/19"

# Timing on, but short: a few hundred ms per timed function, no baselines (torch.compile on a CPU is slow).
# A fixed count of timed calls: no convergence, and a budget the count always reaches first, so what the
# tests count does not depend on the machine's load. The timed outputs checked are drawn call by call
# (measure.CheckSchedule; 2 among the first calls always): where a test needs checked outputs, 200 calls.
TIMED_CALLS = 24
SHORT_TIMING = {"enabled": True, "baselines": False, "min_runs": TIMED_CALLS, "max_runs": TIMED_CALLS,
                "target_rel_sem": 0.0, "min_time_ms": 0.0, "budget_ms": 1e7}
CHECKED_TIMING = {**SHORT_TIMING, "min_runs": 200, "max_runs": 200}


def judge(options, name: str, problem: str = SEED, **changes):
    """Evaluate tests/candidates/integrity/NAME.py, or a shipped solution given as "@variant"."""
    solution = name if name.startswith("@") else INTEGRITY / f"{name}.py"
    return api.evaluate(problem, solution, options.replace(**changes) if changes else options)


def failing(result) -> set[str]:
    return {f.code for f in result.findings if f.severity == "fail"}


def messages(result, code: str) -> list[str]:
    return [f.message for f in result.findings if f.code == code]


def assert_caught(result, code: str) -> None:
    assert result.verdict == "fail", (result.verdict, [(f.code, f.message) for f in result.findings])
    assert code in codes(result), [(f.code, f.message) for f in result.findings]


def assert_clean(result) -> None:
    """Passes, with no failing finding and none of the warnings that would mean a false alarm."""
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert not failing(result)
    assert not codes(result) & {"native-threads", "tampering", "lint-monkeypatch"}
    assert all(t.passed for t in result.trials) and result.trials


# --- honest controls ------------------------------------------------------------------------------------


@pytest.mark.parametrize("problem,solution", [(SEED, "@pytorch"), (SEED, "@triton"), (RELU, "@pytorch")])
def test_shipped_solutions_raise_no_false_alarm(fast, problem, solution):
    result = judge(fast, solution, problem=problem)
    assert_clean(result)
    skipped = messages(result, "probe-skipped")
    assert len(skipped) == 1 and "streams" in skipped[0]  # row 7 is GPU-only
    trace = result.probes["op_trace"]
    if solution == "@triton":  # the interpreter's kernel object is found and counted
        assert trace["own_kernels"] == ["_kj_l2_51_row_kernel"]
        assert trace["own_calls"]["_kj_l2_51_row_kernel"] > 0
        assert "pytorch-rewrite" not in codes(result)
    else:
        assert trace["own_kernels"] == [] and "pytorch-rewrite" in codes(result)


def test_honest_rewrite_passes_every_probe(fast):
    result = judge(fast, "honest")
    assert_clean(result)
    assert codes(result) - {"preset-used", "probe-skipped", "pytorch-rewrite", "problem-degenerate"} == set()


# --- row 1: stale parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["stale_first_call", "stale_init"])
def test_cached_parameters_are_stale_after_in_place_change_and_replacement(fast, name):
    result = judge(fast, name)
    assert_caught(result, "stale-parameters")
    assert all(t.passed for t in result.trials)  # the strict trials alone do not see it
    found = messages(result, "stale-parameters")
    assert any("changed in place" in m for m in found) and any("replaced" in m for m in found)


def test_cache_that_misses_replaced_parameter_objects(fast):
    """Refreshes on in-place changes (version counters of the tensors it holds) but keeps the old
    objects: only the replacement probe can see it."""
    result = judge(fast, "stale_replaced")
    assert_caught(result, "stale-parameters")
    changes = {f.details["change"] for f in result.findings if f.code == "stale-parameters"}
    assert "replace" in changes and "in-place" not in changes  # (a state-dict round trip then misses too)


# The honest control of row 1 is the shipped @pytorch solution (cache keyed on id, _version,
# data_ptr), judged in test_shipped_solutions_raise_no_false_alarm.


# --- row 2: input mutation ------------------------------------------------------------------------------


def test_input_mutation(fast):
    result = judge(fast, "input_mutation")
    assert_caught(result, "input-mutation")
    assert all(t.passed for t in result.trials)  # the output itself is right
    assert [f.stage for f in result.findings if f.code == "input-mutation"] == ["check"]


# --- row 3: output aliasing -----------------------------------------------------------------------------


def test_output_alias_of_a_module_buffer(fast):
    result = judge(fast, "output_alias")
    assert_caught(result, "output-alias")
    assert failing(result) == {"output-alias"}
    assert "buffer result" in messages(result, "output-alias")[0]


def test_output_buffer_reused_across_calls(fast):
    result = judge(fast, "reused_output")
    assert all(t.passed for t in result.trials)  # every single output is right when it is returned ...
    assert_caught(result, "output-alias")  # ... but the next call overwrites it
    assert "previous result" in messages(result, "output-alias")[0]


# --- row 4: memo by address or identity -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["memo_address", "memo_identity"])
def test_memo_by_address_or_identity(fast, name):
    result = judge(fast, name)
    assert_caught(result, "stale-inputs")
    assert failing(result) == {"stale-inputs"}
    assert all(t.passed for t in result.trials)


def test_memo_by_sampled_content_never_hits_while_timed(fast):
    # memo_sampled.py would turn timing into lookups if the timed input sets kept their values; they are
    # refilled each round, so a memo keyed on address and sampled values never hits (the witness raises
    # on a hit), and memo_sampled.py is just an honest, slower candidate
    witness = judge(fast, "memo_hit_raises", timing=SHORT_TIMING)
    assert witness.verdict == "pass", [f.message for f in witness.findings if f.severity == "fail"]
    assert witness.timing["candidate"]["n"] == TIMED_CALLS  # more calls than input sets: every set came round again
    assert judge(fast, "memo_sampled", timing=SHORT_TIMING).verdict == "pass"


# --- row 5: replay while being timed --------------------------------------------------------------------


def test_replay_during_timing_is_caught_by_the_timed_output_check(fast):
    """The referee copies each checked timed output when it is taken and compares them after the timing (stage
    "timed-checks": the reference's outputs drawn and compared off the device's exclusive time)."""
    result = judge(fast, "replay_after_warmup", timing=CHECKED_TIMING)
    assert all(t.passed for t in result.trials)  # honest through the trials and the probes ...
    assert not failing(result) - {"timed-output-mismatch", "impossible-speed"}
    assert_caught(result, "timed-output-mismatch")  # ... and caught while timed, by the checks after it
    assert result.timing["checked_outputs"] >= 2 and "timed-checks" in result.stage_ms


def test_timed_outputs_beyond_the_referees_budget_are_compared_at_once(fast, monkeypatch):
    """Beyond the referee's budget for held outputs (none here: 0 bytes) each checked timed output is compared
    when it is taken, inside the timing: a replay while timed fails the same, with no stage after the timing."""
    from kerneljudge.stages import measure

    monkeypatch.setattr(measure, "HELD_BYTES_MAX", 0)
    result = judge(fast, "replay_after_warmup", timing=CHECKED_TIMING)
    assert_caught(result, "timed-output-mismatch")
    assert "timed-checks" not in result.stage_ms and result.timing["checked_outputs"] >= 2, result.stage_ms


def test_a_replay_after_the_first_few_hundred_timed_calls_is_checked(fast):
    """512 timed calls (the 2 guaranteed checks among the first 10), the last ~270 replayed: the checks reach
    every doubling of the measurement (measure.CheckSchedule), so some land among the replayed calls (about 11
    expected at 64 checks, none with odds near 1e-5). Checks drawn one by one with probability 1/8 up to a total
    were all spent on the first calls (~130 at 16, ~190 at 24), as the mutant `timed-checks-first-span-only`
    spends them."""
    long = {**SHORT_TIMING, "min_runs": 10, "max_runs": 512, "checked_calls": 64}
    result = api.evaluate(SEED, INTEGRITY / "replay_late.py", fast.replace(timing=long, probes=False))
    assert all(t.passed for t in result.trials)
    assert_caught(result, "timed-output-mismatch")
    assert "impossible-speed" not in codes(result)  # its time is a real pass over the input: only a check sees it


def test_honest_timing_control(fast):
    result = judge(fast, "@pytorch", timing=CHECKED_TIMING)
    assert_clean(result)
    assert not codes(result) & {"timed-output-mismatch", "impossible-speed"}
    assert result.timing["checked_outputs"] >= 2


# --- row 6: unwritten output (best effort on the CPU) ---------------------------------------------------


def test_half_written_empty_output(fast):
    result = judge(fast, "unwritten_half")
    assert result.verdict == "fail"
    assert codes(result) & {"unwritten-output", "output-nonfinite", "wrong-output"}


# --- row 8: threads -------------------------------------------------------------------------------------


def test_thread_that_writes_the_output_after_return(fast):
    result = judge(fast, "thread_late_write")
    assert result.verdict == "fail"
    assert codes(result) & {"wrong-output", "output-nonfinite", "thread-spawn"}
    assert "lint-threading" in codes(result)


def test_thread_left_running_after_return(fast):
    result = judge(fast, "thread_left_running")
    assert_caught(result, "thread-spawn")
    assert failing(result) == {"thread-spawn"}
    assert "kj-test-helper" in messages(result, "thread-spawn")[0]
    assert "lint-threading" in codes(result)


# --- row 9: lazy outputs --------------------------------------------------------------------------------


@pytest.mark.parametrize("name,says", [("lazy_subclass", "subclass of torch.Tensor"),
                                       ("lazy_object", "returned Deferred, not a tensor")])
def test_lazy_outputs(fast, name, says):
    result = judge(fast, name)
    assert_caught(result, "output-type")
    assert says in messages(result, "output-type")[0]


# --- row 10: tampering ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name,target", [
    ("tamper_clock", "time.perf_counter"),
    ("tamper_allclose", "torch.allclose"),
    ("tamper_judge", "kerneljudge.worker.server.poison_free_memory"),
    ("tamper_disguised", "torch.allclose"),  # forged co_filename and __wrapped__: still not torch's wrapper
])
def test_tampering_at_import(fast, name, target):
    result = judge(fast, name)
    assert_caught(result, "tampering")
    assert target in messages(result, "tampering")[0]
    assert [f.severity for f in result.findings if f.code == "lint-monkeypatch"][:1] == ["warn"]


@pytest.mark.parametrize("name,says", [
    ("tamper_code", "kerneljudge.proc.tensorwire.tensors_of.__code__"),  # same object, new code
    ("clock_via_gc", "the judge's bound clock"),  # the guard's own fields
])
def test_tampering_deeper_than_names(fast, name, says):
    result = judge(fast, name, timing=SHORT_TIMING)
    assert result.verdict == "fail"
    assert_caught(result, "tampering")
    assert any(says in m for m in messages(result, "tampering"))


def test_work_done_late_where_the_worker_copies_the_output_is_tampering(fast):
    """The product runs in a patched `ctypes.string_at`, where the worker copied the output's bytes: outside the
    timed call, and right for every output the judge reads (a 20x speedup on the CPU before the standard
    library's modules the worker uses were watched whole)."""
    result = judge(fast, "defer_ctypes", timing=SHORT_TIMING)
    assert result.verdict == "fail" and result.timing is None, result.findings
    assert_caught(result, "tampering")
    assert "ctypes.string_at" in messages(result, "tampering")[0]


def test_a_patch_made_while_timed_and_undone_at_its_first_use_is_tampering(fast):
    """Made during a timed batch and undone by the request that uses it (the output's copy): the worker's check
    before that request's own work sees it."""
    result = judge(fast, "defer_undone", timing=CHECKED_TIMING)
    assert all(t.passed for t in result.trials) and result.verdict == "fail", result.findings
    assert_caught(result, "tampering")
    assert "ctypes.string_at" in messages(result, "tampering")[0]


@pytest.mark.parametrize("hook,says", [
    ("audit", "sys.addaudithook"), ("profile", "sys.setprofile"), ("mode", "torch function or dispatch mode"),
    ("kernel", "aten::clone's kernels"), ("method", "torch.Tensor.numpy")])
def test_a_hook_that_runs_code_at_the_workers_later_calls_is_tampering(fast, tmp_path, hook, says):
    """Each way to run code at a call the worker makes after the candidate's (an audit hook, a profile
    function, a torch function mode or an aten kernel left set, a method shadowing torch's): `tampering`, the
    candidate's own forward honest."""
    source = (INTEGRITY / "hook_left_set.py").read_text().replace('HOOK = "audit"', f'HOOK = "{hook}"')
    candidate = tmp_path / f"hook_{hook}.py"
    candidate.write_text(source)
    result = api.evaluate(SEED, candidate, fast)
    assert result.verdict == "fail", result.findings
    assert_caught(result, "tampering")
    assert any(says in m for m in messages(result, "tampering")), messages(result, "tampering")


def test_a_default_device_set_at_import_is_not_a_hook(fast, tmp_path):
    """torch.set_default_device leaves torch's own mode (DeviceContext) entered: honest, not `tampering`."""
    source = (INTEGRITY / "hook_left_set.py").read_text().replace('HOOK = "audit"', 'HOOK = "default-device"')
    candidate = tmp_path / "default_device.py"
    candidate.write_text(source)
    result = api.evaluate(SEED, candidate, fast)
    assert result.verdict == "pass" and "tampering" not in codes(result), result.findings


def test_libraries_that_add_an_audit_hook_of_their_own_are_imported_before_the_guard_binds():
    """filelock adds a fork-safety audit hook when imported on Python 3.12+ (torch.compile's inductor imports it):
    imported after the guard bound, an honest torch.compile candidate would be `tampering`."""
    code = ("import sys, kerneljudge.worker.server\n"
            "from kerneljudge.worker.guard import IMPORTED_FIRST, Guard\n"
            "guard = Guard.bind()\n"
            "print(all(name in sys.modules for name in IMPORTED_FIRST), guard.tampered())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["True", "[]"], done.stderr[-2000:]


def test_forged_replies_on_the_result_channel(fast):
    # every request carries a fresh nonce that its reply must echo: a message written by the candidate
    # into the channel is seen as what it is, and the run stops there
    result = judge(fast, "forge_channel", timing=SHORT_TIMING)
    assert result.verdict == "fail"
    assert [f.code for f in result.findings if f.severity == "fail"] == ["tampering"]
    assert "not the reply" in messages(result, "tampering")[0]
    assert result.timing is None and not result.trials


def test_skipping_work_when_it_sees_it_is_timed(fast):
    # the candidate can see from its call stack that it is timed, but not which outputs are checked:
    # that is drawn after each call returns
    result = judge(fast, "skip_when_timed", timing=CHECKED_TIMING)
    assert all(t.passed for t in result.trials)
    assert_caught(result, "timed-output-mismatch")


def test_changing_its_inputs_only_while_timed_is_input_mutation(fast):
    """Right outputs, computed in place in the input on the timed calls only: the check and the probes see an
    honest candidate; a checked timed call's inputs, compared as it left them, do not."""
    result = judge(fast, "mutate_when_timed", timing=CHECKED_TIMING)
    assert all(t.passed for t in result.trials) and result.verdict == "fail", result.findings
    assert_caught(result, "input-mutation")
    assert messages(result, "input-mutation")[0].startswith("timed call ")


def test_an_input_overwritten_then_repointed_at_a_copy_is_caught(fast):
    """`x.set_(saved)` after writing into x: the tensor object looks untouched, the caller's memory is not."""
    assert_caught(judge(fast, "mutate_then_repoint", probes=False), "input-mutation")


def test_an_input_tensor_pointed_at_the_output_is_caught(fast):
    """`x.set_(y)`, the memory it was given untouched: the caller's tensor changed all the same."""
    assert_caught(judge(fast, "repoint_only", probes=False), "input-mutation")


@pytest.mark.parametrize("name,replaced", [("wrap_get_inputs", "the problem module.get_inputs"),
                                           ("wrap_torch_rand", "torch.rand")])
def test_a_candidate_wrapping_what_draws_the_inputs_is_tampering(fast, name, replaced):
    result = judge(fast, name, probes=False)
    assert_caught(result, "tampering")
    assert replaced in " ".join(messages(result, "tampering"))


def test_a_candidate_hanging_only_while_timed_is_stopped_after_its_batchs_limit(fast, monkeypatch):
    """A batch may take TIMED_BATCH_REFERENCE_FACTOR times the reference's time for its calls, at least
    TIMED_BATCH_MIN_S (here 3 s, a minute by default): the worker is stopped then (`timeout`, naming that
    limit), long before its own --timeout (here 40 s), and the timing lock it held is free again."""
    monkeypatch.setattr(measure, "TIMED_BATCH_MIN_S", 3.0)
    started = time.monotonic()
    result = judge(fast, "hang_when_timed", timing=CHECKED_TIMING, worker={"timeout_s": 40.0})
    assert time.monotonic() - started < 35, result.stage_ms
    assert all(t.passed for t in result.trials) and result.verdict == "error", result.findings
    assert [f.code for f in result.findings if f.severity == "error"] == ["timeout"], result.findings
    assert "a timed batch of" in messages(result, "timeout")[0]


# --- row 11: seeds --------------------------------------------------------------------------------------


def _errors(result) -> tuple:
    """The trials' errors: what other inputs change (the mean error too: the largest is often one ulp)."""
    return tuple((t.max_abs_err, t.mean_abs_err, t.worst_index) for t in result.trials)


def test_secret_seeds_differ_between_runs_and_a_given_seed_repeats(fast):
    quick = fast.replace(probes=False, check={"trials": 2})
    first, second = judge(quick, "honest"), judge(quick, "honest")
    assert first.seed != second.seed and first.to_json()["seed"] == first.seed  # told once the run is over
    assert _errors(first) != _errors(second)  # other inputs, so other errors
    assert _errors(judge(quick.replace(check={"trials": 2, "seed": first.seed}), "honest")) == _errors(first)
    seeded = quick.replace(check={"trials": 2, "seed": 123})
    third, fourth = judge(seeded, "honest"), judge(seeded, "honest")
    assert third.to_json()["seed"] == 123
    assert _errors(third) == _errors(fourth)


def test_cli_json_shows_the_seed_given_or_drawn(kj):
    path = str(INTEGRITY / "honest.py")
    common = ("eval", SEED, path, "--device", "cpu", "--no-timing", "--no-probes", "--trials", "1", "--json",
              "--no-store")
    code, out, err = kj(*common, "--seed", "123")
    assert code == 0, err
    assert parse_json(out)["seed"] == 123
    code, out, err = kj(*common)
    assert code == 0, err
    drawn = parse_json(out)["seed"]
    assert isinstance(drawn, int) and drawn != 123 and f"--seed {drawn}" in parse_json(out)["reproduce"]


# --- row 12: static lint findings are warnings ----------------------------------------------------------


def test_try_except_fallback_is_a_warning_only(fast):
    result = judge(fast, "lint_fallback")
    assert result.verdict == "pass"
    assert not failing(result)
    assert [f.severity for f in result.findings if f.code == "lint-fallback"] == ["warn"]


# --- rows 12-13: op trace -------------------------------------------------------------------------------


def test_decoy_triton_kernel(fast):
    """Defined, never launched; forward computes with ops the reference never calls: a decoy."""
    result = judge(fast, "decoy_triton")
    assert_caught(result, "decoy-kernel")
    assert failing(result) == {"decoy-kernel"}
    trace = result.probes["op_trace"]
    assert trace["own_calls"] == {"_row_kernel": 0}
    assert trace["reference_ops_called"] == []


def test_reference_fallback_triton(fast):
    """Defined, never launched; forward runs the reference's own operations (nn.Linear's addmm and the
    rest), so every heavy op of the reference shows up in its call: a reference fallback, not a decoy."""
    result = judge(fast, "fallback_triton")
    assert_caught(result, "reference-fallback")
    assert "decoy-kernel" not in codes(result)
    trace = result.probes["op_trace"]
    assert trace["own_calls"] == {"_gemm_mean_kernel": 0}
    assert trace["reference_ops_called"] == trace["reference_heavy_ops"] != []


# --- row 14 (protocol): KernelBench's protocol passes what the strict one fails --------------------------


def test_kernelbench_protocol_passes_stale_cache_but_reports_the_difference(fast):
    result = judge(fast, "stale_first_call", protocol="kernelbench")
    assert result.verdict == "pass"
    difference = messages(result, "protocol-difference")
    assert len(difference) == 1 and "stale-parameters" in difference[0]
    found = next(f for f in result.findings if f.code == "protocol-difference")
    assert found.details["kernelbench_verdict"] == "pass" and found.details["strict_verdict"] == "fail"


def test_kernelbench_protocol_honest_control(fast):
    result = judge(fast, "honest", protocol="kernelbench")
    assert result.verdict == "pass"
    assert "protocol-difference" not in codes(result) and not failing(result)


# --- row 15: nondeterminism / garbage reads -------------------------------------------------------------


def test_output_drifting_with_a_call_counter(fast):
    result = judge(fast, "nondeterministic_counter")
    assert_caught(result, "nondeterministic")
    assert all(t.passed for t in result.trials)


def test_random_noise_above_tolerance(fast):
    result = judge(fast, "noisy")
    assert_caught(result, "wrong-output")
    assert not any(t.passed for t in result.trials)


# --- row 16: impossible speed (the floor logic, in process) ---------------------------------------------


@pytest.mark.parametrize("bandwidth_gbps,impossible", [(1e-6, True), (1e6, False)])
def test_impossible_speed_floor(fast, tmp_path, bandwidth_gbps, impossible):
    """At an absurdly low bandwidth the floor is hours: any real time is under half of it. At an absurdly
    high one it is nothing. The floor's bytes come from the referee: x read once, y written once. (Such a
    bandwidth in the cache is measured again: tests/test_sandbox.py.)"""
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import Judging

    judging = Judging(fast.replace(cache_dir=tmp_path), None, None, "cpu", moved_bytes=2 * 64 * 256 * 4)
    floor = measure._floor(judging, bandwidth_gbps, "measured", 0.05)
    assert ("impossible-speed" in {f.code for f in judging.findings}) is impossible
    assert (0.05 < measure.IMPOSSIBLE_FRACTION * floor["floor_ms"]) is impossible


def test_floor_bytes_come_from_the_reference(fast):
    result = judge(fast, "honest", timing=SHORT_TIMING)
    assert result.timing["floor"]["bytes"] == 2 * 64 * 256 * 4  # x read once, y written once (float32)
    assert "impossible-speed" not in codes(result)
