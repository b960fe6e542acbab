"""The evaluation pipeline, readable from the top:

    load problem -> load candidate -> (worker) build -> check -> probe -> time -> verdict

Each stage is one call with typed values in and out; each stage's wall time is recorded on the
result, and its start is told to the `on_progress` observer (progress.py), with the worker's own
progress messages. Timing holds the device's timing lock (devicelock.py). Candidate code runs only in
the worker; what comes back is data. A stage that fails to give the next one what it needs ends the
run with the findings so far: the result is always returned.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kerneljudge import cache, devicelock, lint, suite
from kerneljudge.candidate import load_candidate
from kerneljudge.errors import CandidateError, ProblemError, UsageError
from kerneljudge.isolation import WorkerFailure, WorkerPool, WorkerProcess
from kerneljudge.options import Options, check_device
from kerneljudge.problem import load_problem
from kerneljudge.progress import ProgressEvent, ProgressObserver, ignore
from kerneljudge.records import Build, Candidate, Finding, Problem, Result, Trial, decide_verdict


@dataclass
class Run:
    """What one evaluation has gathered so far."""

    options: Options
    clock_ms: Callable[[], float]
    findings: list[Finding] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    device: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    build: Build | None = None
    timing: dict[str, Any] | None = None
    probe_info: dict[str, Any] = field(default_factory=dict)
    output_tail: str | None = None
    shadow: "Run | None" = None  # --protocol kernelbench: the strict run beside the verdict
    on_progress: ProgressObserver = ignore

    @contextmanager
    def stage(self, name: str, doing: str = ""):
        self.on_progress(ProgressEvent(name, doing))
        started = self.clock_ms()
        try:
            yield
        finally:
            self.stage_ms[name] = round(self.stage_ms.get(name, 0.0) + self.clock_ms() - started, 3)

    def worker_progress(self, stage: str) -> Callable[[dict[str, Any]], None]:
        """Where a worker's progress messages during `stage` go."""
        return lambda data: self.on_progress(ProgressEvent.from_worker(stage, data))

    def add(self, reply: dict[str, Any]) -> bool:
        """Take a worker reply's findings; False when one of them ends the run."""
        new = [Finding.from_json(f) for f in reply.get("findings", [])]
        self.findings.extend(new)
        return not any(f.blocking for f in new)

    @property
    def blocked(self) -> bool:
        return any(f.blocking for f in self.findings)

    @property
    def strict(self) -> "Run":
        """Where the strict protocol's findings go: this run, or under --protocol kernelbench its shadow."""
        return self.shadow or self

    @property
    def failed(self) -> bool:
        """Something already failed: timing a wrong candidate would mean nothing."""
        return self.blocked or any(f.severity == "fail" for f in self.findings) or not all(
            t.passed for t in self.trials)


def resolve_device(requested: str) -> str:
    """"auto" is cuda when an NVIDIA GPU is visible, else cpu; "cpu", "cuda" and "cuda:N" as given.

    The judge does not import torch (it starts faster and runs no CUDA): the GPU is seen through the
    driver's files, and the worker confirms the device with torch before anything runs there."""
    requested = check_device(requested)
    if requested == "auto":
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        has_gpu = any(Path("/proc/driver/nvidia/gpus").glob("*")) or Path("/dev/nvidia0").exists()
        return "cuda" if has_gpu and visible not in ("", "-1") else "cpu"
    return requested


def resolve_solution(solution: str | Path | None, problem: Problem, device_type: str) -> Path:
    """A path, `@variant` for a shipped solution, or None for the shipped default on this device."""
    if solution is None or str(solution).startswith("@"):
        if not problem.builtin:
            raise UsageError(f"{problem.name} is not a built-in problem: give the SOLUTION file to evaluate")
        shipped = suite.shipped_solutions(problem.name)
        if solution is None:
            chosen = suite.default_solution(problem.name, device_type)
            if chosen is None:
                raise UsageError(f"no shipped solution of {problem.name} runs on {device_type}; give a SOLUTION file")
            return chosen
        variant = str(solution)[1:]
        if variant not in shipped:
            raise UsageError(f"{problem.name} ships no {variant!r} solution (shipped: {', '.join(shipped) or 'none'})")
        return shipped[variant]
    return Path(solution)


