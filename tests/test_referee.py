"""The referee split (issue: "Referee"): attacks written against the judge's own code, each beside an
honest control. The reference, the comparison, the tolerances, the checked outputs, the statistics and
the baselines live outside the candidate's process, so what the candidate changes in its own process
does not reach them; what its worker claims about time is checked against the judge's own clock.
"""

from __future__ import annotations

import json
import math
import random
import time
import types
from pathlib import Path

import pytest
import torch
from conftest import CANDIDATES, SEED, codes

from kerneljudge import api, protocol, timing
from kerneljudge.proc import deviceshare, perturb
from kerneljudge.proc.inputs import make_inputs
from kerneljudge.proc.timed import TimedModel
from kerneljudge.options import TimingOptions
from kerneljudge.referee import compare
from kerneljudge.stages import measure
from kerneljudge.stages.context import fingerprints_agree
from kerneljudge.stages.measure import CPU_FLUSH_REST_MS, Pacer, RemoteTimer
from kerneljudge.timing import IterationCall

REFEREE = CANDIDATES / "referee"
# a fixed count of timed calls (no convergence, a budget the count reaches first): nothing here depends on
# the machine's load but the cross-check's own figures, which are medians over the batches
SHORT_TIMING = {"enabled": True, "baselines": False, "min_runs": 24, "max_runs": 24, "target_rel_sem": 0.0,
                "min_time_ms": 0.0, "budget_ms": 1e7}


def judge(options, name: str, **changes):
    return api.evaluate(SEED, REFEREE / f"{name}.py", options.replace(**changes) if changes else options)


def failing(result) -> set[str]:
    return {f.code for f in result.findings if f.severity in ("fail", "error")}


def test_a_hook_that_repairs_outputs_when_the_reference_runs_has_nothing_to_repair(fast):
    # row 19: in one process the reference's first module call would trigger the repair before the
    # comparison; here the reference runs in the referee, so the zeros are what is compared
    result = judge(fast, "hook_repair")
    assert result.verdict == "fail"
    assert "wrong-output" in failing(result)
    assert all(not t.passed for t in result.trials)


def test_rebinding_the_judges_modules_in_the_candidates_process_changes_nothing(fast):
    # rows 20-22: the comparison, tolerance and constants it rebinds are copies in its own interpreter
    result = judge(fast, "rebind_judge", timing=SHORT_TIMING)
    assert result.verdict == "fail"
    assert "wrong-output" in failing(result)
    assert {t.atol for t in result.trials} == {1e-4}  # the judge's tolerance, as a plain float
    assert all(type(t.atol) is float for t in result.trials)


def test_a_worker_that_draws_inputs_of_its_own_choosing_only_fails_itself(fast):
    # the worker draws each call's inputs from the seed; this one draws the first inputs every time
    result = judge(fast, "fixed_inputs", check={"trials": 3}, probes=False)
    assert result.verdict == "fail" and "wrong-output" in failing(result), [(f.code, f.message) for f in result.findings]
    assert result.trials[0].passed and not all(t.passed for t in result.trials)  # right on the first draw only


def test_a_worker_that_skips_the_parameter_changes_only_fails_itself(fast):
    # the worker makes the probes' parameter changes on ModelNew's entries; this one skips them:
    # its fingerprints differ from the referee's, the referee's entries are sent instead, and the replaced
    # judge function is named
    result = judge(fast, "skipped_changes", check={"trials": 2})
    assert all(t.passed for t in result.trials), [(f.code, f.message) for f in result.findings]
    assert result.verdict == "fail" and failing(result) == {"tampering"}, [(f.code, f.message) for f in result.findings]
    assert result.probes["parameter_changes_sent"] >= 1


def test_a_workers_absurd_memory_figures_neither_crash_the_judge_nor_count(fast):
    result = judge(fast, "forged_memory", check={"trials": 2}, probes=False)
    # the guard names the judge functions it replaced; the evaluation still ends with its memory block
    assert failing(result) == {"tampering"} and all(t.passed for t in result.trials), result.findings
    memory = result.memory
    assert memory["footprint"]["total_bytes"] > 0  # the referee's, not the worker's string
    # the worker's figures are refused (malformed) or not counted, so the judge's peaks are not built on them
    assert 0 < memory["judge_peak_bytes"] < 1 << 40 and 0 < memory["processes_peak_sum_bytes"] < 1 << 40
    assert "worker" not in memory["stages"]["check"]  # "many" is no byte count


TIED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.a = nn.Linear(n, n)
        self.b = nn.Linear(n, n)
        self.b.weight = self.a.weight  # one tensor under two names


    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def get_inputs():
    return [torch.rand(4, 16)]


def get_init_inputs():
    return [16]
"""


CLAMPS_ITSELF = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        with torch.no_grad():
            self.w.clamp_(min=0.0)  # the reference changes its own state when called
        return x * self.w


def get_inputs():
    return [torch.rand(4, 16)]


def get_init_inputs():
    return [16]
"""


BUILT_FROM_THE_PROCESS = """import os

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        torch.manual_seed(os.getpid())  # the constructor draws from its own seed, not the judge's
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.w


def get_inputs():
    return [torch.rand(4, 16)]


def get_init_inputs():
    return [16]
"""


MASKED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))
        self.register_buffer("mask", torch.where(torch.arange(n) % 2 == 0, 0.0, float("-inf")))

    def forward(self, x):
        return torch.softmax(x * self.w + self.mask, dim=-1)


def get_inputs():
    return [torch.rand(4, 16)]


def get_init_inputs():
    return [16]
