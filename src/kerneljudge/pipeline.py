"""The evaluation pipeline, readable from the top:

    load problem -> load candidate -> baselines -> build -> check -> probe -> time -> timed checks -> verdict

Each stage is one call with typed values in and out; each stage's wall time is recorded on the
result, and its start is told to the `on_progress` observer (progress.py), with the worker's own
progress messages. The reference is timed (baselines) before the worker imports the candidate, so
nothing the candidate leaves running can slow it. Both stages that time hold the device's timing lock
(devicelock.py). Candidate code runs only in
its worker; the reference runs only in the referee, a second process that never imports candidate code;
the judge relays data between them (stages/) and decides. A stage that fails to give
the next one what it needs ends the run with the findings so far: the result is always returned.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import sys
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kerneljudge import cache, devicelock, lint, protocol, sandbox, suite
from kerneljudge.candidate import load_candidate
from kerneljudge.errors import CandidateError, ProblemError, UsageError
from kerneljudge.isolation import REFEREE, WORKER, WorkerFailure, WorkerPool, WorkerProcess, first_ping, together
from kerneljudge.memtally import MemoryTally
from kerneljudge.options import Options, check_device
from kerneljudge.problem import load_problem
from kerneljudge.problemlint import judge as problemlint
from kerneljudge.progress import CLOSING, ProgressEvent, ProgressObserver, ignore
from kerneljudge.records import Build, Candidate, Finding, Problem, Result, Trial, decide_verdict
from kerneljudge.stages import check, measure, probe
from kerneljudge.stages import memory as memory_stage
from kerneljudge.stages.context import DeviceMemo, Judging, StageEnded


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
    sandbox: dict[str, Any] = field(default_factory=dict)  # the worker's sandbox layers (sandbox.Layers)
    shadow: "Run | None" = None  # --protocol kernelbench: the strict run beside the verdict
    memory: dict[str, Any] = field(default_factory=dict)  # stages/memory: peaks, footprint, device total
    kernelbench_findings: list[Finding] = field(default_factory=list)  # of KernelBench's own trials only
    on_progress: ProgressObserver = ignore

    @contextmanager
    def stage(self, name: str, doing: str = "", *processes: WorkerProcess):
        """Time stage `name`, say what it does, and let `processes` name it in their failures."""
        self.on_progress(ProgressEvent(name, doing))
        for process in processes:
            process.stage = name
        started = self.clock_ms()
        try:
            yield
        finally:
            self.stage_ms[name] = round(self.stage_ms.get(name, 0.0) + self.clock_ms() - started, 3)

    def worker_progress(self, stage: str) -> Callable[[dict[str, Any]], None]:
        """Where a worker's progress messages during `stage` go."""
        return lambda data: self.on_progress(ProgressEvent.from_worker(stage, data))

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
             clock_ms: Callable[[], float] = lambda: time.perf_counter() * 1e3,
             memo: DeviceMemo | None = None) -> Result:
    """Judge one candidate against one problem, and record the result (options.store_path).
    With a `pool`, the worker comes pre-started from it (see isolation.WorkerPool); `on_progress` is
    told what each stage is doing (progress.py). `memo`: what a batch keeps per device of the baselines its
    lanes measured and the range plans they made (stages/context.DeviceMemo), reused by their later candidates of
    the same problem.

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
        _judge_in_workers(run, problem, candidate, device, seed, pool, memo)
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


def _judge_in_workers(run: Run, problem: Problem, candidate: Candidate, device: str, seed: int,
                      pool: WorkerPool | None, memo: DeviceMemo | None = None) -> None:
    """The stages that run code: the candidate in its worker, the reference in the referee (started together,
    both import torch at once); the judge relays data between them and decides."""
    options = run.options
    worker_options = options.worker_options()
    worker = pool.take(worker_options, WORKER, device) if pool is not None else WorkerProcess(worker_options)
    referee = pool.take(worker_options, REFEREE, device) if pool is not None else \
        WorkerProcess(worker_options, module=REFEREE)
    judging = Judging(options, worker, referee, device, on_progress=run.on_progress, memo=memo,
                      tally=MemoryTally("cuda" if device.startswith("cuda") else "cpu"))
    worker.tally = referee.tally = judging.tally
    closing: dict[str, float] = {}
    try:
        with ExitStack() as processes:
            problem_data = {"path": str(problem.path), "source": problem.source, "constants": problem.constants}
            with run.stage("worker", "starting the worker and the referee (they import torch)", worker, referee):
                for context in (together(worker, referee), memory_stage.reported(judging, run.memory),
                                _closing(run, closing)):  # a process not pre-started starts here
                    processes.enter_context(context)
                # both take the device at once (a GPU's context: a quarter of a second each); the referee then
                # tries the worker's shared probe, a second ping that finds its device taken
                started = referee.submit(first_ping(worker_options, device, REFEREE))
                hello = judging.take(worker.call(first_ping(worker_options, device, WORKER)), "worker")
                checked = judging.take(referee.collect(started), "worker")
                if options.worker.device_share and hello.get("share_probe") is not None:
                    checked = judging.take(referee.call(protocol.Ping(device, worker_options.memory_limit_mb,
                                                                      share_probe=hello["share_probe"])), "worker")
                run.memory["outputs_cross"] = _share_outputs(judging, checked)
                run.device, run.versions = hello["device"], hello["versions"]
                device_key = cache.key(run.device, run.versions)
                judging.problem_id = cache.key(problem.sha256, problem.constants, options.protocol, device_key)
                memory_stage.precheck(judging, problem_data, seed, run.memory)
            with _judged_stage(run, judging, "problem-lint",
                               "checking the problem itself (once per problem and sizes)"):
                run.findings.extend(problemlint.evaluation_notice(problem, options, device, referee))
            setup = check.start_setup(judging, problem_data, seed, kernelbench=options.protocol == "kernelbench")
            measured = kept = problem_key = None
            if options.timing.enabled:
                problem_key = cache.key(problem.sha256, problem.constants, device_key, dataclasses.asdict(options.timing))
                kept = judging.kept_baselines(problem_key)  # read once: another lane may forget them meanwhile
                if kept is None:  # the reference timed before any candidate code runs
                    with run.stage("reference", "the referee building the reference", referee):
                        setup = check.reference_built(judging, setup)
                    with _timing_lock(run, worker, "baselines"), _judged_stage(
                            run, judging, "baselines", "timing the reference, before the candidate is loaded"):
                        measured = measure.run_baselines(judging, problem_key, device_key, run.clock_ms)
            with run.stage("build", "importing the problem and the candidate", worker, referee):
                reply = worker.call(protocol.Build(device, problem_data,
                                                   {"path": str(candidate.path), "sha256": candidate.sha256,
                                                    "kinds": list(candidate.kinds)}, options.arch),
                                    on_progress=run.worker_progress("build"))
                try:
                    run.build = Build(**protocol.build_info(reply["build"])) if reply.get("build") else None
                except protocol.Untrusted as exc:
                    judging.findings.append(Finding.of("tampering", f"the worker's reply was malformed: {exc}",
                                                       stage="build"))
                    raise StageEnded() from None
                judging.take(reply, "build")
            with _judged_stage(run, judging, "check", f"{options.check.trials} correctness trials"):
                if not _check(run, judging, problem_data, seed, setup):
                    return
            if options.probes:
                with _judged_stage(run, judging, "probes", "integrity probes"):
                    try:
                        probe.run_probes(judging, seed)
                    finally:  # (what the probes saw and their times, a crash's too)
                        run.probe_info = dict(judging.info)
                    if _blocked(judging):
                        return
            if options.hidden_recheck:
                with _judged_stage(run, judging, "hidden-recheck", "trials on secret seeds"):
                    if not _hidden_recheck(run, judging, seed):
                        return
            if (measured or kept) and not run.failed and not _failed(judging):  # (none: said in the baselines stage)
                with _timing_lock(run, worker, "timing"), _judged_stage(run, judging, "timing", "timing the candidate"):
                    run.timing = measure.run_timing(judging, problem_key, device_key, run.clock_ms, measured, kept)
                if judging.held_checks and not _blocked(judging):  # the device no longer the timing's alone
                    with _judged_stage(run, judging, "timed-checks", f"comparing {len(judging.held_checks)} timed "
                                       "outputs with the reference's"):
                        measure.run_held_checks(judging)
    except StageEnded:
        pass
    except WorkerFailure as failure:
        judging.findings.append(failure.finding)
        run.output_tail = failure.output_tail
    finally:
        if closing:  # the memory report and the processes' end
            run.stage_ms[CLOSING] = round(run.clock_ms() - closing["at_ms"], 3)
        _sandbox_checks(run, worker, judging)
        _collect(run, judging)
        if run.blocked and run.output_tail is None:
            run.output_tail = worker.output_tail() or None
        if pool is not None:
            pool.fill(worker_options, device)  # the next processes start now, not during this evaluation's measurements


@contextmanager
def _closing(run: Run, closing: dict[str, float]):
    """Say when the stages are over and the processes are about to end, however they ended, and when."""
    try:
        yield
    finally:
        run.on_progress(ProgressEvent(CLOSING, "ending the worker and the referee"))
        closing["at_ms"] = run.clock_ms()


@contextmanager
def _judged_stage(run: Run, judging: Judging, name: str, doing: str):
    """A stage that runs the problem's or the candidate's code: timed, and each process's memory peak in it
    recorded when it ends normally (stages/memory.mark_stage), so a peak is traced to its stage."""
    with run.stage(name, doing, judging.worker, judging.referee):
        yield
    memory_stage.mark_stage(judging, run.memory, name)


def _sandbox_checks(run: Run, worker: WorkerProcess, judging: Judging) -> None:
    """The worker's sandbox layers onto the result, and the judge's files it changed (the worker has ended:
    WorkerProcess.close compared the package and, without the read-only view, the store with their
    snapshot): a changed package fails the candidate, unless it was read-only to the worker (then another
    process changed it: an update of the judge during the run, said); a changed store is said (another
    evaluation may have recorded into it meanwhile)."""
    if worker.sandbox is not None:
        run.sandbox = worker.sandbox.to_json()
    package = str(sandbox.package_dir())
    ours = [path for path in worker.breaches if path.startswith(package + os.sep)]
    store = [path for path in worker.breaches if path not in ours]
    if worker.ran_while_stopped:
        pids = sorted(set(worker.ran_while_stopped))
        judging.findings.append(Finding.of(
            "tampering", f"the worker's process(es) {', '.join(map(str, pids[:5]))} ran while the worker was stopped "
            "for another candidate's timing on the device (a batch lane's)", stage="worker", pids=pids[:50]))
    if worker.oom_kills and not any(f.code == "out-of-memory" for f in judging.findings):
        judging.findings.append(Finding.of(
            "memory-limit", f"the kernel killed {worker.oom_kills} process(es) of the worker in its memory cgroup "
            f"(the limit of its processes together: {worker.memory_limit_bytes / 2**20:.0f} MiB); the evaluation "
            "went on without them", stage="worker", kills=worker.oom_kills))
    package_changed = ("package-changed", "ran while files of the judge's package changed (read-only to it)") \
        if worker.package_read_only else ("sandbox-breach", "changed files of the judge's package")
    for (code, what), files in ((package_changed, ours),
                                (("store-changed", "ran while the results store changed"), store)):
        if files:
            shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
            judging.findings.append(Finding.of(code, f"the candidate's process {what}: {shown}", stage="worker",
                                               files=files[:50]))


def _share_outputs(judging: Judging, checked: dict) -> str:
    """How the candidate's large outputs reach the referee: as CUDA IPC handles where the referee opened the
    worker's probe (proc/deviceshare), else through host memory (and why)."""
    if "share_refused" not in checked:
        return "host memory"
    refused = checked["share_refused"]
    if refused is None and judging.take(judging.worker.call(protocol.ShareOutputs()), "worker").get("sharing"):
        return "cuda-ipc"
    return f"host memory ({refused or 'the worker did not share'})"