def evaluate(problem_ref: str | Path, solution: str | Path | None = None, options: Options | None = None, *,
             verb: str = "evaluate", pool: WorkerPool | None = None, on_progress: ProgressObserver = ignore,
             clock_ms: Callable[[], float] = lambda: time.perf_counter() * 1e3) -> Result:
    """Judge one candidate against one problem, and record the result (options.store_path).
    With a `pool`, the worker comes pre-started from it (see isolation.WorkerPool); `on_progress` is
    told what each stage is doing (progress.py).

    Never raises for bad candidate or problem files (they become findings); raises UsageError for
    options that cannot be honoured (an unknown preset or constant, a device that is not there)."""
    options = (options or Options()).validate()
    run = Run(options, clock_ms, on_progress=on_progress)
    device = resolve_device(options.device)
    device_type = device.split(":")[0]
    seed = options.check.seed if options.check.seed is not None else secrets.randbits(63)
    problem = candidate = None
    with run.stage("load", "reading the problem and the candidate"):
        try:
            problem = load_problem(problem_ref, preset=options.preset, overrides=options.overrides,
                                   small_if_builtin=device_type == "cpu", problems_root=options.problems_root)
            candidate = load_candidate(resolve_solution(solution, problem, device_type))
        except ProblemError as exc:
            run.findings.append(Finding.of("problem-invalid", str(exc), stage="load"))
        except CandidateError as exc:
            run.findings.append(Finding.of("candidate-invalid", str(exc), stage="load"))
    if problem is not None and (problem.preset or problem.overrides):
        sizes = ", ".join(f"{k}={v}" for k, v in problem.overrides.items())
        run.findings.append(Finding.of("preset-used", f"sizes: {sizes}" + (f" (preset {problem.preset!r}"
                                       f"{', chosen for a CPU run' if not options.preset else ''})"
                                       if problem.preset else ""), stage="load"))
    if candidate is not None:
        run.findings.extend(lint.findings(candidate))
        _judge_in_worker(run, problem, candidate, device, seed, pool)
    result = _result(run, problem, candidate, device, seed, verb)
    if options.store_path is not None:
        _record(result, options, verb, candidate, solution)
    return result


def _record(result: Result, options: Options, verb: str, candidate: Candidate | None, solution) -> None:
    """Stage "record": one complete row in the results store (a failure to record is reported, not fatal)."""
    from kerneljudge.errors import StoreError
    from kerneljudge.store import Store

    source = candidate.source if candidate else ""
    try:
        Store(options.store_path).record(result, verb=verb, source=source, options=options.to_json(),
                                         candidate_path=None if candidate else str(solution))
    except StoreError as exc:
        print(f"kerneljudge: warning: the result was not recorded: {exc}", file=sys.stderr)


def _judge_in_worker(run: Run, problem: Problem, candidate: Candidate, device: str, seed: int,
                     pool: WorkerPool | None) -> None:
    options = run.options
    worker = pool.take(options.worker) if pool is not None else WorkerProcess(options.worker)
    try:
        with worker:
            with run.stage("worker", "starting the worker (it imports torch)"):
                hello = worker.call("ping", device=device, memory_limit_mb=options.worker.memory_limit_mb)
                if hello.get("error"):
                    raise UsageError(hello["error"] + "; choose another {argument} (cpu, cuda, cuda:N)", "device")
                if not run.add(hello):
                    return
                run.device, run.versions = hello["device"], hello["versions"]
            with run.stage("build", "importing the problem and the candidate"):
                if not _build(run, worker, problem, candidate, device, seed):
                    return
            with run.stage("check", f"{options.check.trials} correctness trials"):
                if not _check(run, worker):
                    return
            if options.probes:
                with run.stage("probes", "integrity probes"):
                    reply = worker.call("probe", atol=options.check.atol, rtol=options.check.rtol)
                    run.probe_info = reply.get("probe_info", {})
                    if not run.strict.add(reply):
                        return
            if options.hidden_recheck:
                with run.stage("hidden-recheck", "trials on secret seeds"):
                    if not _hidden_recheck(run, worker):
                        return
            if options.timing.enabled and not run.failed:
                _time(run, worker, problem)
    except WorkerFailure as failure:
        run.findings.append(failure.finding)
        run.output_tail = failure.output_tail
    finally:
        if run.blocked and run.output_tail is None:
            run.output_tail = worker.output_tail() or None
        if pool is not None:
            pool.fill()  # the next worker starts now, not during this evaluation's measurements