"""


def honest_pass(options, folder, source: str):
    """The problem `source` judged with itself as the candidate (Model renamed ModelNew): it passes."""
    problem, honest = folder / "problem.py", folder / "honest.py"
    problem.write_text(source)
    honest.write_text(source.replace("class Model(", "class ModelNew("))
    result = api.evaluate(problem, honest, options, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    return result


def test_a_reference_that_changes_its_own_state_is_followed_or_its_entries_sent(fast, tmp_path):
    # the worker makes the probes' changes on ModelNew's own entries: the honest candidate clamps them when
    # called, as the reference clamps its own, so they follow the referee's and nothing is sent ...
    result = honest_pass(fast, tmp_path, CLAMPS_ITSELF)
    assert result.probes.get("parameter_changes_sent", 0) == 0, result.probes
    # ... one that clamps a copy keeps its entries as loaded: the changes made on them differ from the
    # referee's (the fingerprints say so), the referee's entries are sent instead, and it passes
    candidate = tmp_path / "clamps_a_copy.py"
    candidate.write_text(CLAMPS_ITSELF.replace("class Model(", "class ModelNew(").replace(
        "        with torch.no_grad():\n            self.w.clamp_(min=0.0)  # the reference changes its own state when "
        "called\n        return x * self.w", "        return x * self.w.clamp(min=0.0)"))
    result = api.evaluate(tmp_path / "problem.py", candidate, fast, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert result.probes["parameter_changes_sent"] >= 1


def test_the_worker_builds_the_references_state_itself_unless_it_comes_out_otherwise(fast, tmp_path):
    # the worker builds its copy of the reference's state from the run's seeds (nothing sent) ...
    checked = fast.replace(probes=False)
    assert honest_pass(checked, tmp_path, TIED).memory["reference_state"] == "built in the worker"
    # ... where its build differs from the referee's (a constructor seeded by its process id), the digests
    # say so and ModelNew is built again with the referee's state sent: the honest candidate passes
    result = honest_pass(checked, tmp_path, BUILT_FROM_THE_PROCESS)
    assert result.memory["reference_state"] == "sent by the referee"


@pytest.mark.parametrize("in_host", [True, False])  # the CPU's CRC, and the GPU's weighted halves on CPU tensors
def test_the_state_digest_tells_apart_what_a_sum_would_not(in_host):
    def digest(t):
        return int(perturb.entry_checksum(t, {}, in_host=in_host))

    weight = torch.randn(5000, 1000, dtype=torch.float64)  # two blocks (PERTURB_BLOCK elements at a time)
    changed = {name: weight.clone() for name in ("ulp", "rows", "signs", "row_negated")}
    changed["ulp"][-1, -1] = torch.nextafter(changed["ulp"][-1, -1], torch.tensor(9.0, dtype=torch.float64))
    changed["rows"][[0, 4500]] = changed["rows"][[4500, 0]]
    changed["signs"][0, :2] *= -1  # two signs flipped: each flip alone changes the same top bit
    changed["row_negated"][7] *= -1
    seen = [digest(weight), digest(weight.flip(1)), digest(weight.float())] + [digest(c) for c in changed.values()]
    assert len(set(seen)) == len(seen)
    assert digest(weight.t()) == digest(weight.t().contiguous())  # its logical order, not its strides
    assert digest(torch.zeros(2, 3)) != digest(torch.zeros(3, 2)) != digest(torch.zeros(6))  # the shape counts
    pair = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex128)
    assert digest(pair) != digest(pair.conj().resolve_conj())  # both elements conjugated
    assert digest(pair.conj()) == digest(pair.conj().resolve_conj())  # a lazy conjugate, as its values
    assert digest(torch.tensor([1 + 2j])) != digest(torch.tensor([1 - 2j]))
    assert digest(torch.full((3,), float("-inf"))) == digest(torch.full((3,), float("-inf")))
    assert digest(torch.tensor([True, False])) != digest(torch.tensor([False, True]))
    assert digest(torch.randn(4, dtype=torch.bfloat16).zero_()) == digest(torch.zeros(4, dtype=torch.bfloat16))


def test_a_buffer_of_minus_infinity_is_changed_alike_and_passes(fast, tmp_path):
    # its sum is -inf in both processes: the same fingerprint, neither a malformed number nor tampering
    assert not fingerprints_agree({"fingerprint": [10**400]}, [1.0])  # a forged figure disagrees, never raises
    result = honest_pass(fast, tmp_path, MASKED)
    assert result.memory["reference_state"] == "built in the worker" and "parameter_changes_sent" not in result.probes


def test_tied_weights_are_changed_alike_in_both_processes(fast, tmp_path):
    # the probes change one tensor under two names twice in the referee: the worker makes the changes on
    # ModelNew's entries, tied alike (and an honest candidate's replaced parameter is replaced under both names)
    result = honest_pass(fast, tmp_path, TIED)
    assert "a.weight" in result.probes["parameters_changed_alone"]["changed_alone"]
    assert "parameter_changes_sent" not in result.probes  # tied alike, never out of step
    # the same where the referee's state is sent (a constructor seeded by its process): ModelNew ties them
    seeded_by_process = TIED.replace("import torch\n", "import os\n\nimport torch\n", 1).replace(
        "super().__init__()", "super().__init__()\n        torch.manual_seed(os.getpid())")
    result = honest_pass(fast, tmp_path, seeded_by_process)
    assert result.memory["reference_state"] == "sent by the referee" and "parameter_changes_sent" not in result.probes


def test_a_candidate_holding_its_parameters_in_another_dtype_follows_the_changes(fast, tmp_path):
    # ModelNew keeps its weights in float64: the worker keeps its own float32 copy of the reference's entries
    # for them, makes the probes' changes on it as the referee does and writes them in, so nothing is sent
    # (made on the float64 entries, the changes would round otherwise and the fingerprints differ)
    problem, candidate = tmp_path / "problem.py", tmp_path / "float64_weights.py"
    problem.write_text(TIED.replace("        self.b.weight = self.a.weight  # one tensor under two names\n", ""))
    candidate.write_text(problem.read_text().replace("class Model(", "class ModelNew(").replace(
        "self.b = nn.Linear(n, n)", "self.b = nn.Linear(n, n).double()").replace(
        "return self.b(torch.tanh(self.a(x)))", "return self.b(torch.tanh(self.a(x)).double()).float()"))
    result = api.evaluate(problem, candidate, fast, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert "b.weight" in result.probes["parameters_changed_alone"]["changed_alone"]
    assert "parameter_changes_sent" not in result.probes, result.probes


def test_a_candidate_that_casts_its_parameters_when_first_called_needs_each_entry_sent_once(fast, tmp_path):
    # ModelNew turns its weights to float64 at its first call: the first change of each entry, made on the
    # float64 entry, rounds otherwise than the referee's, the referee's values are sent, and the worker keeps
    # them as its own copy; the later changes are made on that copy (no entry sent twice)
    problem, candidate = tmp_path / "problem.py", tmp_path / "casts_when_called.py"
    problem.write_text(TIED.replace("        self.b.weight = self.a.weight  # one tensor under two names\n", ""))
    candidate.write_text(problem.read_text().replace("class Model(", "class ModelNew(").replace(
        "return self.b(torch.tanh(self.a(x)))",
        "if self.b.weight.dtype != torch.float64:\n            self.b.double()\n"
        "        return self.b(torch.tanh(self.a(x)).double()).float()"))
    result = api.evaluate(problem, candidate, fast, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert 1 <= result.probes["parameter_changes_sent"] <= 2, result.probes  # b.weight's and b.bias's first


def test_claimed_times_that_do_not_add_up_are_not_believed(fast):
    # row 24 on the CPU: claims cut to 1% leave ~30 ms per call unexplained by the judge's clock
    result = judge(fast, "shrunk_times", timing=SHORT_TIMING)
    assert result.verdict == "fail"
    assert "timing-tampering" in failing(result)
    check = result.timing["cross_check"]
    assert check["excess_ms"] > check["tolerance_ms"]
    assert check["excess_ms"] > 50.0  # most of the hidden 99 ms per call shows
    assert len(check["batch_slacks_ms"]) > 1 and min(check["batch_slacks_ms"]) > check["reference_slack_ms"]  # every batch
    assert check["calls_per_batch"] >= 1 and check["reference_calls_per_batch"] >= 1


def test_claims_that_are_honest_only_while_the_judge_confirms_are_not_believed(fast):
    # the confirming rounds' batches go on from the measurement's call indices: nothing tells them apart
    result = judge(fast, "confirm_aware", timing=SHORT_TIMING)
    assert result.verdict == "fail"
    assert "timing-tampering" in failing(result), result.timing and result.timing["cross_check"]
    assert result.timing["cross_check"]["paired_excess_ms"] > 50.0  # most of the hidden 99 ms per call shows
    # over the line after the first rounds, so judged on the longer run of rounds, and still over it
    assert result.timing["cross_check"]["paired_rounds"] == measure.CONFIRM_ROUNDS + measure.CONFIRM_MORE_ROUNDS


def test_times_false_only_outside_the_turns_are_replaced_by_the_turns(fast, monkeypatch):
    # a red team's candidate told the turns by the gaps between its calls; this one by their indices (the
    # measurement's are 0..23 under SHORT_TIMING, the turns' go on from there): cleared in the turns, its claimed
    # 1 ms had been reported
    monkeypatch.setenv("KJ_TEST_LIE_BELOW", str(SHORT_TIMING["max_runs"]))
    result = judge(fast, "honest_in_turns", timing=SHORT_TIMING)
    check = result.timing["cross_check"]
    assert check["excess_ms"] > check["tolerance_ms"] and check["paired_excess_ms"] <= check["paired_tolerance_ms"], check
    assert "timing-from-turns" in {f.code for f in result.findings}
    assert result.timing["candidate"]["median_ms"] >= 50.0  # the 100 ms sleep, not the 1 ms it claimed


def test_times_from_turns_whose_outputs_are_unchecked_never_shorten_the_report(fast, monkeypatch):
    # the turns' calls are timed, not checked: one that idles there and returns its last output is reported at
    # its measured (checked) times, the slower of the two
    monkeypatch.setenv("KJ_TEST_LIE_BELOW", str(SHORT_TIMING["max_runs"]))
    result = judge(fast, "idle_in_turns", timing=SHORT_TIMING)
    assert result.timing["cross_check"]["excess_ms"] > result.timing["cross_check"]["tolerance_ms"]
    assert "timing-from-turns" not in {f.code for f in result.findings}
    assert result.timing["candidate"]["median_ms"] >= 50.0  # the 100 ms sleep of the measured calls


def test_the_same_slow_candidate_with_honest_times_passes(fast):
    result = judge(fast, "slow_honest", timing=SHORT_TIMING)
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings if f.severity != "info"]
    check = result.timing["cross_check"]
    # within the tolerance at once, or (another job loading the machine while only one side was timed) once the two
    # took turns: never accused either way
    assert check["excess_ms"] <= check["tolerance_ms"] or check["paired_excess_ms"] <= check["paired_tolerance_ms"]
    assert result.timing["candidate"]["median_ms"] >= 5.0  # the sleep is in the time


def test_forged_timing_numbers_are_refused_at_the_boundary(fast):
    result = judge(fast, "forged_samples", timing=SHORT_TIMING)
    assert result.verdict == "fail"
    assert "tampering" in failing(result)
    assert result.timing is None


def test_a_worker_saying_the_candidate_cannot_be_timed_is_tampering(fast):
    """Only the referee may answer a timing setup with `unavailable` (torch.compile failing on the reference);
    from the worker it is a forged reply: `tampering`, and the judge goes on to its result."""
    result = judge(fast, "forged_unavailable", timing=SHORT_TIMING)
    assert result.verdict == "fail" and "tampering" in failing(result), [(f.code, f.message) for f in result.findings]
    assert "judge-error" not in codes(result) and result.timing is None


def test_an_output_described_as_a_made_up_device_handle_is_refused(fast):
    """A forged CUDA IPC description (proc/deviceshare) from a worker whose probe the referee never opened
    (a CPU run: no probe) is a malformed reply, and the driver is never asked; on the CPU outputs cross
    through host memory, and the result says so."""
    result = judge(fast, "forged_handle")
    assert result.verdict == "fail" and "tampering" in failing(result)
    assert any("malformed" in f.message and "no sharing was agreed" in f.message
               for f in result.findings if f.code == "tampering"), \
        [(f.code, f.message) for f in result.findings]
    assert result.memory["outputs_cross"] == "host memory"


def test_the_range_plan_and_a_kept_plans_check_put_back_every_state_entry_they_moved():
    """The range plan moves each state entry it tries in place (no float64 copy of the model) and puts it back from
    its copy: with a clock that never ends its budget, every entry of a small model is tried, each call of the
    plan sees one entry moved at most (the one its move tried; none where the inputs are moved), and the model's
    state is the same bit for bit after (a moved weight left in place changes every later expectation). So does
    the check of a kept plan on a candidate's draw (ranges.kept): kept on the draw it was made on, with the same
    coverage; not kept on a narrower draw, where its moves miss bins of GELU's range they covered, and it says which
    site fell short; and its entries put back when the reference raises with one of them moved."""
    from kerneljudge.referee import ranges

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 4))
    before = {name: t.clone() for name, t in model.state_dict().items()}
    x = torch.randn(16, 8)
    moved_at_calls = []  # (the inputs moved?, the entries moved) at each call
    model.register_forward_pre_hook(lambda module, args: moved_at_calls.append((not torch.equal(args[0], x), [
        name for name, t in module.state_dict().items() if not torch.equal(t, before[name])])))
    plan = ranges.plan(model, [x], seed=3, clock_ms=lambda: 0.0)
    assert any(inputs for inputs, _ in moved_at_calls) and any(entries for _, entries in moved_at_calls)
    assert all(len(entries) <= (0 if inputs else 1) for inputs, entries in moved_at_calls), moved_at_calls
    moved_entries = [t for t in plan["probes"] if t["target"] in before]
    assert moved_entries, plan["probes"]
    moved_at_calls.clear()
    kept, short = ranges.kept(model, [x], 3, plan)  # the same draw: as much covered, the same rows
    assert kept["probes"] == plan["probes"] and kept["sites"] == plan["sites"] and short == []
    assert sum(1 for _, entries in moved_at_calls if entries) == len(moved_entries)
    kept, short = ranges.kept(model, [x * 0.01], 4, plan)  # a draw in a narrow band: the moves cover less there
    assert kept is None and len(short) == 1 and short[0].startswith("gelu#0: ") and "bins missed" in short[0], short

    def raise_when_moved(module, args):
        if any(not torch.equal(t, before[name]) for name, t in module.state_dict().items()):
            raise RuntimeError("the reference fails with a moved entry")

    hook = model.register_forward_pre_hook(raise_when_moved)
    with pytest.raises(RuntimeError, match="moved entry"):
        ranges.kept(model, [x], 3, plan)
    hook.remove()
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before), [
        name for name in before if not torch.equal(before[name], after[name])]


def test_a_shared_description_is_checked_before_the_driver_is_asked():
    """Malformed descriptions never reach the driver: wrong keys, a handle of the wrong length or not hex,
    a negative offset."""
    for description in ({"handle": "ab" * 64}, {"handle": "ab" * 63, "offset": 0}, {"handle": "zz" * 64, "offset": 0},
                        {"handle": "ab" * 64, "offset": -1}, {"handle": "ab" * 64, "offset": 0, "more": 1}, None):
        with pytest.raises(deviceshare.ShareError, match="malformed"):
            deviceshare.copy_shared(description, torch.float32, [4], torch.device("cpu"))


def test_the_reference_timed_again_gets_new_values_in_the_same_buffers():
    """The referee times the reference eager more than once an evaluation (eager, the cross-check's
    rounds): one TimedModel, redrawn (`TimedModel.redraw`): the same buffers, each set now holding its new
    seed's draw, and the bytes a call reads and writes measured by the first call alone."""
    problem = types.SimpleNamespace(get_inputs=lambda: [torch.randn(8, 4), 3])
    calls = []
    timed = TimedModel(lambda args: calls.append(args) or args[0] * 2, problem, torch.device("cpu"), [1, 2],
                       "host-clock", time.perf_counter_ns)
    described = timed.describe(True)
    buffers = [inputs[0] for inputs in timed.sets]
    timed.redraw([3, 4])
    assert all(inputs[0] is buffer for inputs, buffer in zip(timed.sets, buffers))
    for inputs, seed in zip(timed.sets, [3, 4]):
        assert torch.equal(inputs[0], make_inputs(problem, seed, torch.device("cpu"))[0])
    assert not torch.equal(timed.sets[0][0], make_inputs(problem, 1, torch.device("cpu"))[0])
    assert timed.describe(True) == described == {"input_sets": 2, "input_bytes": 8 * 4 * 4, "output_bytes": 8 * 4 * 4}
    assert len(calls) == 1