def _blocked(judging: Judging) -> bool:
    return any(f.blocking for f in judging.findings)


def _failed(judging: Judging) -> bool:
    return any(f.blocking or f.severity == "fail" for f in judging.findings)


def _collect(run: Run, judging: Judging) -> None:
    """The stages' findings onto the run (under --protocol kernelbench, the strict ones onto its shadow)."""
    target = run.strict if run.shadow is not None else run
    target.findings.extend(judging.findings)
    judging.findings.clear()


def _check(run: Run, judging: Judging, problem_data: dict, seed: int, started: check.SetupStarted) -> bool:
    """Strict trials; under --protocol kernelbench, KernelBench's trials give the verdict and the strict
    trials run too, so the report can say where the two disagree. `started`: the referee's first setup,
    sent before the build (and collected before it where the reference is timed first)."""
    trials = run.options.check.trials
    if run.options.protocol == "kernelbench":
        ready = check.setup(judging, problem_data, seed, kernelbench=True, started=started)
        if ready is None:
            return False
        run.memory["reference_state"] = ready["reference_state"]
        run.trials.extend(check.run_check(judging, seed, trials, kernelbench_seeds=ready["trial_seeds"][:trials]))
        run.kernelbench_findings = list(judging.findings)
        run.findings.extend(judging.findings)
        judging.findings.clear()
        if run.blocked:
            return False
        run.shadow = Run(run.options, run.clock_ms)  # the strict run, kept apart from the verdict
        if check.setup(judging, problem_data, seed) is None:
            return False
        run.shadow.trials.extend(check.run_check(judging, seed, trials))
        return not _blocked(judging)
    ready = check.setup(judging, problem_data, seed, started=started)
    if ready is None:
        return False
    run.memory["reference_state"] = ready["reference_state"]  # a copy of the parameters crossed, or none did
    run.trials.extend(check.run_check(judging, seed, trials))
    return not _blocked(judging) and all(t.passed for t in run.trials)


