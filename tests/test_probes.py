"""Probes that cover the whole promise (issue 14): each parameter changed alone, inputs and parameters across
their range, kernels counted where they run, timed calls watched while timed.

Every test is a real evaluation on the CPU (worker and referee processes, real candidates), each attack
with its honest control. Candidates are in tests/candidates/probes/ (and integrity/ for shared ones).
"""

from __future__ import annotations

import pytest

from conftest import CANDIDATES, SEED
from kerneljudge import api, isolation
from kerneljudge.stages import probe

PROBES = CANDIDATES / "probes"


def judge(options, name: str, problem: str = SEED, **changes):
    solution = name if name.startswith("@") else PROBES / f"{name}.py"
    return api.evaluate(problem, solution, options.replace(**changes) if changes else options)


def failing(result) -> set[str]:
    return {f.code for f in result.findings if f.severity == "fail"}


def explain(result) -> list:
    return [(f.code, f.message[:300]) for f in result.findings]


# --- item 1: each parameter changed alone (row 29) -----------------------------------------------------


def test_partial_cache_key_is_stale_when_another_parameter_changes_alone(fast):
    """Refreshes on gemm.weight only: all parameters changed together always include the weight, so only
    the changes of subtract or gemm.bias alone show it, and the finding names them (not the weight)."""
    result = judge(fast, "partial_cache_key")
    # (a range probe that moves subtract or gemm.bias sees it too)
    assert result.verdict == "fail" and "stale-parameters" in failing(result), explain(result)
    assert failing(result) <= {"stale-parameters", "range-mismatch"}
    assert all(t.passed for t in result.trials)
    stale = {f.details["change"]: f for f in result.findings if f.code == "stale-parameters"}
    # a state-dict round trip changes the weight too; the swap under one entry (`.data`) shows it when the entry
    # drawn in secret is not the weight
    assert set(stale) - {"data"} == {"in-place", "replace"}
    # both reach the output only through their means over the 128 outputs (problem-lint's insensitive-parameter),
    # so a random change of one alone can stay within the tolerance: in place (x 0.5-1.5, + -0.1-0.1) subtract's
    # mean moves by about 0.026 (within the tolerance in about 2% of runs: seen once in CI), replaced (new values
    # in [-0.5, 0.5)) by about 0.09; each way names what showed, subtract at least once
    assert any("subtract" in found.details["parameters"] for found in stale.values())
    for found in stale.values():
        assert found.details["parameters"] and set(found.details["parameters"]) <= {"gemm.bias", "subtract"}
        assert not found.details["together"] and "gemm.weight" not in found.message
        assert "changed alone" in found.message


def test_a_cache_keyed_on_each_parameters_object_and_version_is_stale_once_their_data_is_swapped(fast):
    """Every other way of changing the parameters moves an object or a version counter; `.data = new` moves
    neither: `stale-parameters`, naming that change alone."""
    result = judge(fast, "cache_id_version")
    assert all(t.passed for t in result.trials), explain(result)
    stale = [f for f in result.findings if f.code == "stale-parameters"]
    assert result.verdict == "fail" and [f.details["change"] for f in stale] == ["data"], explain(result)
    assert ".data = new" in stale[0].message


def test_parameters_changed_alone_honest_control(fast):
    result = judge(fast, "@pytorch")
    assert result.verdict == "pass" and not failing(result), explain(result)
    assert result.probes["parameters_changed_alone"] == {"entries": 3,
                                                         "changed_alone": ["subtract", "gemm.weight", "gemm.bias"]}


def test_many_parameters_are_sampled_with_the_secret_seed(fast):
    """12 parameters, at most MAX_ALONE changed alone (the cost stays bounded), which ones drawn from the
    run's seed; the honest candidate passes every change."""
    problem = PROBES / "many_parameters_problem.py"
    seen = []
    for seed in (1, 2):
        result = api.evaluate(problem, PROBES / "many_parameters.py", fast.replace(check={"seed": seed, "trials": 1}))
        assert result.verdict == "pass" and not failing(result), explain(result)
        alone = result.probes["parameters_changed_alone"]
        assert alone["entries"] == 12 and len(alone["changed_alone"]) == probe.MAX_ALONE
        seen.append(alone["changed_alone"])
    assert seen[0] != seen[1]


# --- item 2: inputs and parameters across their range (row 30) -----------------------------------------