def _build(run: Run, worker: WorkerProcess, problem: Problem, candidate: Candidate, device: str, seed: int) -> bool:
    reply = worker.call("build", on_progress=run.worker_progress("build"), device=device, seed=seed,
                        cache_dir=str(run.options.cache_dir), arch=run.options.arch,
                        problem={"path": str(problem.path), "source": problem.source, "constants": problem.constants},
                        candidate={"path": str(candidate.path), "sha256": candidate.sha256,
                                   "kinds": list(candidate.kinds)})
    if reply.get("build"):
        run.build = Build(**{**reply["build"], "extensions": tuple(reply["build"]["extensions"])})
    return run.add(reply)


def _check(run: Run, worker: WorkerProcess) -> bool:
    """Strict trials; under --protocol kernelbench, KernelBench's trials give the verdict and the strict
    trials run too, so the report can say where the two disagree."""
    check = run.options.check
    if run.options.protocol == "kernelbench":
        reply = worker.call("check", protocol="kernelbench", trials=check.trials, atol=check.atol, rtol=check.rtol)
        run.trials.extend(Trial.from_json(t) for t in reply.get("trials", []))
        if not run.add(reply):
            return False
        run.shadow = Run(run.options, run.clock_ms)  # the strict run, kept apart from the verdict
        strict = worker.call("check", trials=check.trials, atol=check.atol, rtol=check.rtol)
        run.shadow.trials.extend(Trial.from_json(t) for t in strict.get("trials", []))
        run.shadow.add(strict)
        return not run.shadow.blocked
    reply = worker.call("check", trials=check.trials, atol=check.atol, rtol=check.rtol)
    run.trials.extend(Trial.from_json(t) for t in reply.get("trials", []))
    return run.add(reply) and all(t.passed for t in run.trials)


def _hidden_recheck(run: Run, worker: WorkerProcess) -> bool:
    """submit: more trials on inputs from seeds nobody sees; only the outcome is reported."""
    check = run.options.check
    reply = worker.call("check", trials=max(check.trials, 5), atol=check.atol, rtol=check.rtol,
                        label=f"hidden:{secrets.token_hex(16)}")
    trials = [Trial.from_json(t) for t in reply.get("trials", [])]
    hidden = [Finding.from_json(f) for f in reply.get("findings", [])]
    passed = sum(t.passed for t in trials)
    failing = sorted({f.code for f in hidden if f.severity in ("error", "fail")})
    ok = bool(trials) and passed == len(trials) and not failing
    code = "hidden-recheck" if ok else (failing[0] if failing else "wrong-output")
    message = (f"hidden re-check: ({passed} / {len(trials)}) trials passed" if ok else
               f"hidden re-check failed: ({passed} / {len(trials)}) trials passed; details are withheld")
    run.findings.append(Finding.of(code, message, stage="hidden-recheck"))
    return ok


# A cached torch.compile time is used only while it stays within this factor of the eager time measured
# in the same run (the cache folder is writable by candidate code, so a cached figure is not trusted alone).
COMPILE_PLAUSIBLE_FACTOR = 3.0
CACHEABLE_REL_SEM = 0.02  # a baseline noisier than this is not cached


def _time(run: Run, worker: WorkerProcess, problem: Problem) -> None:
    """Timing of the candidate and the baselines. The eager reference is timed in every run; the
    torch.compile reference (slow to compile) and the copy bandwidth come from the cache when measured
    before, checked against what this run measured."""
    opts = dataclasses.asdict(run.options.timing)
    device_key = cache.key(run.device, run.versions)
    baseline_key = cache.key(problem.sha256, problem.constants, device_key,
                             {k: opts[k] for k in ("min_runs", "max_runs", "min_time_ms", "budget_ms", "target_rel_sem",
                                                   "input_sets", "cuda_graph", "warmup_runs", "warmup_ms")})
    cached_compile = (cache.load(run.options.cache_dir, "baselines", baseline_key) or {}).get("compile")
    wanted = ["eager"] if opts["baselines"] else []
    if opts["baselines"] and opts["compile_baseline"] and cached_compile is None:
        wanted.append("compile")
    bandwidth = cache.load(run.options.cache_dir, "bandwidth", device_key) or {}
    with _timing_lock(run, worker):
        with run.stage("timing", "timing the candidate" + (" and the baselines" if wanted else "")):
            reply = worker.call("time", on_progress=run.worker_progress("timing"), timing=opts, baselines=wanted,
                                bandwidth_gbps=bandwidth.get("gbps"))
    if not run.strict.add(reply) or "timing" not in reply:
        return
    block = reply["timing"]
    worker_ms = block.pop("stage_ms")
    run.stage_ms["baselines"] = round(worker_ms["baselines"], 3)
    run.stage_ms["timing"] = round(run.stage_ms["timing"] - worker_ms["baselines"], 3)
    if not bandwidth:
        cache.save(run.options.cache_dir, "bandwidth", device_key, {"gbps": block["floor"]["bandwidth_gbps"]})
    baselines = block["baselines"]
    if cached_compile is not None and opts["compile_baseline"]:
        baselines["compile"] = _checked_compile(run, cached_compile, baselines.get("eager"), baseline_key)
        block["baselines_cached"] = ["compile"] if baselines["compile"] else []
    elif baselines.get("compile") and baselines["compile"]["rel_sem"] <= CACHEABLE_REL_SEM:
        cache.save(run.options.cache_dir, "baselines", baseline_key, {"compile": baselines["compile"]})
    median = block["candidate"]["median_ms"]
    block["speedup"] = {name: round(stats["median_ms"] / median, 4)
                        for name, stats in baselines.items() if stats and median}
    run.timing = block