def _hidden_recheck(run: Run, judging: Judging, seed: int) -> bool:
    """submit: more trials on inputs from seeds nobody sees; only the outcome is reported."""
    before = len(judging.findings)
    trials = check.run_check(judging, seed, max(run.options.check.trials, 5), label=f"hidden:{secrets.token_hex(16)}")
    hidden = judging.findings[before:]
    del judging.findings[before:]
    passed = sum(t.passed for t in trials)
    failing = sorted({f.code for f in hidden if f.severity in ("error", "fail")})
    ok = bool(trials) and passed == len(trials) and not failing
    code = "hidden-recheck" if ok else (failing[0] if failing else "wrong-output")
    message = (f"hidden re-check: ({passed} / {len(trials)}) trials passed" if ok else
               f"hidden re-check failed: ({passed} / {len(trials)}) trials passed; details are withheld")
    judging.findings.append(Finding.of(code, message, stage="hidden-recheck"))
    return ok


@contextmanager
def _timing_lock(run: Run, worker: WorkerProcess, stage: str):
    """The device's timing lock (devicelock.py) around a stage that times (the baselines, the candidate); a wait
    is said at once, becomes a finding, and is not counted against the worker's time limit."""
    key = devicelock.device_key(run.device)

    def on_wait(holder: int | None) -> None:
        run.on_progress(ProgressEvent(stage, f"waiting for the timing lock on {key}, held by "
                                      f"{f'pid {holder}' if holder else 'another evaluation'}", notice=True))

    run.on_progress(ProgressEvent(stage, f"taking the timing lock on {key}"))  # a batch lane's cue (batch/gate.py)
    with devicelock.timing_lock(run.options.cache_dir / "locks", key, on_wait=on_wait,
                                clock_ms=run.clock_ms) as wait:
        if wait is not None:
            worker.extend_deadline(wait.waited_ms / 1e3)
            run.findings.append(Finding.of(
                "timing-lock-wait", f"timing waited {wait.waited_ms / 1e3:.1f} s for another evaluation timing on "
                f"{key} (pid {wait.holder_pid or 'unknown'})", stage=stage, waited_ms=round(wait.waited_ms, 1),
                holder_pid=wait.holder_pid, device=key))
        yield


def _protocol_difference(run: Run) -> None:
    """Under --protocol kernelbench: say where KernelBench's verdict and the strict one differ, and why."""
    kernelbench = decide_verdict(run.findings, run.trials)
    shared = [f for f in run.findings if not any(f is k for k in run.kernelbench_findings)]  # load, lint, probes
    strict = decide_verdict(shared + run.shadow.findings, run.shadow.trials)
    if kernelbench != strict:
        caught = [f for f in run.shadow.findings if f.severity in ("error", "fail")]
        why = "; ".join(f"{f.code}: {f.message}" for f in caught[:4]) or (
            "KernelBench's protocol does not copy the reference's weights (it seeds both constructors alike), so a "
            "ModelNew that creates its parameters in another order gets other values; the strict protocol loads "
            "the reference's state_dict" if strict == "pass" else "see the strict trials")
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
        seed=seed, worker_output_tail=run.output_tail, probes=run.probe_info, memory=run.memory,
        sandbox=run.sandbox,
        reproduce=run.options.command_line(
            verb, problem.name.split("_")[0] if problem.builtin else str(problem.path), str(candidate.path),
            seed=seed, device=device, preset=problem.preset) if problem and candidate else None)