def test_a_timed_calls_refill_leaves_the_generators_as_the_candidate_left_them():
    """A timed call's inputs drawn right before it (every call on a CPU, a watched one on a GPU) reseed the
    generators to draw them; the candidate's next call must not see that (a changed `torch.initial_seed()` told
    a GPU candidate which call was watched): what it reads of the generators is what its own last call left."""
    problem = types.SimpleNamespace(get_inputs=lambda: [torch.randn(8, 4)])
    seen = []

    def candidate(args):
        seen.append((torch.initial_seed(), random.getstate()[1][:4], torch.get_rng_state().sum().item()))
        return args[0] * 2

    torch.manual_seed(5)
    timed = TimedModel(candidate, problem, torch.device("cpu"), [1, 2], "host-clock", time.perf_counter_ns)
    torch.manual_seed(5)
    timed.batch(0, 1, {0: 101})
    timed.batch(1, 1, {1: 102})
    timed.batch(2, 1, {2: 103})
    assert len(seen) == 3 and len(set(seen)) == 1 and seen[0][0] == 5, seen
    assert torch.equal(timed.sets[0][0], make_inputs(problem, 103, torch.device("cpu"))[0])  # still refilled


def test_a_watched_calls_values_are_written_after_its_flush_and_a_batchs_once_all_are_drawn():
    """proc/timed.py's order on a GPU, on a CPU model with its flush and its writes recorded: a batch's new values
    are all drawn before the first is written (the occupying copies back to back), and a watched call's, drawn
    after its hold and wait (`_gated`), are written right after the flush before it, so work that waits for them on
    the device can only run inside the call's events."""
    cpu = torch.device("cpu")
    problem = types.SimpleNamespace(get_inputs=lambda: [torch.randn(8, 4)])
    timed = TimedModel(lambda args: args[0] * 2, problem, cpu, [1, 2], "host-clock", time.perf_counter_ns)
    log, draw = [], timed._new_values
    timed._flusher = lambda: log.append("flush")
    timed._copy = lambda buffer, value: log.append(("write", buffer.data_ptr())) or buffer.copy_(value)
    timed._new_values = lambda i: log.append(("draw", i)) or draw(i)
    sets = [inputs[0].data_ptr() for inputs in timed.sets]
    timed._pending_refills = {0: 11, 1: 12}
    timed._refill_batch([0, 1])
    assert log == [("draw", 0), ("draw", 1), ("write", sets[0]), ("write", sets[1])]
    assert torch.equal(timed.sets[1][0], make_inputs(problem, 12, cpu)[0])
    log.clear()
    timed._pending_refills = {2: 13}
    timed._watched_values = (2, timed._new_values(2))  # as `_gated` leaves them
    timed._flush()
    assert log == [("draw", 2), "flush", ("write", sets[0])] and timed._watched_values is None
    assert torch.equal(timed.sets[0][0], make_inputs(problem, 13, cpu)[0])


