"""Whose fault a failure is (twenty-eighth session's red team): a candidate's code shares its worker's process,
so nothing that process reports may put the fault on the judge, the referee or the problem, whose errors RL
loops drop rather than count against the candidate; and the probes' changes call none of the candidate's code.

Each test is a real evaluation of a candidate in tests/candidates/blame/ (CPU, small sizes, no timing)."""

from __future__ import annotations

import json
import os
import time

import pytest
import torch
from conftest import CANDIDATES, SEED, codes

from kerneljudge import channel, findings
from kerneljudge.proc import tensorwire
from kerneljudge.referee import compare
from kerneljudge.pipeline import evaluate

BLAME = CANDIDATES / "blame"


def _not_blamed_on_others(result) -> list[str]:
    return sorted(code for code in codes(result) if not findings.blames_candidate(code)
                  and code not in ("problem-degenerate", "problem-lint-skipped"))  # (the problem's lint, info/warn)


@pytest.mark.parametrize("name, code", [("forged_reply", "worker-fault"), ("state_dict_raises", "worker-fault"),
                                        ("subclass_output", "forward-error")])
def test_a_fault_the_worker_reports_for_the_judge_or_the_problem_is_the_candidates(fast, name, code):
    """A reply forged through the worker's channel (`problem-error`), an override of `state_dict` the worker's
    own code called, an output whose methods fail in the worker's description of it: each was reported as the
    problem's or the judge's fault. The judge reads every worker reply after the candidate's import as the
    candidate's: `worker-fault`, the candidate's error; an output's own code raising as the worker reads it
    is the forward's error, named where it raised (QA 36)."""
    result = evaluate(SEED, BLAME / f"{name}.py", fast)
    assert result.verdict == "error" and code in codes(result), [(f.code, f.message) for f in result.findings]
    assert _not_blamed_on_others(result) == [], _not_blamed_on_others(result)


def test_a_forged_build_reply_is_tampering_and_the_judge_writes_its_result(fast):
    result = evaluate(SEED, BLAME / "forged_build.py", fast)
    assert result.verdict == "fail" and "tampering" in codes(result), [(f.code, f.message) for f in result.findings]


def test_an_exception_whose_text_cannot_be_read_is_the_forwards_error(fast):
    result = evaluate(SEED, BLAME / "unprintable_error.py", fast)
    assert "forward-error" in codes(result) and _not_blamed_on_others(result) == [], codes(result)


@pytest.mark.parametrize("name", ["stale_until_state_dict", "modules_raises_for_judge"])
def test_the_probes_change_the_parameters_without_calling_the_candidates_code(fast, name):
    """A stale cache dropped only when the candidate's `state_dict` is called (the probes called it before each
    change: it passed), or hidden behind a `modules()` that raises when the worker's swap of new objects calls
    it (a judge error): the probes change the entries ModelNew's state_dict gave at its construction, found again
    through torch's own records, and see the cache stale."""
    result = evaluate(SEED, BLAME / f"{name}.py", fast)
    assert result.verdict == "fail" and "stale-parameters" in codes(result), \
        [(f.code, f.message) for f in result.findings]


def test_a_parameter_registered_anew_after_construction_is_the_one_the_probes_change(fast):
    result = evaluate(SEED, BLAME / "repacked_at_first_call.py", fast)
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings if f.severity in ("fail", "error")]


def test_an_output_of_the_wrong_structure_is_judged_from_its_description(fast):
    """An output of the wrong shape, about half the processes' memory limit: the referee ran out of memory unpacking
    it (a judge error); it now sees the wrong shape in the description and unpacks nothing."""
    result = evaluate(SEED, BLAME / "wrong_shape_half_the_memory.py",
                      fast.replace(worker={"memory_limit_mb": 3000}, check={"trials": 1}))
    assert result.verdict == "fail" and "output-shape" in codes(result), [(f.code, f.message) for f in result.findings]


def test_a_described_mismatch_names_the_shape_or_the_device_as_an_unpacked_one_would():
    """The description's verdict is the one the tensors' would be: a tuple's second tensor of the wrong shape is
    `output-shape`, a tensor on another device `output-device` (a review found both said `output-type`, as if the
    tensors could not be carried, when the described outputs went on to the full comparison)."""
    def mismatch(output, reference, **fact):
        description, _ = tensorwire.describe_output(output)
        description["tensors"][-1].update(fact)
        received = compare.Received(*tensorwire.described_output(description), str(description.get("type", "")))
        found = compare.described_mismatch(0, received, compare.Outline.of(reference))
        return found and [f.code for f in found.findings]

    assert mismatch((torch.zeros(4, 3), torch.zeros(7)), (torch.zeros(4, 3), torch.zeros(5))) == ["output-shape"]
    assert mismatch(torch.zeros(4, 3), torch.zeros(4, 3), device="cuda:0") == ["output-device"]
    assert mismatch(torch.zeros(4, 3), torch.zeros(4, 3)) is None


SHORT_TIMING = {"enabled": True, "baselines": False, "min_runs": 24, "max_runs": 24, "target_rel_sem": 0.0,
                "min_time_ms": 0.0, "budget_ms": 1e7}


@pytest.mark.parametrize("op, reply, code", [
    # a timed batch answered with a warning alone: the turns ended early and the first, false times were kept
    ("time-batch", {"findings": [{"code": "timing-noisy", "message": "a hiccup", "stage": "timing"}]}, "tampering"),
    # a finding of a code the catalog does not know, as the reply's own severity had it: the judge's KeyError
    ("time-batch", {"findings": [{"code": "made-up", "severity": "info", "message": "m", "fix": ""}]}, "tampering"),
    # a device said to be missing: the whole batch ended, and every rerun again
    ("forward", {"usage_error": "device cuda:7 is not there"}, "worker-fault"),
    # a probe's reply without the field the probe reads: the judge's KeyError
    ("observe:repeat", {"shared": False}, "tampering"),
])
def test_a_forged_reply_ends_in_the_candidates_finding_not_the_judges_end(fast, monkeypatch, op, reply, code):
    monkeypatch.setenv("KJ_TEST_FORGE_OP", op)
    monkeypatch.setenv("KJ_TEST_FORGE_REPLY", json.dumps(reply))
    result = evaluate(SEED, BLAME / "forged_by_request.py", fast.replace(timing=SHORT_TIMING) if op == "time-batch"
                      else fast)
    assert code in codes(result) and result.verdict in ("fail", "error"), [(f.code, f.message) for f in result.findings]
    assert not result.speedup and _not_blamed_on_others(result) == []


def test_a_blob_announced_and_never_sent_is_not_allocated_before_it_comes():
    """A worker announced a blob of 1 TiB and sent nothing: the judge allocated it first (a MemoryError that ended
    it; 8 GiB was held until the worker's deadline). The buffer grows as bytes arrive."""
    read_fd, write_fd = os.pipe()
    message = json.dumps({"_blobs": [1 << 40]}).encode()
    os.write(write_fd, channel._HEADER.pack(len(message)) + message + b"a few bytes")
    os.close(write_fd)
    with pytest.raises(channel.ChannelClosed):
        channel.receive(read_fd, time.monotonic() + 30)
    os.close(read_fd)