def test_tanh_gelu_fails_once_the_argument_covers_the_curved_range(fast):
    """Exact enough where get_inputs() and the initial parameters put GELU's argument, not over [-4, 4]."""
    result = judge(fast, "tanh_gelu")
    assert all(t.passed for t in result.trials), explain(result)  # the default draw does not see it
    # the range probes fail it; the parameter probes' changes (drawn from the run's secret seed) sometimes
    # move GELU's argument far enough too, and say so as `stale-parameters`
    assert result.verdict == "fail" and "range-mismatch" in failing(result), explain(result)
    assert failing(result) <= {"range-mismatch", "stale-parameters"}, explain(result)
    ranges = result.probes["ranges"]
    # the share of GELU's curved range covered depends on the run's secret seed (11 runs: probed 0.69-1.0,
    # default 0.125-0.19 of the 16 bins): at least half against at most a quarter
    site = ranges["sites"]["gelu#0"]
    assert site["probed"] >= 0.5 and site["default"] <= 0.25, site


def test_range_probes_honest_controls(fast, monkeypatch):
    """The exact-erf rewrite (the shipped solution), and softmax with logits spread by x10. No input crosses
    from the referee: the worker draws and moves the range probes' inputs itself, as the referee does."""
    sent = []
    call = isolation.WorkerProcess.call

    def counted(process, request, blobs=(), **kw):
        reply = call(process, request, blobs, **kw)
        if request.op == "make-inputs":
            sent.append((request.transform is not None, len(reply.get("_blobs", []))))
        return reply

    monkeypatch.setattr(isolation.WorkerProcess, "call", counted)
    for problem in (SEED, "level1/23"):
        result = judge(fast, "@pytorch", problem=problem)
        assert result.verdict == "pass" and not failing(result), explain(result)
        assert len(result.probes["ranges"]["probes"]) >= 2 and not result.probes["ranges"]["skipped"]
    assert "input:0 +100" in result.probes["ranges"]["probes"]  # level1/23's softmax reads its input as it is
    assert sum(moved for moved, _ in sent) >= 4 and not any(blobs for _, blobs in sent), sent


def test_a_softmax_that_overflows_where_the_reference_does_not_fails_on_its_input_shifted(fast):
    """exp(x) / sum(exp(x)) passes every draw whose logits stay small; its own input shifted by +100 (which a
    softmax takes in its stride) makes it NaN: `range-mismatch` naming that move. (The honest rewrite's pass with
    the same move: test_range_probes_honest_controls.)"""
    result = judge(fast, "softmax_unshifted", problem="level1/23")
    assert all(t.passed for t in result.trials), explain(result)
    assert result.verdict == "fail" and failing(result) == {"range-mismatch"}, explain(result)
    assert "input:0 +100" in next(f.message for f in result.findings if f.code == "range-mismatch")


@pytest.mark.parametrize("name", ["loss_without_last_row", "loss_on_seven_rows_in_eight"])
def test_a_loss_over_part_of_the_batch_fails_on_rows_moved_in_secret(fast, tmp_path, name):
    """Each passes every draw of rows alike (the check's trials); the range plan's rows move (the first input's
    first and last rows and a sixteenth of the others, drawn in secret, shifted by 3) shows it: `range-mismatch`.
    The honest loss passes the same move."""
    problem = PROBES / "loss_problem.py"
    result = api.evaluate(problem, PROBES / f"{name}.py", fast)
    assert all(t.passed for t in result.trials), explain(result)
    assert result.verdict == "fail" and failing(result) == {"range-mismatch"}, explain(result)
    assert "input:0 rows +3" in next(f.message for f in result.findings if f.code == "range-mismatch")
    honest = tmp_path / "loss_honest.py"
    honest.write_text(problem.read_text().replace("class Model(", "class ModelNew("))
    result = api.evaluate(problem, honest, fast)
    assert result.verdict == "pass" and "input:0 rows +3" in result.probes["ranges"]["probes"], explain(result)


def test_range_probe_where_the_reference_overflows_is_skipped_with_the_reason(fast):
    result = api.evaluate(PROBES / "overflow_problem.py", PROBES / "overflow.py", fast)
    assert result.verdict == "pass" and not failing(result), explain(result)
    skipped = [f.message for f in result.findings if f.code == "probe-skipped" and "range" in f.message]
    assert skipped and "reference overflows" in skipped[0]


# --- item 3: kernels counted where they run (rows 13, 31) ----------------------------------------------
# The three candidates share tests/candidates/isolation/cpp_ext.py's extension source: they evaluate with
# the cache it was built into once for the session (conftest.py: cpp_built).


