"""The Ray backend of a batch: builds as CPU tasks on any node, judging in one actor per GPU.

It implements batch.backend.Backend, so the scheduler, the resume keys, the progress display, the store
and the exports are the local backend's: only where a build or an evaluation runs changes. Results come
back to the driver (the scheduler's process), which alone writes the store and the exports.

Faults. The judge actors are shared by the lanes through `JudgePool`: a lane takes whichever actor is
free and alive. An actor that dies mid-evaluation (its node lost, or a candidate that killed its
judge process) raises on the driver; the evaluation is given to the next free actor, so no candidate
is lost, and since only the driver records, and only what an actor returned, none is recorded twice.
Ray restarts a dead actor (`max_restarts=-1`), on another node if one has a free GPU; it rejoins the
pool once it answers. A candidate whose judge dies `max_attempts` times is recorded as an error
(`judge-lost`) rather than retried forever.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Sequence

import kerneljudge
from kerneljudge.batch.backend import Job
from kerneljudge.builder import BuildOutcome
from kerneljudge.cluster import require_ray
from kerneljudge.cluster.actor import JudgeActor, build_task
from kerneljudge.cluster.task import JudgeTask
from kerneljudge.errors import KernelJudgeError, UsageError
from kerneljudge.options import Options
from kerneljudge.problem import load_problem
from kerneljudge.progress import ProgressEvent, ProgressObserver, ignore
from kerneljudge.records import Build, Finding, Result

#: Deaths of its judge after which a candidate is recorded as `judge-lost`.
MAX_ATTEMPTS = 3

#: Seconds a free judge has to answer before it is given a candidate; one that does not (restarting,
#: or waiting for a GPU after its node was lost) goes back to the rejoin queue.
READY_S = 30.0

#: Longest pause between two questions to a restarting judge actor.
REJOIN_PAUSE_S = 2.0

#: Seconds a lane waits for a live judge actor before the run stops with a usage error (a cluster
#: whose GPUs are all gone or taken).
ACTOR_WAIT_S = 600.0


def connect(address: str | None):
    """Ray, connected to the cluster at `address` ("auto": the running one; None: a new local one).
    The driver's kerneljudge travels to the nodes with the job (Ray's py_modules), so the judges run the
    driver's code whatever is installed there (the nodes need its dependencies: torch, ...). A program
    that started Ray itself passes `runtime_env={"py_modules": [kerneljudge]}` to its own ray.init, or
    installs kerneljudge on every node."""
    ray = require_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR",
                     runtime_env={"py_modules": [kerneljudge]})
        except ConnectionError as exc:
            raise UsageError(f"cannot connect to a Ray cluster at {address!r}: {exc}; start one (ray start "
                             "--head) or give its address") from exc
    return ray


class JudgePool:
    """The judge actors of a cluster: one per GPU (`num_gpus=1`), or `judges` CPU judges on a cluster
    without GPUs. `judge(task)` runs one task on a free live actor, again on another if that one dies.
    Thread-safe: the batch's lanes and the reward service call it from several threads. `actor` is the
    class Ray runs (a stand-in in benchmarks/ray_saturation.py)."""

    def __init__(self, ray, *, judges: int | None = None, device: str = "auto", max_attempts: int = MAX_ATTEMPTS,
                 actor_wait_s: float = ACTOR_WAIT_S, actor: type = JudgeActor):
        self.ray = ray
        self.gpus = int(ray.cluster_resources().get("GPU", 0))
        self.count = judges or self.gpus or 1
        self.device = "cuda" if device.startswith("cuda") else device  # an actor sees its own GPU only
        self.max_attempts = max_attempts
        self.actor_wait_s = actor_wait_s
        resources = {"num_gpus": 1} if self.gpus else {}
        remote = ray.remote(num_cpus=1, max_restarts=-1, max_task_retries=0, **resources)(actor)
        self.actors = [remote.remote() for _ in range(self.count)]
        self.where: dict[Any, dict[str, Any]] = {}  # actor -> its ready() answer, updated after a restart
        self._free: queue.Queue = queue.Queue()
        self._stopped = False
        for actor in self.actors:
            self._rejoin(actor)

    def hardware(self, timeout_s: float | None = None) -> str:
        """The judges' hardware name for the resume keys ("cuda:NVIDIA H200"); several models joined by
        "+" (a result's own device section says which one judged it)."""
        try:
            ready = self.ray.get([a.ready.remote(self.device) for a in self.actors], timeout=timeout_s)
        except self.ray.exceptions.RayError as exc:
            raise UsageError(f"the judge actors cannot start on the cluster: {str(exc).splitlines()[-1]}; every "
                             "node needs kerneljudge's dependencies (torch, ...) in the Python Ray runs") from exc
        return "+".join(sorted({r["hardware"] for r in ready}))

    def _rejoin(self, actor) -> None:
        """Put `actor` back in the pool once it answers: at once when alive, after Ray restarts it when it
        died (a call made while it restarts can fail: it is asked again), never once the pool is stopped."""
        def wait() -> None:
            pause_s = 0.1
            while not self._stopped:
                try:
                    self.where[actor] = self.ray.get(actor.ready.remote(self.device))
                except self.ray.exceptions.RayError:
                    time.sleep(pause_s)
                    pause_s = min(pause_s * 2, REJOIN_PAUSE_S)
                    continue
                self._free.put(actor)
                return
        threading.Thread(target=wait, name="kj-ray-rejoin", daemon=True).start()

    def _take(self):
        try:
            return self._free.get(timeout=self.actor_wait_s)
        except queue.Empty:
            raise UsageError(f"no judge actor was free for {self.actor_wait_s:.0f} s: the cluster has no live "
                             "judge (its GPU nodes are gone or taken; see `ray status`)") from None

    def judge(self, task: JudgeTask, on_progress: ProgressObserver = ignore) -> Result:
        """The task's Result, from the first actor that lives through it; `on_progress` is told which
        node and GPU each attempt runs on."""
        errors = self.ray.exceptions
        attempts = 0
        while True:
            actor = self._take()
            if actor is None:  # stopped
                return lost_result(task, attempts, "the run was stopped")
            try:  # a judge that died while idle (its node lost, killed) is not this candidate's doing
                where = self.where[actor] = self.ray.get(actor.ready.remote(self.device), timeout=READY_S)
            except errors.RayError:
                self._rejoin(actor)
                continue
            gpus = ",".join(where.get("gpu_ids", [])) or "-"
            on_progress(ProgressEvent("judge", f"judging on {where.get('hostname', '?')} (node "
                                      f"{where.get('node_ip', '?')}, GPU {gpus})"
                                      + (f", attempt {attempts + 1}" if attempts else "")))
            try:
                data = self.ray.get(actor.judge.remote(task.to_json()))
            except (errors.RayActorError, errors.ActorUnavailableError) as exc:
                self._rejoin(actor)
                attempts += 1
                if self._stopped or attempts >= self.max_attempts:
                    return lost_result(task, attempts, str(exc).splitlines()[0])
                continue
            except errors.RayTaskError as exc:
                self._free.put(actor)
                if isinstance(exc.cause, KernelJudgeError):
                    raise exc.cause from None  # the options cannot be honoured on the cluster
                raise
            self._free.put(actor)
            return Result.from_json(data)

    def stop(self) -> None:
        """End every evaluation in flight (their actors are killed) and free the lanes waiting for one;
        the pool is done (the actors are not restarted)."""
        self._stopped = True
        for actor in self.actors:
            self.ray.kill(actor, no_restart=True)
        for _ in range(self.count * 2):
            self._free.put(None)


def lost_result(task: JudgeTask, attempts: int, cause: str) -> Result:
    """The error result of a candidate whose judge died `attempts` times (or that a stop cut short)."""
    options = Options.from_json(task.options)
    try:
        problem = load_problem(task.problem_ref, problems_root=None if task.builtin else options.problems_root)
        problem_json = problem.to_json()
    except KernelJudgeError:
        problem_json = {"name": task.problem_ref}
    finding = Finding.of("judge-lost", f"the judge process died {attempts} time(s) while judging this candidate "
                         f"(last: {cause})", stage="judge", attempts=attempts)
    return Result(verdict="error", findings=(finding,), trials=(), problem=problem_json,
                  candidate={"path": task.solution_path}, device={}, versions={}, protocol=options.protocol)


class RayLane:
    """A judging lane of the scheduler: one evaluation at a time, on whichever judge actor is free."""

    def __init__(self, name: str, pool: JudgePool):
        self.name = name
        self.pool = pool

    def judge(self, job: Job, on_progress: ProgressObserver) -> Result:
        options = job.options.replace(device=self.pool.device, store_path=None)
        return self.pool.judge(JudgeTask.of(job.key, job.problem, job.solution, options, job.verb), on_progress)

    def stop(self) -> None:
        """The pool stops every lane at once (RayBackend.stop)."""

    def close(self) -> None:
        """The actors belong to the pool (RayBackend.close)."""


class RayBackend:
    """batch.backend.Backend on a Ray cluster: `address` "auto" (the running cluster) or an address;
    one lane per judge actor; `build_slots` CPU build tasks at once (default: the cluster's CPUs not
    taken by judges)."""

    def __init__(self, options: Options, *, address: str | None = "auto", judges: int | None = None,
                 build_slots: int | None = None, max_attempts: int = MAX_ATTEMPTS):
        self.ray = connect(address)
        self.options = options
        self.pool = JudgePool(self.ray, judges=judges, device=options.device, max_attempts=max_attempts)
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        self.build_slots = build_slots or max(1, cpus - self.pool.count)
        self._lanes = [RayLane(f"ray:{i}", self.pool) for i in range(self.pool.count)]
        self._build = self.ray.remote(num_cpus=1)(build_task)
        self._builds: set = set()
        self._arch: str | None = options.arch
        self._arch_lock = threading.Lock()

    def lanes(self) -> Sequence[RayLane]:
        return self._lanes

    def device_seconds(self) -> dict[str, dict[str, float]]:
        """{}: one judge actor per GPU, no device shared between lanes."""
        return {}

    @property
    def device_type(self) -> str:
        """What the judges run candidates on: "cuda" on a cluster with GPUs unless the options say cpu."""
        return "cuda" if self.pool.gpus and self.pool.device != "cpu" else "cpu"

    def hardware(self) -> str:
        """The judges' hardware name, for the resume keys (batch/keys.py)."""
        return self.pool.hardware()

    def build(self, job: Job) -> BuildOutcome:
        """Compile on any node's CPU. A build task lost with its node (after Ray's own retries) is not a
        candidate's fault: the outcome is then empty and the judge builds the candidate itself."""
        options = job.options.replace(arch=self._target_arch(job.options))
        ref = self._build.remote(str(job.solution), job.solution.read_text(), options.to_json(keep_seed=True))
        self._builds.add(ref)
        try:
            data = self.ray.get(ref)
        except self.ray.exceptions.RayError:
            return BuildOutcome(job.solution, None, ())
        finally:
            self._builds.discard(ref)
        build = data["build"] and Build(**{**data["build"], "extensions": tuple(data["build"]["extensions"])})
        return BuildOutcome(job.solution, build, tuple(Finding.from_json(f) for f in data["findings"]))

    def _target_arch(self, options: Options) -> str | None:
        """The judges' GPU architecture for CUDA builds on CPU nodes (asked once of a judge), else None."""
        with self._arch_lock:
            if self._arch is None and self.pool.gpus and self.pool.device != "cpu":
                actor = self.pool.actors[0]
                self._arch = self.ray.get(actor.capability.remote(options.to_json(keep_seed=True)))
            return self._arch

    def stop(self) -> None:
        for ref in list(self._builds):
            self.ray.cancel(ref, force=True)
        self.pool.stop()

    def close(self) -> None:
        self.pool.stop()
