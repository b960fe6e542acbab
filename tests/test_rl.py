"""The RL environment: reset, and the reward of real CPU evaluations (timing off) and of hand-built Results."""

from __future__ import annotations

import math

import pytest

from kerneljudge.errors import KernelJudgeError
from kerneljudge.options import Options
from kerneljudge.records import Finding, Result, Trial
from kerneljudge.rl import KernelEnv, RewardConfig, default_integrity_codes, reward_of

from scaled_relu import EXITS as CRASH, GOOD, MUTATES, PROBLEM, WRONG  # noqa: E402


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rl")
    (folder / "prob.py").write_text(PROBLEM)
    options = Options(device="cpu", store_path=None, cache_dir=folder / "cache").replace(
        timing={"enabled": False}, check={"trials": 2})
    return KernelEnv(folder / "prob.py", options=options, max_steps=4)


def test_reset_describes_the_task(env):
    task = env.reset()
    assert task["problem"] == "prob" and task["constants"] == {"batch": 8, "n": 64}
    assert task["reference_source"] == PROBLEM and PROBLEM in task["prompt"]
    assert "class ModelNew" in task["instructions"] and "load_state_dict" in task["instructions"]
    assert task["timed"] is False and task["max_steps"] == 4
    assert "input-mutation" in task["reward"]["integrity_codes"]


def test_step_rewards_for_real_candidates(env):
    env.reset()
    good = env.step(GOOD)
    assert good.result.verdict == "pass" and good.reward == pytest.approx(0.4) and not good.done
    assert good.info["terms"]["speedup"] == 0.0 and good.info["feedback"].startswith("verdict: pass")

    wrong = env.step(WRONG)
    assert wrong.result.verdict == "fail" and wrong.reward == pytest.approx(0.1)  # it built and ran
    assert "wrong-output" in wrong.info["feedback"] and wrong.info["terms"]["integrity_violations"] == []

    crash = env.step(CRASH)
    assert crash.result.verdict == "error" and crash.reward == 0.0
    assert "candidate-exit" in [f.code for f in crash.result.findings] and crash.info["terms"]["zeroed_by"] == "error"

    cheat = env.step(MUTATES)
    assert all(t.passed for t in cheat.result.trials)  # the output itself is right...
    assert "input-mutation" in [f.code for f in cheat.result.findings]  # ...but the judge saw the mutation
    assert cheat.reward == 0.0 and cheat.info["terms"]["zeroed_by"] == "integrity" and cheat.done
    with pytest.raises(RuntimeError, match="reset"):
        env.step(GOOD)


def test_syntax_error_and_usage_errors(env, tmp_path):
    env.reset()
    broken = env.step("class ModelNew(:\n")
    assert broken.result.verdict == "error" and broken.reward == 0.0
    with pytest.raises(KernelJudgeError):
        KernelEnv(tmp_path / "missing.py", options=env.options).reset()


def _result(verdict: str, codes: tuple[str, ...] = (), speedup: dict | None = None) -> Result:
    findings = tuple(Finding.of(code, "m", stage="check") for code in codes)
    return Result(verdict=verdict, findings=findings, trials=(Trial(0, verdict != "fail"),), problem={},
                  candidate={}, device={}, versions={}, protocol="strict",
                  timing={"speedup": speedup} if speedup else None)


def test_reward_formula():
    config = RewardConfig()
    assert reward_of(_result("pass", speedup={"eager": 2.0}))[0] == pytest.approx(0.1 + 0.3 + 0.3)
    assert reward_of(_result("pass", speedup={"eager": 64.0}))[0] == pytest.approx(1.0)  # clipped at 4x
    assert reward_of(_result("pass", speedup={"eager": 0.5}))[0] == pytest.approx(0.4)  # no penalty below 1x
    assert reward_of(_result("pass", speedup={"compile": 2.0}))[0] == pytest.approx(0.4)  # other baseline only
    assert reward_of(_result("pass", speedup={"eager": math.inf}))[0] == pytest.approx(0.4)
    assert reward_of(_result("fail", ("timed-output-mismatch",), {"eager": 9.0}))[0] == 0.0
    assert reward_of(_result("fail", ("output-shape",)))[0] == pytest.approx(0.1)
    lenient = RewardConfig(integrity_zeroes=False)
    assert reward_of(_result("fail", ("stale-inputs",)), lenient)[0] == pytest.approx(0.1)
    assert reward_of(_result("pass", ("lint-timing",), {"eager": 2.0}), config)[0] == pytest.approx(0.7)  # a warning
    assert "wrong-output" not in default_integrity_codes() and "tampering" in default_integrity_codes()
    scaled = RewardConfig(compile_reward=0.0, correct_reward=1.0, speedup_scale=1.0, speedup_baseline="compile")
    assert reward_of(_result("pass", speedup={"compile": 2.0}), scaled)[0] == pytest.approx(2.0)
