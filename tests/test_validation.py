"""Arguments out of range are usage errors for every interface, raised before any worker starts; and
failures come with what it takes to act on them (issue "A newcomer's first hour", items 3 and 8).

Usage errors: exit code 2 on the command line, UsageError from the Python API, a tool error over MCP,
each naming the argument as that interface calls it (`--budget-ms`, `budget_ms`) and its legal range.
Failures: the worst elements of a wrong output, the run's seed and a command that reproduces it, one
severity name for blocking errors in the JSON, the report and `explain`.
"""

from __future__ import annotations

import re
import shlex

import anyio
import pytest
from conftest import CANDIDATES, SEED, parse_json

from kerneljudge import api, findings, pipeline, report
from kerneljudge.errors import UsageError
from kerneljudge.options import Options
from kerneljudge.records import Result

CORE = CANDIDATES / "core"
CPU = ("--device", "cpu", "--no-store", "--no-timing")


# --- 3. one validation, every interface -------------------------------------------------------------

@pytest.mark.parametrize("args, flag, bound", [
    (("--budget-ms", "-5"), "--budget-ms", "> 0"),
    (("--trials", "0"), "--trials", ">= 1"),
    (("--timeout", "0"), "--timeout", "> 0"),
    (("--memory-limit-mb", "100"), "--memory-limit-mb", ">= 256"),
    (("--atol", "-1"), "--atol", ">= 0"),
    (("--device", "gpu"), "--device", "cuda:N"),
])
def test_cli_bad_argument_is_a_usage_error_naming_the_flag(kj, args, flag, bound):
    rc, out, err = kj("eval", SEED, str(CORE / "correct.py"), *CPU, *args)
    assert rc == 2 and out == "", (out, err)
    assert flag in err and bound in err and "Traceback" not in err, err
    rc, out, err = kj("bench", SEED, str(CORE / "correct.py"), "--device", "cpu", "--no-store", *args, "--json")
    assert rc == 2
    payload = parse_json(out)  # still exactly one JSON object
    assert payload["verdict"] == "error" and payload["error"].startswith(flag) and bound in payload["error"]


@pytest.mark.parametrize("changes, name, bound", [
    ({"timing": {"budget_ms": -5}}, "budget_ms", "> 0"),
    ({"check": {"trials": -2}}, "trials", ">= 1"),
    ({"check": {"rtol": float("nan")}}, "rtol", ">= 0"),
    ({"timing": {"input_sets": 0}}, "input_sets", ">= 1"),
    ({"worker": {"timeout_s": -1.0}}, "timeout_s", "> 0"),
    ({"worker": {"memory_limit_mb": 64}}, "memory_limit_mb", ">= 256"),
    ({"device": "cuda:x"}, "device", "cuda:N"),
    ({"protocol": "loose"}, "protocol", "strict"),
])
def test_api_bad_argument_raises_before_any_worker_or_record(fast, tmp_path, monkeypatch, changes, name, bound):
    started = []
    monkeypatch.setattr(pipeline, "WorkerProcess", lambda *a, **k: started.append(a) or pytest.fail("worker"))
    store = tmp_path / "results.sqlite"
    with pytest.raises(UsageError) as caught:
        api.bench(SEED, CORE / "correct.py", fast.replace(store_path=store), **changes)
    message = str(caught.value)
    assert message.startswith(name) and bound in message and "--" not in message, message
    assert started == [] and not store.exists()


def test_api_unknown_option_is_a_usage_error(fast):
    with pytest.raises(UsageError, match="unknown option check.trails; the options are: check.trials"):
        api.check(SEED, CORE / "correct.py", fast, check={"trails": 3})


def test_mcp_bad_arguments_and_unusable_requests_are_tool_errors(tmp_path):
    from mcp import Client

    from kerneljudge.mcp_server import build_server

    good = (CORE / "correct.py").read_text()
    options = Options(device="cpu", store_path=None, cache_dir=tmp_path / "cache")
    calls = [
        ("benchmark", {"problem": SEED, "solution_source": good, "budget_ms": -5}),
        ("run_correctness", {"problem": SEED, "solution_source": good, "trials": -2}),
        ("run_correctness", {"problem": SEED, "solution_source": good, "trials": 0}),
        ("run_correctness", {"problem": SEED, "solution_source": good, "device": "gpu"}),
        ("run_correctness", {"problem": "l9/999", "solution_source": good}),
        ("run_correctness", {"problem": SEED, "solution_path": str(tmp_path / "nope.py")}),
        ("run_correctness", {"problem": SEED, "solution_path": str(CORE)}),
    ]

    async def main():
        async with Client(build_server(options)) as client:
            return [await client.call_tool(name, args) for name, args in calls]
    budget, negative, zero, device, problem, missing, folder = anyio.run(main)
    for result, needles in ((budget, ["budget_ms must be", "> 0", "-5"]), (negative, ["trials must be", ">= 1"]),
                            (zero, ["trials must be", "(got 0)"]), (device, ["device 'gpu' is not a device"]),
                            (problem, ["problem:", "no problem file 'l9/999'"]),
                            (missing, ["solution_path: no candidate file", "nope.py"]),
                            (folder, ["solution_path:", "is a directory; give the candidate's .py file"])):
        text = result.content[0].text
        assert result.is_error, text
        assert all(n in text for n in needles) and "--" not in text, text


