"""The agents' verbs (check, bench, submit) through the CLI and the API, recorded in the store."""

from __future__ import annotations

import json

from conftest import CANDIDATES, SEED, codes, parse_json

from kerneljudge import api
from kerneljudge.store import Store

CORRECT = str(CANDIDATES / "core" / "correct.py")
WRONG = str(CANDIDATES / "core" / "wrong.py")
CPU = ("--device", "cpu", "--preset", "small")
QUICK_TIMING = ("--budget-ms", "150", "--no-baselines")


def test_cli_check_bench_submit_and_the_store(kj, tmp_path):
    rc, out, err = kj("check", SEED, CORRECT, *CPU, "--json")
    assert rc == 0, err
    checked = parse_json(out)
    assert checked["verdict"] == "pass" and checked["timing"] is None  # check never times

    rc, out, err = kj("bench", SEED, CORRECT, *CPU, *QUICK_TIMING, "--json")
    assert rc == 0, err
    benched = parse_json(out)
    timed = benched["timing"]
    assert timed["method"] == "host-clock" and timed["candidate"]["n"] >= 1
    # 10 calls at least (the default min_runs), unless the 150 ms budget ran out first on a busy machine
    assert timed["candidate"]["n"] >= 10 or timed["stop_reason"] == "budget"

    rc, out, err = kj("submit", SEED, WRONG, *CPU, *QUICK_TIMING, "--json")
    assert rc == 1, err
    submitted = parse_json(out)
    assert submitted["verdict"] == "fail" and "wrong-output" in codes(submitted)

    rows = Store(tmp_path / "results.sqlite").history()
    assert [r["verb"] for r in rows] == ["submit", "bench", "check"]  # newest first
    assert [r["verdict"] for r in rows] == ["fail", "pass", "pass"]

    rc, out, _ = kj("history", "--json")
    assert rc == 0 and len(json.loads(out)) == 3


def test_api_submit_runs_a_hidden_recheck_without_showing_it(fast):
    result = api.submit(SEED, CORRECT, fast)
    assert result.verdict == "pass"
    hidden = [f for f in result.findings if f.stage == "hidden-recheck"]
    assert [f.code for f in hidden] == ["hidden-recheck"]
    assert "(5 / 5) trials passed" in hidden[0].message
    assert len(result.trials) == 5  # only the open trials are shown, not the hidden ones


def test_api_bench_times_against_the_eager_baseline(fast):
    # a fixed count of timed calls, whatever the machine's load: two of them at least are checked (at
    # positions drawn among the first min_runs, stages/measure.py: GUARANTEED_CHECKS), others drawn call by
    # call (CheckSchedule)
    fixed = {"min_runs": 24, "max_runs": 24, "target_rel_sem": 0.0, "budget_ms": 1e7, "compile_baseline": False}
    result = api.bench(SEED, CORRECT, fast, timing=fixed)
    assert result.verdict == "pass"
    assert set(result.speedup) == {"eager"} and result.speedup["eager"] > 0
    assert result.timing["candidate"]["n"] == 24
    assert result.timing["floor"]["floor_ms"] > 0 and result.timing["checked_outputs"] >= 1