@contextmanager
def _timing_lock(run: Run, worker: WorkerProcess):
    """The device's timing lock (devicelock.py) around the timing stage; a wait is said at once, becomes
    a finding, and is not counted against the worker's time limit."""
    key = devicelock.device_key(run.device)

    def on_wait(holder: int | None) -> None:
        run.on_progress(ProgressEvent("timing", f"waiting for the timing lock on {key}, held by "
                                      f"{f'pid {holder}' if holder else 'another evaluation'}", notice=True))

    with devicelock.timing_lock(run.options.cache_dir / "locks", key, on_wait=on_wait,
                                clock_ms=run.clock_ms) as wait:
        if wait is not None:
            worker.extend_deadline(wait.waited_ms / 1e3)
            run.findings.append(Finding.of(
                "timing-lock-wait", f"timing waited {wait.waited_ms / 1e3:.1f} s for another evaluation timing on "
                f"{key} (pid {wait.holder_pid or 'unknown'})", stage="timing", waited_ms=round(wait.waited_ms, 1),
                holder_pid=wait.holder_pid, device=key))
        yield


def _checked_compile(run: Run, cached: dict[str, Any], eager: dict[str, Any] | None, key: str) -> dict | None:
    """The cached torch.compile time if it is plausible beside this run's eager time; else none (and the
    entry is dropped, so the next run measures it again)."""
    if eager is None or cached["median_ms"] <= COMPILE_PLAUSIBLE_FACTOR * eager["median_ms"]:
        return cached
    cache.clear_entry(run.options.cache_dir, "baselines", key)
    run.findings.append(Finding.of("baseline-unavailable", f"compile: the cached time {cached['median_ms']:.4g} ms is "
                                   f"over {COMPILE_PLAUSIBLE_FACTOR:g}x this run's eager {eager['median_ms']:.4g} ms; "
                                   "it was dropped and is measured again next run", stage="baselines"))
    return None


def _protocol_difference(run: Run) -> None:
    """Under --protocol kernelbench: say where KernelBench's verdict and the strict one differ, and why."""
    kernelbench = decide_verdict(run.findings, run.trials)
    strict = decide_verdict(run.findings + run.shadow.findings, run.shadow.trials)
    if kernelbench != strict:
        caught = [f for f in run.shadow.findings if f.severity in ("error", "fail")]
        why = "; ".join(f"{f.code}: {f.message}" for f in caught[:4]) or "see the strict trials"
        run.findings.append(Finding.of(
            "protocol-difference", f"KernelBench's protocol gives {kernelbench}, the strict protocol {strict}: {why}",
            stage="check", kernelbench_verdict=kernelbench, strict_verdict=strict,
            strict_findings=[f.to_json() for f in run.shadow.findings]))


def _result(run: Run, problem: Problem | None, candidate: Candidate | None, device: str, seed: int,
            verb: str) -> Result:
    if run.shadow is not None:
        _protocol_difference(run)
    findings = tuple(run.findings)
    return Result(
        verdict=decide_verdict(findings, run.trials), findings=findings, trials=tuple(run.trials),
        problem=problem.to_json() if problem else {}, candidate=candidate.to_json() if candidate else {},
        device=run.device or {"type": device.split(":")[0]}, versions=run.versions, protocol=run.options.protocol,
        build=run.build, timing=run.timing, stage_ms=run.stage_ms,
        seed=seed, worker_output_tail=run.output_tail, probes=run.probe_info,
        reproduce=run.options.command_line(
            verb, problem.name.split("_")[0] if problem.builtin else str(problem.path), str(candidate.path),
            seed=seed, device=device, preset=problem.preset) if problem and candidate else None)
