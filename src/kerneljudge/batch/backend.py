"""The scheduler's backend interface: where candidates are built and where they are judged.

The batch scheduler (scheduler.py) knows nothing of processes or devices. It talks to one `Backend`,
which offers

* `build(job)` -> `BuildOutcome`: compile a candidate ahead of judging (its load_inline/load extensions
  built by the judge into the content-addressed build cache: builder.py, extensions.py). Called from up to `build_slots`
  scheduler threads at once; the scheduler never builds the same candidate source twice at once (two
  jobs with one sha256 share one build), and calls it only for candidates that compile something
  (`needs_build`); a failed build becomes the job's result without judging.
* `lanes()` -> the `Lane`s that judge, one per device (a GPU, or a CPU lane on a machine without one).
  Each lane judges one candidate at a time and is given the next built candidate as soon as it is free.
  `Lane.judge(job, on_progress)` returns the full `records.Result` (never raises for a bad candidate:
  a crash, hang or poisoned CUDA context is a finding on an error result, and the lane is usable for
  the next job; the local lane gets fresh processes per candidate from its own WorkerPool). Timing is
  the lane's business: exclusive on its device (the device's timing lock, devicelock.py), baselines
  measured once per problem and reused for the lane's later candidates of that problem.
* `stop()`: called from another thread on Ctrl-C; ends every build and judging in flight within
  seconds (their results are discarded, and they are judged again on the next run).

`LocalBackend` (local.py) runs builds in worker processes on this host's CPUs and one lane per local
device. Another backend (a Ray cluster) implements the same three calls; the scheduler, resume keys,
progress and exports are shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence

from kerneljudge.builder import BuildOutcome
from kerneljudge.options import Options, Verb
from kerneljudge.progress import ProgressObserver
from kerneljudge.records import Result


@dataclass(frozen=True)
class Job:
    """One candidate of a batch: what to judge, how, and how it is named in the exports.

    `options` are the candidate's own (a manifest line may change them); the store is off in them (the
    scheduler records with the run id) and the device is the lane's. `key` is the resume key
    (keys.job_key): problem content and sizes, candidate content, options, hardware."""

    id: str  # unique in the run: "level1/p19/s0", a manifest id, or the file name
    problem: str  # a problem file path (resolved by discovery)
    solution: Path
    options: Options
    key: str
    verb: Verb = "evaluate"
    kinds: tuple[str, ...] = ()  # what the candidate builds on (candidate.Candidate.kinds)
    sha256: str = ""  # the candidate's content
    level: int | None = None  # KernelBench's level, problem_id and sample_id, for eval_results.json
    problem_id: int | None = None
    sample_id: int | None = None
    labels: dict = field(default_factory=dict)  # free data from a manifest line, copied to the JSON lines
    problem_json: dict = field(default_factory=dict)  # records.Problem.to_json(): for a result made at the build

    @property
    def needs_build(self) -> bool:
        """Compiles C++/CUDA when imported: worth building on the CPU pool before a lane takes it."""
        return bool({"cpp", "cuda"} & set(self.kinds))


class Lane(Protocol):
    """Judges one candidate at a time on one device."""

    name: str  # "cuda:0", "cpu:1": shown in progress, put on the JSON lines

    def judge(self, job: Job, on_progress: ProgressObserver) -> Result:
        """The full evaluation of `job` on this lane's device (store off)."""

    def stop(self) -> None:
        """From another thread: end the evaluation in flight now."""

    def close(self) -> None:
        """Release the lane's processes."""


class Backend(Protocol):
    build_slots: int  # builds at once

    def build(self, job: Job) -> BuildOutcome:
        """Compile `job`'s candidate into the build cache (from one of `build_slots` threads)."""

    def lanes(self) -> Sequence[Lane]:
        """The judging lanes, one per device."""

    def device_seconds(self) -> dict[str, dict[str, float]]:
        """Each device's gate, which its lanes share: its seconds in each state so far (batch/gate.py: `timing_s`,
        `draining_s`, `shared_s`, `idle_s`), by device; {} where the lanes hold no gate (a Ray actor per GPU)."""

    def stop(self) -> None:
        """From another thread: end every build and evaluation in flight."""

    def close(self) -> None:
        """Release everything (after stop, or when the batch is done)."""


@dataclass(frozen=True)
class Finished:
    """One job's end: its result and where the time went (the scheduler's output, one per job)."""

    job: Job
    result: Result
    lane: str | None  # None: it ended in the build (a compile error is not judged)
    build_ms: float  # on the build pool, 0 when nothing was built ahead
    judge_ms: float  # on the lane
    waited_ms: float  # built and waiting for a free lane
    skipped: bool = False  # done in an earlier run of the same batch (resumed, not judged again)