def test_a_referee_set_up_again_times_the_new_problem():
    """The reference's timed sets are kept only while the same problem's reference is timed again: a second
    Setup in one referee process starts afresh (the byte counts are the new problem's)."""
    from pathlib import Path

    from kerneljudge import protocol
    from kerneljudge.referee.server import Referee

    kernelbench = Path(__file__).parents[2] / "shared" / "kernelbench"
    if not (kernelbench / "level1").is_dir():
        pytest.skip("KernelBench's problems are not in ../shared/kernelbench")

    def problem(name: str, **constants) -> dict:
        path = next(kernelbench.glob(f"level*/{name}*"))
        return {"path": str(path), "source": path.read_text(), "constants": constants}

    referee = Referee()
    referee.setup(protocol.Setup(problem("19_ReLU", batch_size=4, dim=64), 1, 2), [])
    first, _ = referee.time_setup(protocol.TimeSetup("calibration", [1, 2], "host-clock", describe=True), [])
    referee.setup(protocol.Setup(problem("12_Gemm", batch_size=8, in_features=32, out_features=16), 1, 2), [])
    second, _ = referee.time_setup(protocol.TimeSetup("eager", [3, 4], "host-clock", describe=True), [])
    assert (first["input_bytes"], first["output_bytes"]) == (4 * 64 * 4, 4 * 64 * 4)
    assert (second["input_bytes"], second["output_bytes"]) == (8 * 32 * 4, 8 * 16 * 4)
    assert referee.timed.problem is referee.session.problem


def test_baselines_are_timed_where_the_candidate_never_ran(fast):
    # row 23: a hook that sleeps 50 ms in every module call that is not the candidate's:
    # the eager reference (~0.3 ms at this size) is timed in the referee, untouched
    options = fast.replace(timing={**SHORT_TIMING, "baselines": True, "compile_baseline": False})
    result = judge(options, "baseline_sabotage")
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings if f.severity != "info"]
    assert result.timing["baselines"]["eager"]["median_ms"] < 25.0


def test_honest_float64_accumulation_thread_settings_and_derived_buffers_pass(fast):
    result = judge(fast, "float64_threads", timing=SHORT_TIMING)
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings if f.severity != "info"]
    assert not codes(result) & {"timing-tampering", "tampering", "stale-parameters"}


def test_an_honest_candidate_that_leaves_one_thread_is_not_taken_for_tampering(fast):
    # torch.set_num_threads(1) at import: its calls are shorter than the two-thread reference's, and a cache
    # flush soon after the previous one costs more; the judge rests before each timed request so that the
    # flush costs the same after any call (measure.Pacer)
    result = judge(fast, "threads_at_import", timing=SHORT_TIMING)
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings if f.severity != "info"]
    assert "timing-tampering" not in codes(result), result.timing["cross_check"]


class _FakeProcess:
    """A timed process on a fake clock: each batch takes 10 ms of which it claims 9."""

    def __init__(self, clock):
        self.clock = clock

    def call(self, request, limit=None):
        self.clock["ms"] += 10.0
        return {"samples_ms": [9.0] * request.count}