@pytest.mark.parametrize("name,counted", [
    ("bound_handle", ["kj_isolation_residual_gelu.kj_residual_gelu"]),  # self._fused = ext.f
    ("kernel_in_container", ["kj_isolation_residual_gelu.kj_residual_gelu", "kjprobe::residual_gelu"]),
])
def test_own_kernels_are_counted_however_they_are_reached(fast, cpp_built, name, counted):
    result = judge(fast, name, cache_dir=cpp_built[0])
    assert result.verdict == "pass" and not failing(result), explain(result)
    trace = result.probes["op_trace"]
    assert sorted(trace["own_kernels"]) == counted and all(trace["own_calls"][k] == 1 for k in counted)
    assert 0 < trace["own_share"] <= 1


def test_kernel_run_once_outside_forward_is_a_decoy(fast, cpp_built):
    """Called once in __init__ (so it "ran"), never by forward: torch ops do the work."""
    result = judge(fast, "decoy_once", cache_dir=cpp_built[0])
    # `reference-fallback` where its erf GELU's division counts among the reference's heavy ops: their share of the
    # reference's profiled time, which a loaded machine shifts (both say its kernels never ran)
    assert result.verdict == "fail" and failing(result) in ({"decoy-kernel"}, {"reference-fallback"}), explain(result)
    assert "never ran" in next(f.message for f in result.findings if f.code in ("decoy-kernel", "reference-fallback"))
    assert result.probes["op_trace"]["own_calls"] == {"kj_isolation_residual_gelu.kj_residual_gelu": 0}


# --- item 4: watched while timed (row 25) ---------------------------------------------------------------
# A fixed count of timed calls (no convergence, a budget the count always reaches first): 3 warm-up and 24
# timed calls. thread_after_calls starts its threads from its 40th call, after the trials and the probes
# (about 30 calls) and before the last timed one.

TIMED = {"enabled": True, "baselines": False, "min_runs": 24, "max_runs": 24, "target_rel_sem": 0.0,
         "min_time_ms": 0.0, "budget_ms": 1e7}


@pytest.mark.parametrize("name", ["thread_when_timed", "thread_after_calls"])
def test_thread_left_running_only_while_timed_is_seen_on_the_timed_calls(fast, name):
    result = judge(fast, name, timing=TIMED)
    spawned = [f for f in result.findings if f.code == "thread-spawn"]
    # (timing-tampering may come too on a loaded machine: the threads slow the calls they are not timed in)
    assert result.verdict == "fail" and "thread-spawn" in failing(result), explain(result)
    assert failing(result) <= {"thread-spawn", "timing-tampering"}, explain(result)
    assert [f.stage for f in spawned] == ["timing"]  # the probes never saw it
    assert "while timed" in spawned[0].message and spawned[0].details["threads"][0].startswith("kj-")


def test_watched_timing_honest_control(fast):
    result = judge(fast, "@pytorch", timing=TIMED)
    assert result.verdict == "pass" and not failing(result), explain(result)
    assert result.timing["candidate"]["n"] == 24


def test_a_range_plans_coverage_counts_the_bins_its_arguments_fell_in_and_nothing_outside_the_curved_range():
    """In process: what the default draw covers of GELU's curved range [-4, 4) (16 bins of 0.5), on arguments in
    [-1, 1) (four bins), beyond it (none: an argument outside the curved range covers nothing, not the end bin) and
    across it (every bin); and beside it a softmax's, relative to their row's maximum (its curved range [-8, 0))."""
    import torch

    from kerneljudge.referee import ranges

    class GeluAndSoftmax(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x) + torch.softmax(x * 10, dim=-1)

    def default(x: torch.Tensor) -> dict[str, float]:
        plan = ranges.plan(GeluAndSoftmax(), [x], 1, lambda: 0.0)
        return {site: figures["default"] for site, figures in plan["sites"].items()}

    between = torch.linspace(-1, 1, 401)[:-1].reshape(20, 20)  # each row 0.095 wide: 0.95 after the x10
    assert default(between) == {"gelu#0": 0.25, "softmax#0": 0.125}
    assert default(between + 5)["gelu#0"] == 0.0 and default(-between - 6)["gelu#0"] == 0.0
    assert default(torch.linspace(-4, 4, 801)[:-1].reshape(40, 20)) == {"gelu#0": 1.0, "softmax#0": 0.25}