# --- 8. failures you can act on ---------------------------------------------------------------------

def test_wrong_output_lists_worst_elements_and_reproduces(kj):
    rc, out, err = kj("eval", SEED, str(CORE / "wrong.py"), *CPU, "--trials", "3", "--json")
    assert rc == 1, err
    result = parse_json(out)
    assert isinstance(result["seed"], int)  # no --seed given: the secret seed is told after the run
    for trial in result["trials"]:
        assert 0 < trial["mismatched"] <= trial["elements"] == 64 * 256  # the output: (batch_size, in_features)
        assert 1 <= len(trial["worst"]) <= 5
        errors = [e["abs_err"] for e in trial["worst"]]
        assert errors == sorted(errors, reverse=True) and errors[0] == pytest.approx(trial["max_abs_err"])
        for e in trial["worst"]:
            assert len(e["index"]) == 2 and abs(e["got"] - e["expected"]) == pytest.approx(e["abs_err"])
    wrong = next(f for f in result["findings"] if f["code"] == "wrong-output")
    first = result["trials"][0]
    assert f"{first['mismatched']} of {first['elements']} elements miss" in wrong["message"]
    assert str(first["worst"][0]["index"]) in wrong["message"] and "(seen in 3 of 3 trials)" in wrong["message"]
    assert "and 2 more" not in wrong["message"] and "?" not in wrong["message"]

    command = shlex.split(result["reproduce"])
    assert command[:2] == ["kerneljudge", "eval"] and f"--seed={result['seed']}" in "=".join(command)
    assert "--trials" in command and "--device" in command
    rc, again_out, err = kj(*command[1:], "--no-store", "--json")
    assert rc == 1, err
    again = parse_json(again_out)
    assert again["seed"] == result["seed"] and again["reproduce"] == result["reproduce"]
    for before, after in zip(result["trials"], again["trials"], strict=True):
        assert after["worst"] == before["worst"] and after["mismatched"] == before["mismatched"]

    rc, human, err = kj(*command[1:], "--no-store")
    assert rc == 1, err
    assert f"reproduce: {result['reproduce']}" in " ".join(human.split())
    assert "expected" in human and "|diff|" in human


def test_directory_as_candidate_has_its_own_message(kj):
    rc, out, err = kj("eval", SEED, str(CORE), *CPU, "--json")
    assert rc == 2, err
    result = parse_json(out)
    finding = next(f for f in result["findings"] if f["code"] == "candidate-invalid")
    assert finding["message"] == f"{CORE} is a directory; give the candidate's .py file"


def test_blocking_errors_have_one_severity_name_everywhere(kj):
    """forward-error: "error" in the JSON, the report, the agents' brief and `explain`; headers never `?`."""
    rc, out, err = kj("eval", SEED, str(CORE / "forward_raises.py"), *CPU, "--json")
    assert rc == 2, err
    data = parse_json(out)
    assert [f["severity"] for f in data["findings"] if f["code"] == "forward-error"] == ["error"]
    assert "[error] forward-error:" in report.brief(Result.from_json(data))
    rc, human, err = kj("eval", SEED, str(CORE / "forward_raises.py"), *CPU)
    assert rc == 2 and re.search(r"^error +forward-error", human, re.MULTILINE), human
    rc, explained, _ = kj("explain", "forward-error")
    assert rc == 0 and "severity: error" in explained
    rc, listing, _ = kj("explain")
    rows = {line.split()[0]: line.split()[1] for line in listing.splitlines()}
    assert rows == {code: spec.severity for code, spec in findings.CATALOG.items()}
    assert rows["forward-error"] == "error" and rows["wrong-output"] == "fail"
    for name in ("missing.py", "forward_raises.py"):
        rc, human, _ = kj("eval", str(CORE.parent / "no_problem.py") if name == "missing.py" else SEED,
                          str(CORE / name), *CPU)
        assert rc == 2 and "?" not in human.splitlines()[0], human


@pytest.mark.parametrize("field, value", [("niceness", -1), ("niceness", 20), ("niceness", 1.5),
                                          ("gpu_memory_share", 0), ("gpu_memory_share", 1.5)])
def test_worker_priority_and_gpu_share_out_of_range_are_usage_errors(field, value):
    """A negative niceness would make the launcher fail for a user without privileges (os.nice refuses),
    a share outside (0, 1] is no share of a GPU: both are said before any worker starts."""
    with pytest.raises(UsageError, match=field):
        Options().replace(worker={field: value}).validate()


def test_a_timing_of_one_run_is_reported_without_its_spread():
    """One timed run has no SEM (None in the JSON): the report and the agents' brief say the median and n=1
    (the MCP benchmark tool crashed on it when a slow machine spent the timing budget in one run)."""
    from report_fixture import hand_result

    result, _ = hand_result("level1/1", "pass", 2.0, sem_ms=None, light=40.0)
    result.timing["candidate"]["n"] = 1
    line = report.timing_line(result)
    assert line.startswith("timing: 1 ms median (n=1)") and "SEM" not in line, line
    assert "timing: 1 ms median (n=1)" in report.brief(result)
    result.timing["candidate"].update(n=3, sem_ms=0.01)
    assert "(n=3, ±1% SEM)" in report.timing_line(result)