class _WatchedProcess:
    """A timed GPU worker on a fake clock: a batch of 8 calls claims 1 ms each and takes 10 ms, plus the
    device's wait before each watched call."""

    def __init__(self, clock):
        self.clock, self.requests = clock, []

    def call(self, request, limit=None):
        self.requests.append(request)
        self.clock["ms"] += 10.0 + len(request.watch) * request.watch_delay_ms
        return {"samples_ms": [1.0] * request.count, "unjoined": []}


class _AlwaysChoose(random.Random):
    def random(self) -> float:
        return 0.0


def test_watched_calls_are_refilled_calls_and_their_batches_are_not_cross_checked():
    """Nor are a watched batch's times samples: a watched call's inputs were written right before it, partly still in
    the L2, and the batch's other calls meet no cross-check."""
    clock = {"ms": 0.0}
    process = _WatchedProcess(clock)
    timer = RemoteTimer(process, 8, lambda: clock["ms"], watch_delay_ms=3.0)
    timer.time_calls([IterationCall(lambda i: None, i) for i in range(8)])  # the warm-up: nothing watched
    assert process.requests.pop(0).watch == [] and timer.slacks_ms == [(10.0 - 8.0) / 8]
    timer.slacks_ms.clear()
    timer.watches = measure.CheckSchedule(16, 1.0, frozenset(), _AlwaysChoose())  # every refilled call, up to the cap
    timer.watch_left = 6
    calls = [IterationCall(lambda i: None, i) for i in range(8)]
    timer.refills.update({2: 11, 5: 12})  # only these calls get new inputs in the first batch
    assert timer.time_calls(calls) == [None] * 8
    assert process.requests[0].watch == [2, 5] and process.requests[0].watch_delay_ms == 3.0
    assert timer.slacks_ms == [] and timer.means_ms == [1.0]  # a watched batch's hold is the judge's time, not the
    # cross-check's; nor is its mean the skew check's
    timer.refills.update({i: 20 + i for i in range(8, 16)})
    timer.time_calls([IterationCall(lambda i: None, i) for i in range(8, 16)])
    assert process.requests[1].watch == [8, 9, 10, 11]  # at most watch_left in all (WATCHED_CALLS at the start)
    assert timer.watched == {2, 5, 8, 9, 10, 11}
    timer.time_calls([IterationCall(lambda i: None, i) for i in range(16, 24)])
    assert process.requests[2].watch == [] and process.requests[2].watch_delay_ms == 0.0
    assert timer.slacks_ms == [(10.0 - 8.0) / 8] and timer.means_ms == [1.0, 1.0]


def test_the_judge_rests_before_each_timed_request_outside_the_time_it_measures():
    clock = {"ms": 0.0}
    slept = []

    def sleep_s(seconds):
        slept.append(seconds * 1e3)
        clock["ms"] += seconds * 1e3

    pacer = Pacer(CPU_FLUSH_REST_MS, lambda: clock["ms"], sleep_s)
    candidate = RemoteTimer(_FakeProcess(clock), 1, lambda: clock["ms"], pacer)
    reference = RemoteTimer(_FakeProcess(clock), 1, lambda: clock["ms"], pacer)  # in turns, as when confirming
    for timer in (candidate, reference, candidate):
        timer.time_calls([IterationCall(lambda i: None, 0)])
    assert slept == [CPU_FLUSH_REST_MS, CPU_FLUSH_REST_MS]  # none before the first request, one before each other
    assert candidate.slacks_ms == [1.0, 1.0] and reference.slacks_ms == [1.0]  # the rest is not the worker's
    clock["ms"] += 2 * CPU_FLUSH_REST_MS  # the judge was busy longer than the rest (checking an output)
    candidate.time_calls([IterationCall(lambda i: None, 1)])
    assert len(slept) == 2


def _received(*tensors: torch.Tensor) -> compare.Received:
    facts = [{"exact": True, "device": str(t.device)} for t in tensors]
    return compare.Received("tensor" if len(tensors) == 1 else "tuple", facts, list(tensors))


@pytest.mark.parametrize("case", ["close", "one-nan", "one-inf", "special-alike", "inf-for-finite", "far",
                                  "imprecise-reference", "second-output-off"])