def test_a_range_plans_two_ways_of_counting_bins_agree():
    """The GPU's way of counting an op site's bins (by comparison: no atomic adds, no wait) and the host's
    (`bincount`), on indices in every bin and in none (BINS)."""
    import torch

    from kerneljudge.referee import ranges

    index = torch.randint(0, ranges.BINS + 1, (5000,), generator=torch.Generator().manual_seed(0))
    index[:40] = 3
    counts = [ranges._counted(index, by_comparison=way).tolist() for way in (True, False)]
    assert counts[0] == counts[1] == [int((index == b).sum()) for b in range(ranges.BINS)]
    assert sum(counts[0]) == int((index < ranges.BINS).sum()) < len(index)


def test_a_range_probes_tolerance_grows_with_the_outputs_root_mean_square():
    """In process: a range call's figures (`_covered`: its output's root mean square, None where it overflows) and a
    range probe's tolerance (`tolerance`: atol times the float64 output's root mean square where above 1; skipped
    where that output overflows, or where the reference at its own precision misses the tolerance, counted)."""
    import torch

    from kerneljudge.referee import ranges
    from kerneljudge.referee.compare import Outline

    class Scaled(torch.nn.Module):
        def __init__(self, value: float):
            super().__init__()
            self.value = value

        def forward(self, x):
            return torch.stack([x * 0 + self.value, x * 0 - self.value])  # every element of magnitude `value`

    x = torch.rand(3, 4)
    assert ranges._covered(Scaled(10.0), [x]) == ({}, 10.0)
    assert ranges._covered(Scaled(float("inf")), [x]) is None
    truth = torch.full((3, 4), 10.0, dtype=torch.float64)
    truth[0, 0] = -10.0
    native = truth.float()
    assert ranges.tolerance(Outline.of(native), native, truth, 1e-3, 1e-4) == (1e-2, 1e-4, None)
    assert ranges.tolerance(Outline.of(native), native, truth / 100, 1e-3, 1e-4)[:2] == (1e-3, 1e-4)  # (rms 0.1)
    overflowing = truth.clone()
    overflowing[1, 1] = float("inf")
    assert "overflows" in ranges.tolerance(Outline.of(native), native, overflowing, 1e-3, 1e-4)[2]
    off = native.clone()
    off[2, :3] += 1.0
    assert "on 3 of 12 elements" in ranges.tolerance(Outline.of(native), off, truth, 1e-3, 1e-4)[2]


def test_range_plan_is_bounded_by_its_budget():
    """In process, with a fake clock that moves 1 s each time it is read: each target is moved once first (the
    clock not read), then moves are tried while the 2.5 s budget lasts (two more); the rest are said untried."""
    import torch

    from kerneljudge.referee import ranges

    class Gelu(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.zeros(4))

        def forward(self, x):
            return torch.nn.functional.gelu(x + self.bias)

    ticks = iter(range(1000))
    model, args = Gelu(), [torch.rand(8, 4) * 0.1]
    saved = {name: entry.clone() for name, entry in model.state_dict().items()}
    bounded = ranges.plan(model, args, 1, lambda: 1000.0 * next(ticks), budget_ms=2500)
    full = ranges.plan(model, args, 1, lambda: 0.0)
    small = ranges.SMALL_INPUTS.to_json()
    chosen = [[move for move in plan["probes"] if not move["rows"] and move != small]  # (beside: rows, small)
              for plan in (bounded, full)]
    assert len(chosen[0]) < len(chosen[1]) == ranges.MAX_PROBES
    assert any("12 of the 16 candidate moves not tried" in s for s in bounded["skipped"]), bounded["skipped"]
    assert not any("not tried" in s for s in full["skipped"])

    class BiasOnly(torch.nn.Module):  # only a move of its bias reaches GELU's curved range
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.full((4,), 0.1))

        def forward(self, x):
            return torch.nn.functional.gelu(self.bias * torch.ones_like(x))

    # round robin over the targets: the input x10, then the bias x10, each target moved before the budget counts
    # (all of the input's eight moves came first: level2/51 at full size on a CPU never moved a parameter)
    ticks = iter(range(1000))
    cut = ranges.plan(BiasOnly(), args, 1, lambda: 1000.0 * next(ticks), budget_ms=2500)
    assert "bias x10" in [json["label"] for json in cut["probes"]], cut
    assert full["sites"]["gelu#0"]["probed"] > full["sites"]["gelu#0"]["default"]
    assert all(torch.equal(entry, saved[name]) for name, entry in model.state_dict().items())  # put back
