"""A reinforcement-learning environment around the judge: propose kernel source, get a reward.

    env = KernelEnv("l2/51", options=Options(device="cuda"))
    task = env.reset()                      # problem name, reference source, sizes, instructions
    step = env.step(policy(task["prompt"]))  # StepResult(reward, result, done, info)
    steps = env.step_many([policy(task["prompt"]) for _ in range(64)])  # a batch of rollouts, one step

Each `step` is one full judge run on the proposed source (written to a temporary .py file): the same
pipeline, worker isolation, probes and timing as `kerneljudge eval` (`api.evaluate`), or `api.check`
when `options.timing.enabled` is False (no speedup term then). The reward is a pure function of the
Result (`reward_of`), documented on RewardConfig.

The reward is shaped so that cheating never pays: a candidate caught by an integrity check (mutating
its inputs, caching outputs, aliasing, patching clocks, skipped work, ...) gets 0, less than an honest
wrong answer, which still earns the compile reward.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kerneljudge import api, report
from kerneljudge.findings import CATALOG
from kerneljudge.isolation import WorkerPool
from kerneljudge.options import DEFAULT_TOLERANCE, Options
from kerneljudge.pipeline import resolve_device
from kerneljudge.problem import load_problem
from kerneljudge.records import Result

#: Failing codes that are not integrity violations although the catalog links them to a row: a wrong
#: answer is scored by the correctness term (it keeps the compile reward), not zeroed like a cheat.
NOT_INTEGRITY = frozenset({"wrong-output"})


def default_integrity_codes() -> frozenset[str]:
    """Finding codes that mean the candidate broke the judge's rules rather than merely being wrong:
    every failing catalog entry that guards against a row of the integrity catalog (`catalog_row`),
    except plain wrong output. Today: input-mutation, output-alias, output-type, stale-parameters,
    stale-inputs, unwritten-output, nondeterministic, thread-spawn, side-stream, unsynchronized-work,
    tampering, decoy-kernel, reference-fallback, timed-output-mismatch, impossible-speed."""
    return frozenset(code for code, spec in CATALOG.items()
                     if spec.severity == "fail" and not spec.blocking and spec.catalog_row is not None
                     and code not in NOT_INTEGRITY)


@dataclass(frozen=True)
class RewardConfig:
    """How a Result becomes a reward (all defaults give a reward in [0, 1]).

    reward = 0                                   if the verdict is "error" (did not build, import,
                                                 construct or run: compile/import error, missing
                                                 ModelNew, crash, exit, timeout, out of memory)
           = 0                                   if `integrity_zeroes` and any finding whose code is in
                                                 `integrity_codes` (default: default_integrity_codes())
                                                 is present, whatever the other terms
           = compile_reward                      if it ran but the verdict is "fail" (wrong answer)
           = compile_reward + correct_reward     if the verdict is "pass"
             + speedup_scale * clip(log2(speedup), 0, max_log2_speedup)
                                                 where speedup is the factor against `speedup_baseline`
                                                 (the reference timed eagerly); the term is 0 when the
                                                 run was not timed or that baseline is missing.

    With the defaults: honest wrong answer 0.1, correct 0.4, correct and 2x faster 0.7, 4x or more 1.0;
    any cheat 0. A slowdown is not punished beyond losing the speedup term (clip at 0), so that a
    correct but slow kernel still beats a wrong one.
    """

    compile_reward: float = 0.1
    correct_reward: float = 0.3
    speedup_scale: float = 0.3
    max_log2_speedup: float = 2.0
    speedup_baseline: str = "eager"
    integrity_zeroes: bool = True
    integrity_codes: frozenset[str] = field(default_factory=default_integrity_codes)


@dataclass(frozen=True)
class StepResult:
    """One step: the reward, the judge's full Result, whether the episode is over, and info
    (`terms`: the reward's parts; `feedback`: report.brief(result) for the next prompt; `step`)."""

    reward: float
    result: Result
    done: bool
    info: dict[str, Any]


def reward_of(result: Result, config: RewardConfig = RewardConfig()) -> tuple[float, dict[str, Any]]:
    """The reward of one Result under `config`, and its terms (see RewardConfig)."""
    codes = [f.code for f in result.findings]
    violations = sorted({c for c in codes if c in config.integrity_codes})
    terms: dict[str, Any] = {"compile": 0.0, "correct": 0.0, "speedup": 0.0, "speedup_factor": None,
                             "integrity_violations": violations, "zeroed_by": None}
    if result.verdict == "error":
        terms["zeroed_by"] = "error"
        return 0.0, terms
    if config.integrity_zeroes and violations:
        terms["zeroed_by"] = "integrity"
        return 0.0, terms
    terms["compile"] = config.compile_reward
    if result.verdict == "pass":
        terms["correct"] = config.correct_reward
        factor = (result.speedup or {}).get(config.speedup_baseline)
        if isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0:
            terms["speedup_factor"] = factor
            terms["speedup"] = config.speedup_scale * min(max(math.log2(factor), 0.0), config.max_log2_speedup)
    return terms["compile"] + terms["correct"] + terms["speedup"], terms


class KernelEnv:
    """One problem; each episode is up to `max_steps` proposals of a ModelNew source.

    `options` are the judge's options for every step (default: `Options()` with the results store
    off: training runs produce many records). `problem` is a path or a built-in name.
    """

    def __init__(self, problem: str | Path, *, options: Options | None = None,
                 reward: RewardConfig = RewardConfig(), max_steps: int = 1):
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        self.problem_ref = problem
        self.options = options if options is not None else Options(store_path=None)
        self.reward = reward
        self.max_steps = max_steps
        self.steps = 0
        self._ready = False
        self.pool = WorkerPool()  # the next step's worker starts when this one's evaluation ends

    def close(self) -> None:
        """Stop the pre-started worker."""
        self.pool.close()

    def reset(self) -> dict[str, Any]:
        """Start an episode; return the task: problem name, reference source, the sizes a run uses,
        presets, and `instructions` / `prompt` (what ModelNew must be and how it is judged)."""
        device_type = resolve_device(self.options.device).split(":")[0]
        problem = load_problem(self.problem_ref, preset=self.options.preset, overrides=self.options.overrides,
                               small_if_builtin=device_type == "cpu", problems_root=self.options.problems_root)
        self.steps = 0
        self._ready = True
        timed = self.options.timing.enabled
        instructions = instructions_text(timed=timed, trials=self.options.check.trials)
        return {
            "problem": problem.name,
            "reference_source": problem.source,
            "constants": dict(problem.constants),
            "preset": problem.preset,
            "device": self.options.device,
            "timed": timed,
            "max_steps": self.max_steps,
            "instructions": instructions,
            "prompt": f"{instructions}\n\nReference problem ({problem.name}):\n```python\n{problem.source}```\n"
                      + (f"Sizes for this run: {problem.constants}\n" if problem.overrides else ""),
            "reward": asdict(self.reward) | {"integrity_codes": sorted(self.reward.integrity_codes)},
        }

    def step_many(self, sources: list[str], *, lanes: int | None = None) -> list[StepResult]:
        """A batched step: every source judged as `step` judges one (same rewards), on the batch scheduler
        (api.evaluate_many: builds overlapped, one lane per GPU); results in the order of `sources`. The
        episode advances by one step."""
        if not self._ready:
            raise RuntimeError("call reset() before step_many(), and again after an episode is done")
        verb = "evaluate" if self.options.timing.enabled else "check"
        with tempfile.TemporaryDirectory(prefix="kj-rl-") as folder:
            entries = []
            for i, source in enumerate(sources):
                path = Path(folder) / f"candidate_{i}.py"
                path.write_text(source)
                entries.append({"problem": str(self.problem_ref), "solution": str(path), "id": str(i)})
            results = {f.job.id: f.result for f in api.evaluate_many(entries, self.options, verb=verb, lanes=lanes)}
        self.steps += 1
        done = self.steps >= self.max_steps
        if done:
            self._ready = False
        return [self._step_result(results[str(i)], done) for i in range(len(sources))]

    def _step_result(self, result: Result, done: bool) -> StepResult:
        reward, terms = reward_of(result, self.reward)
        return StepResult(reward=reward, result=result, done=done,
                          info={"step": self.steps, "verdict": result.verdict, "terms": terms,
                                "feedback": report.brief(result)})

    def step(self, source: str) -> StepResult:
        """Judge `source` (the full text of a candidate .py file); usage errors of the environment's own
        configuration (unknown problem, no GPU) raise KernelJudgeError, candidate failures never raise."""
        if not self._ready:
            raise RuntimeError("call reset() before step(), and again after an episode is done")
        verb = api.evaluate if self.options.timing.enabled else api.check
        with tempfile.TemporaryDirectory(prefix="kj-rl-") as folder:
            path = Path(folder) / "candidate.py"
            path.write_text(source)
            result = verb(self.problem_ref, path, self.options, pool=self.pool)
        self.steps += 1
        done = self.steps >= self.max_steps
        if done:
            self._ready = False
        return self._step_result(result, done)


def instructions_text(*, timed: bool, trials: int) -> str:
    """What a policy must produce, and how it is judged."""
    tolerances = ", ".join(f"{v:g} for {k}" for k, v in DEFAULT_TOLERANCE.items() if k != "float64")
    return (
        "Write a complete Python file that defines `class ModelNew(torch.nn.Module)`, a faster drop-in "
        "replacement for the reference `Model` below. Rules:\n"
        "- ModelNew takes the same constructor arguments (get_init_inputs()) and forward arguments "
        "(get_inputs()) as Model and returns the same output (shape, dtype, device).\n"
        "- It must hold the same parameters and buffers (names and shapes) as Model: the judge copies the "
        "reference's weights into it with load_state_dict, so do not rely on your own initialisation.\n"
        "- You may use custom CUDA/C++ (torch.utils.cpp_extension.load_inline) or Triton kernels, or plain PyTorch.\n"
        "- Do not import or call the reference Model, do not modify the inputs, do not cache outputs between calls, "
        "do not use threads or other CUDA streams, do not patch torch/time or read seeds or the environment.\n"
        f"Judging: the file runs in an isolated worker; {trials} correctness trials with secret random inputs are "
        f"compared with a float64 reference (atol=rtol {tolerances}); integrity probes check for stale "
        "results, aliasing, input mutation, unwritten output and tampering"
        + ("; then the call is timed against the reference (eager and torch.compile)." if timed else ".")
        + "\nReply with the file's source only."
    )