def test_a_verdict_only_comparison_decides_as_the_full_one(case):
    """A timed output's check and a probe's compare for the verdict alone (compare.compare verdict_only): the
    verdict and the findings must be those of the full comparison, whatever the output holds."""
    g = torch.Generator().manual_seed(7)
    truth = torch.randn(3, 70_000, generator=g, dtype=torch.float64)  # several blocks of CLOSE_BLOCK on a CPU
    reference = truth.float()
    out = reference.clone()
    if case == "one-nan":
        out[1, 5] = float("nan")
    elif case == "one-inf":
        out[2, 69_999] = float("inf")
    elif case in ("special-alike", "inf-for-finite"):
        truth[0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")], dtype=torch.float64)
        reference = truth.float()
        out = reference.clone()
        if case == "inf-for-finite":
            out[0, 0] = 1.0  # a number where the truth is +inf
    elif case == "far":
        out[0, 100] += 1.0
    elif case == "imprecise-reference":  # the native reference misses float64: the candidate is held to it
        reference = (truth + 1e-3).float()
        out = reference.clone()
    second_truth = truth[:, :10].contiguous()
    second = second_truth.float()
    if case == "second-output-off":
        second[0, 0] += 1.0
    received, native, truths = _received(out, second), (reference, second_truth.float()), (truth, second_truth)
    outline = compare.Outline.of(native)
    full = compare.compare(4, received, outline, native, truths, 1e-4, 1e-4)
    quick = compare.compare(4, received, outline, native, truths, 1e-4, 1e-4, verdict_only=True)
    assert quick.trial.passed == full.trial.passed
    assert [(f.code, f.message) for f in quick.findings] == [(f.code, f.message) for f in full.findings]
    expected = case in ("close", "special-alike", "imprecise-reference")
    assert full.trial.passed is expected, (case, full.trial.message)
    if expected and case != "imprecise-reference":  # passed at once: no figures computed
        assert quick.trial.max_abs_err is None and quick.trial.mismatched == 0
        assert quick.trial.elements == out.numel() + second.numel()
    else:  # the full comparison's trial: its figures and message (a NaN among them: compared as JSON)
        assert json.dumps(quick.trial.to_json()) == json.dumps(full.trial.to_json())


@pytest.mark.parametrize("max_runs", [200, 1000, 5000])
def test_timed_checks_reach_every_doubling_of_the_measurement(max_runs):
    """The checked calls (measure.CheckSchedule, at the default checked_calls): drawn call by call, about the
    same number in each doubling span of the measured calls however long the timing runs, so a replay of its
    later half (enough to move the median) meets checks: about 4 at 1,000 calls, none with odds near e^-4."""
    opts = TimingOptions()
    counts, missed, trials = [], 0, 400
    for _ in range(trials):
        schedule = measure.CheckSchedule.planned(opts.checked_calls, max_runs, random.SystemRandom(),
                                                 at_least_per_span=measure.CHECKS_PER_SPAN_AT_LEAST,
                                                 forced=measure.GUARANTEED_CHECKS, forced_within=opts.min_runs)
        checked = [p for p in range(max_runs) if schedule.wants(p)]
        assert schedule.forced <= set(checked) and all(p < opts.min_runs for p in schedule.forced)
        later = [p for p in checked if p >= max_runs // 2]
        counts.append((len(checked), len(later)))
        missed += not later
    total, later = (sum(c[k] for c in counts) / trials for k in (0, 1))
    assert 0.6 * opts.checked_calls <= total <= 1.3 * opts.checked_calls, total
    assert later >= 2.5 and missed / trials <= 0.1, (later, missed)


def test_a_schedule_expects_at_least_its_floor_in_every_span_and_none_when_asked_for_none():
    long = measure.CheckSchedule.planned(8, 10**6, random.SystemRandom(), at_least_per_span=3.0)
    assert long.per_span == 3.0  # 8 spread over 17 spans would be under one per span
    assert not any(measure.CheckSchedule.planned(0, 1000, random.SystemRandom()).wants(p) for p in range(1000))
    short = [measure.CheckSchedule.planned(32, 16, random.SystemRandom()) for _ in range(500)]
    drawn = sum(schedule.wants(p) for schedule in short for p in range(16)) / (16 * 500)
    assert short[0].per_span == 32.0 and 0.2 <= drawn <= 0.3  # at most a quarter of a span's calls


class _ExportingWorker:
    """A GPU worker whose timed outputs were all overwritten by a later call of their batch."""

    def call(self, request):
        assert isinstance(request, protocol.ExportOutput)
        return {"reused": True, "output": {"kind": "tensor"}}


def test_a_timed_output_overwritten_within_its_batch_fails_as_output_alias():
    """GPU batches: a candidate that returns one buffer for every call of a batch while timed leaves only the
    batch's last output to check; the overwritten ones are the repeat probe's `output-alias`, said once."""
    judging = types.SimpleNamespace(findings=[], worker=_ExportingWorker(), take=lambda reply, stage: reply, info={})
    measure._check_timed_output(judging, 5, seed=1, watched=False, inputs=True)
    measure._check_timed_output(judging, 6, seed=2, watched=True, inputs=False)
    assert [(f.code, f.severity, f.stage, f.details["call"]) for f in judging.findings] == [
        ("output-alias", "fail", "timing", 5)]


def _unskewed(judging, measured, batch: int):
    """measure._unskewed with the batches' means (the timer's) taken from the measurement's calls in groups of
    `batch`."""
    samples = measured.samples_ms
    means = [math.fsum(samples[k:k + batch]) / batch for k in range(0, len(samples) - batch + 1, batch)]
    return measure._unskewed(judging, measured, batch, means)


def _measured(pattern_ms: list[float], batches: int = 50):
    """A measurement whose calls, in batches of len(pattern_ms), take these times each batch."""
    samples = tuple(pattern_ms * batches)
    return timing.Measurement(samples, timing.Stats.from_samples(samples), "max-runs", 3, sum(samples))


def test_a_batchs_work_done_at_one_call_is_reported_as_the_batches_means():
    """GPU batches of four, the sets refilled before a batch's first call: a candidate doing the batch's work
    at that call (4 ms, then 0.1 ms thrice) has a median call of 0.1 ms but a batch of 1.075 ms per call; the
    batches' means are reported, with `timing-skewed`. An honest candidate's 1,000 calls measured on the H200
    (a batch's first call carrying some launch latency: its median call 0.87x its batches', 0.024 ms a batch
    beyond it) keep their own."""
    judging = types.SimpleNamespace(findings=[])
    skewed = _unskewed(judging, _measured([4.0, 0.1, 0.1, 0.1]), 4)
    assert skewed.stats.median_ms == pytest.approx(1.075) and skewed.stats.n == 50
    assert [(f.code, f.severity) for f in judging.findings] == [("timing-skewed", "warn")]
    assert judging.findings[0].details["calls_median_ms"] == pytest.approx(0.1)
    measured_h200 = json.loads((Path(__file__).parent / "data" / "h200_level2_51_cuda_samples.json").read_text())
    samples = tuple(measured_h200["samples_ms"])
    honest = timing.Measurement(samples, timing.Stats.from_samples(samples), "max-runs", 3, sum(samples))
    assert _unskewed(judging, honest, measured_h200["calls_per_batch"]) is honest
    assert len(judging.findings) == 1
    one_call_batches = _measured([4.0, 0.1, 0.1, 0.1])  # a CPU's batches of one: nothing to regroup
    assert _unskewed(judging, one_call_batches, 1) is one_call_batches and len(judging.findings) == 1
    # the rule's edges: an honest 13 us kernel whose batch's first call carries 19 us of launch latency (H200,
    # level1/47 at 16x256x255, benchmarks/skew_ratios.py: 0.73x) is under the fraction but within the allowance
    # (0.05 ms, and 40% of the batch); a 1 ms kernel whose first call takes 30% longer is over the allowance but
    # not under the fraction; a kernel's work moved to its batch's first call is over both, a tiny one's too
    # (its whole batch within 0.05 ms, not within 40% of it)
    for honest_ms in ([0.0316, 0.0127, 0.0127, 0.0127], [1.3, 1.0, 1.0, 1.0]):
        kept = _measured(honest_ms)
        assert _unskewed(judging, kept, 4) is kept and len(judging.findings) == 1, honest_ms
    assert _unskewed(judging, _measured([0.1, 0.003, 0.003, 0.003]), 4).stats.median_ms == pytest.approx(0.02725)
    assert _unskewed(judging, _measured([0.045, 0.001, 0.001, 0.001]), 4).stats.median_ms == pytest.approx(0.012)
    assert len(judging.findings) == 3


MIXED_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 8)
        self.lstm = nn.LSTM(8, 8, batch_first=True)
        self.tied = self.linear.weight  # the same parameter under a second name
        self.register_buffer("half_scale", torch.full((8,), 0.75, dtype=torch.float16))
        self.half_gain = nn.Parameter(torch.full((8,), 1.25, dtype=torch.float16))
        self.register_buffer("steps", torch.tensor(3))
        self.carried = torch.zeros(8)  # a plain attribute the forward reassigns (as level3/33's hidden state)
        self.register_buffer("calls", torch.zeros(()))  # a buffer the forward changes in place
        self.register_buffer("counted", torch.zeros((), dtype=torch.int64))  # an integer one too
        self.register_buffer("total", torch.zeros((), dtype=torch.float64))  # and a float64 one
        self.register_buffer("last", torch.zeros((), dtype=torch.int64))  # and one it reassigns (an integer: the
        # probes' changes would scale a float one, made an inference tensor by the reference's call, in place)

    def forward(self, x):
        y, _ = self.lstm(torch.tanh(self.linear(x)).unsqueeze(1))
        out = y.squeeze(1) * self.half_scale.to(y.dtype) * self.half_gain.to(y.dtype) + self.steps + self.carried
        self.carried = out.mean(0)
        self.calls.add_(1)
        self.counted.add_(1)
        self.total.add_(1)
        self.last = (out.detach().sum() * 1000).long()
        return out


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


def test_the_reference_held_at_one_precision_gives_what_a_kept_copy_gives(tmp_path, monkeypatch):
    """referee/precision.py: a model whose parameters stay native and are upcast where the float64 run uses them
    (as one of 256 MiB or more on a CPU) gives the same native and float64 outputs, bit for bit, as the model
    beside its float64 copy, through the probes' changes and a range move (made on the native parameters alone);
    in float64 its floating buffers are float64 and its parameters keep their own dtypes (a float16 parameter and
    buffer, the integer one, the tied weight, the LSTM's), and the tensors the forward reassigns or changes (a plain
    attribute, four buffers, one an integer and one float64) are the native runs' alone."""
    from kerneljudge.proc.perturb import Transform
    from kerneljudge.referee import precision
    from kerneljudge.referee.session import RefereeSession
    from kerneljudge.worker.build import import_problem

    path = tmp_path / "mixed.py"
    path.write_text(MIXED_PROBLEM)
    module = import_problem(str(path), MIXED_PROBLEM, {})
    kept = RefereeSession.build(module, torch.device("cpu"), 7, 8, kernelbench=False)
    monkeypatch.setattr(precision, "ONE_PRECISION_FROM_BYTES", 0)  # this small model held as a large one is
    converted = RefereeSession.build(module, torch.device("cpu"), 7, 8, kernelbench=False)
    assert converted.reference.one_at_a_time and converted.reference.copy64 is None
    assert not kept.reference.one_at_a_time and kept.reference.copy64 is not None
    dtypes = {name: t.dtype for name, t in kept.native().state_dict().items()}

    def same(seed: int) -> None:
        for session in (kept, converted):
            session.draw(seed)
        a, b = kept.kept.pop(seed), converted.kept.pop(seed)
        assert torch.equal(a.expected, b.expected) and torch.equal(a.expected64, b.expected64)
        assert b.expected64 is not None and b.expected64.dtype == torch.float32  # kept at the output's dtype

    same(1)
    model = converted.reference.model
    assert converted.reference.converted
    assert all(b.dtype == torch.float64 for b in model.buffers() if b.is_floating_point())
    assert {n: p.dtype for n, p in model.named_parameters()} == {n: dtypes[n] for n, _ in model.named_parameters()}
    assert model.tied is model.linear.weight and model.steps.dtype == torch.int64
    for session in (kept, converted):
        session.perturb(11, None, replace=False)
    same(2)
    for session in (kept, converted):
        session.perturb(12, ["linear.bias"], replace=True)
        session.set_range(Transform("lstm.weight_hh_l0", scale=10.0))
    same(3)
    for session in (kept, converted):
        session.set_range(None)
    same(4)
    assert {name: t.dtype for name, t in converted.native().state_dict().items()} == dtypes
    for name in ("carried", "calls", "counted", "total", "last"):  # what the float64 runs did never reaches the native model
        ours, theirs = getattr(converted.native(), name), getattr(kept.native(), name)
        assert ours.dtype == theirs.dtype and torch.equal(ours, theirs), name
    assert not converted.reference.converted and converted.native().tied is converted.native().linear.weight
    assert all(torch.equal(a, b) for a, b in zip(kept.native().state_dict().values(),
                                                 converted.native().state_dict().values()))


CHANGES_ITS_INPUT = '''
import torch
import torch.nn as nn

HANDED_OUT = torch.linspace(-1.0, 1.0, 32).reshape(4, 8)  # the same tensor handed out by every draw


class Model(nn.Module):
    def forward(self, x, y):
        x.mul_(2.0)  # the reference changes its first input in place
        return torch.tanh(x) + y.sum(1, keepdim=True)


def get_inputs():
    return [torch.randn(4, 8), HANDED_OUT]


def get_init_inputs():
    return []
'''


def test_the_reference_run_on_its_inputs_uncopied_keeps_what_the_candidate_gets(tmp_path, monkeypatch):
    """referee/session.expect: inputs at or above UNCOPIED_FROM_BYTES go to the native reference as they are,
    where nothing else holds them (proc/inputs.owned), and are drawn again when the reference changed them, so
    the kept inputs and outputs are the ones a copy gives; a tensor the problem keeps (handed out by every draw)
    is copied for the call and never moved in place by a range probe, which moves the drawn one in place; inputs
    are kept only where a comparison of them is asked for."""
    from kerneljudge.proc.perturb import Transform
    from kerneljudge.referee import session as referee_session
    from kerneljudge.worker.build import import_problem

    path = tmp_path / "changes_its_input.py"
    path.write_text(CHANGES_ITS_INPUT)
    module = import_problem(str(path), CHANGES_ITS_INPUT, {})
    handed_out = module.HANDED_OUT.clone()
    copied = referee_session.RefereeSession.build(module, torch.device("cpu"), 7, 8, kernelbench=False)
    monkeypatch.setattr(referee_session, "UNCOPIED_FROM_BYTES", 0)
    uncopied = referee_session.RefereeSession.build(module, torch.device("cpu"), 7, 8, kernelbench=False)
    moved = Transform(perturb.INPUTS, scale=3.0, shift=0.5)
    for transform in (None, moved):
        for session in (copied, uncopied):
            session.draw(5, transform=transform, keep_inputs=True)
        a, b = copied.kept.pop(5), uncopied.kept.pop(5)
        fresh = make_inputs(module, 5, torch.device("cpu"))
        if transform is not None:
            fresh = [t * 3.0 + 0.5 for t in fresh]
        assert all(torch.equal(x, y) and torch.equal(x, f) for x, y, f in zip(a.inputs, b.inputs, fresh))
        assert torch.equal(a.expected, b.expected) and torch.equal(a.expected64, b.expected64)
        assert torch.equal(module.HANDED_OUT, handed_out)  # neither the reference nor the move changed it
    uncopied.draw(6)  # inputs no comparison asks for are let go once the outputs are made
    assert uncopied.kept[6].inputs is None and uncopied.kept[6].expected is not None
    drawn = make_inputs(module, 6, torch.device("cpu"))
    memory = drawn[0].data_ptr()  # (an integer: a name holding the tensor would make it not the draw's alone)
    moved_inputs = moved.inputs(drawn)
    assert moved_inputs[0].data_ptr() == memory and moved_inputs[1] is not module.HANDED_OUT  # in place where it may be
    assert torch.equal(module.HANDED_OUT, handed_out)
    # nor where another tensor is over its memory (detach) or a gradient is asked for (an in-place move raises)
    for kept_elsewhere in ([module.HANDED_OUT.detach()], [torch.ones(4, requires_grad=True)]):
        before = kept_elsewhere[0].detach().clone()
        assert torch.equal(moved.inputs(kept_elsewhere)[0], before * 3.0 + 0.5)
        assert torch.equal(kept_elsewhere[0], before)


LETS_GO_OF_ITS_NATIVE_OUTPUT = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.linear = nn.Linear(n, n)

    def forward(self, x):
        y = torch.tanh(self.linear(x))
{returned}


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return [32]
'''
RETURNED = {"tanh": "        return y", "int-first": "        return (x > 0).long(), y",
            "half": "        return y.half()", "nan": "        return torch.where(x > 1, torch.nan, y)"}


def _outputs_like(native) -> dict:
    """A candidate's outputs around the reference's: itself, a little off, one element far off, five elements left
    NaN (in its first floating tensor), and wrong structures."""
    tensors = list(native) if isinstance(native, tuple) else [native]
    first = next(n for n, t in enumerate(tensors) if t.is_floating_point())

    def changed(change) -> object:
        copies = [t.clone() for t in tensors]
        change(copies[first])
        return tuple(copies) if isinstance(native, tuple) else copies[0]

    return {"native": native, "near": changed(lambda t: t.add_(1e-6)),
            "off": changed(lambda t: t[3, 7].add_(1.0)), "unwritten": changed(lambda t: t[0, :5].fill_(float("nan"))),
            "shape": tensors[first][:, :16], "dtype": tensors[first].double(), "wrapped": (native,), "none": None}


@pytest.mark.parametrize("returned", list(RETURNED))
@pytest.mark.parametrize("atol", [None, 1e-9])
def test_a_native_output_within_the_tolerance_of_the_truth_is_let_go_and_nothing_is_judged_otherwise(
        tmp_path, atol, returned):
    """Where the reference's own output is within the evaluation's tolerance of the float64 truth everywhere, the
    referee lets it go once drawn (one output less held while the candidate's is made and compared) and keeps its
    outline: every comparison (strict or range, full or verdict only, the unwritten count, the structure's
    findings) answers what it answers with the native output kept, for a float32 output, one of float16, one with
    NaN where the truth has them, and a tuple whose first output is an integer one. At atol 1e-9 the float32
    output misses the truth, is kept, and the candidate is held to it (`reference-imprecise`; the range probe is
    skipped)."""
    from kerneljudge.proc import tensorwire
    from kerneljudge.proc.perturb import INPUTS, Transform
    from kerneljudge.referee.server import Referee

    source = LETS_GO_OF_ITS_NATIVE_OUTPUT.format(returned=RETURNED[returned])
    path = tmp_path / "tanh_linear.py"
    path.write_text(source)
    problem = {"path": str(path), "source": source, "constants": {}}
    letting_go, keeping = Referee(), Referee()
    for referee in (letting_go, keeping):
        referee.setup(protocol.Setup(problem, 1, 2, atol=atol, rtol=atol), [])
    keeping.session.tolerance = None  # every native output kept

    def compared(referee: Referee, seed: int, out, **flags) -> dict:
        description, blobs = tensorwire.describe_output(out)
        return referee.compare(protocol.Compare(seed, 0, description, atol=flags.pop("atol", atol),
                                                rtol=flags.pop("rtol", atol), keep=True, **flags), list(blobs))[0]

    moved = Transform(INPUTS, scale=10.0).to_json()
    for seed, transform, rule in ((5, None, "strict"), (6, moved, "range")):
        for referee in (letting_go, keeping):
            referee.make_inputs(protocol.MakeInputs(seed, transform=transform), [])
        native = keeping.session.kept[seed].expected
        assert letting_go.session.kept[seed].outline == keeping.session.kept[seed].outline
        if returned == "tanh":
            assert (letting_go.session.kept[seed].expected is None) is (atol is None)
        for name, out in _outputs_like(native).items():
            for verdict_only in (False, True):
                answers = [json.dumps(compared(referee, seed, out, rule=rule, verdict_only=verdict_only),
                                      sort_keys=True) for referee in (letting_go, keeping)]
                assert answers[0] == answers[1], (name, rule, verdict_only)
                answer = json.loads(answers[0])
                if returned != "tanh":
                    continue
                if "skipped" in answer:  # the native output misses the range probe's tolerance itself
                    assert rule == "range" and atol == 1e-9, answer
                    continue
                assert answer["trial"]["passed"] is (name == "native" or (name == "near" and atol is None)), answer
                assert any(f["code"] == "reference-imprecise" for f in answer["findings"]) is (
                    atol == 1e-9 and name in ("native", "near", "off", "unwritten"))  # (each misses the truth)
                if name == "unwritten" and not verdict_only:
                    assert answer["unwritten"] == 5
    if atol is None:  # a comparison at another tolerance than the one the native output was let go within
        with pytest.raises(ValueError, match="let go within the tolerance"):
            compared(letting_go, 5, native, atol=1e-3, rtol=1e-3)


def test_a_range_moves_original_is_copied_once_and_again_where_the_entry_changed_since(monkeypatch):
    """proc/perturb.Originals: the entries range moves change are copied into host memory once and kept until the
    moves end (the round robin moves a weight at four scales: each copy out of a GPU went through pageable memory,
    in both processes; kept on a GPU only); a later move of an entry unchanged since it was put back takes no new
    copy, one changed in place since (its version moved) or replaced by another tensor is copied again; every
    put-back gives the values the entry had before its move; past KEPT_ORIGINALS_BYTES the copies not moved now are
    let go, and the end of the moves lets go of all."""
    from kerneljudge.proc.perturb import Originals, Transform, move, put_back

    monkeypatch.setattr(perturb, "KEPT_ORIGINALS_DEVICES", ("cuda", "cpu"))  # (on a CPU a copy is not kept)
    weight, bias = torch.randn(8, 8), torch.randn(8)
    state = {"w": weight, "b": bias}
    before = {name: t.clone() for name, t in state.items()}
    originals = Originals()
    move(state, originals, Transform("w", 10.0))
    first = originals.kept["w"][0]
    assert torch.equal(weight, before["w"] * 10) and torch.equal(first, before["w"])
    move(state, originals, Transform("b", -1.0))  # w put back, b moved
    assert torch.equal(weight, before["w"]) and torch.equal(bias, -before["b"])
    move(state, originals, Transform("w", 100.0))
    assert originals.kept["w"][0] is first  # unchanged since put back: no second copy
    put_back(state, originals)
    weight.add_(1.0)  # changed in place since: copied again, and put back as it is now
    move(state, originals, Transform("w", 0.1))
    assert originals.kept["w"][0] is not first and torch.equal(originals.kept["w"][0], before["w"] + 1)
    put_back(state, originals)
    state["w"] = torch.zeros(8, 8)  # another tensor under the name: copied again
    move(state, originals, Transform("w", 2.0))
    assert torch.equal(originals.kept["w"][0], torch.zeros(8, 8))
    monkeypatch.setattr(perturb, "KEPT_ORIGINALS_BYTES", 8 * 8 * 4)  # room for one 8 x 8 copy
    move(state, originals, Transform("b", 3.0))
    assert list(originals.kept) == ["b"]  # w's copy let go: b is moved now
    assert move(state, originals, None) == ["b"] and not originals.kept and torch.equal(bias, before["b"])


def test_a_range_move_that_fails_leaves_the_next_ones_working():
    """proc/perturb.put_back: a move whose change raises (a tensor made under inference mode, where the worker's
    candidate may leave one) leaves the moves after it working: the entry put back where its copy is kept, never a
    lookup of a copy already let go."""
    from kerneljudge.proc.perturb import Originals, Transform, move

    with torch.inference_mode():
        frozen = torch.randn(4)
    state = {"w": frozen, "b": torch.randn(4)}
    before = state["b"].clone()
    originals = Originals()
    with pytest.raises(RuntimeError):
        move(state, originals, Transform("w", 10.0))  # (an in-place change of an inference tensor outside it)
    move(state, originals, Transform("b", 2.0))
    assert torch.equal(state["b"], before * 2)
    move(state, originals, None)
    assert torch.equal(state["b"], before) and not originals.kept and not originals.moved
