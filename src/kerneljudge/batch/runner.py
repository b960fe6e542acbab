"""One batch run from the top: skip what the journal has, schedule the rest, journal and record each
result as it ends (CLI `kerneljudge run`, `api.evaluate_many`, `KernelEnv.step_many`)."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from kerneljudge.batch import export
from kerneljudge.batch.backend import Backend, Finished, Job
from kerneljudge.batch.journal import Journal
from kerneljudge.batch.scheduler import Scheduler, Status
from kerneljudge.errors import StoreError
from kerneljudge.options import Options, Verb


class BatchRun:
    """`jobs` on `backend`: iterate for (Finished, line) as each job ends. With a `journal`, jobs it has
    are `skipped` (their lines are the journal's) and each new line is appended; with a `store_path`,
    each result is recorded under the run id."""

    def __init__(self, jobs: Sequence[Job], backend: Backend, *, journal: Journal | None = None,
                 store_path: Path | None = None, run_id: str | None = None,
                 on_change: Callable[[Status], None] = lambda status: None,
                 clock: Callable[[], float] = time.monotonic):
        self.jobs = list(jobs)
        self.journal = journal
        done = dict(journal.done) if journal is not None else {}
        own = {line["id"]: line for line in journal.lines} if journal is not None else {}  # each id's latest
        self.skipped = [self._named(done[job.key], own.get(job.id), job) for job in self.jobs if job.key in done]
        self.todo = [job for job in self.jobs if job.key not in done]
        self.store_path = store_path
        self.run_id = run_id or (journal.run_id if journal is not None else None)
        self.scheduler = Scheduler(backend, on_change=on_change, clock=clock)
        self.fresh: list[dict] = []
        self.clock = clock
        self.started_s = clock()

    def _named(self, line: dict, own: dict | None, job: Job) -> dict:
        """The journal's line for `job`'s key, as this run names the job: its own latest line where that has the
        key and the names; else (a line judged for a byte-identical copy, a file renamed, a sample numbered anew
        because files were added) the key's line again under this job's names, appended (a copy's result had
        been dropped, and two samples filed under one number)."""
        if own is not None and own["key"] == job.key and own == {**own, **export.naming(job)}:
            return own
        named = {**line, **export.naming(job)}
        self.journal.append(named)
        return named

    def __iter__(self) -> Iterator[tuple[Finished, dict]]:
        for finished in self.scheduler.run(self.todo):
            line = export.line_of(finished)
            self._record(finished)  # first: a job journaled is recorded (a kill in between judges it again)
            if self.journal is not None:
                self.journal.append(line)
            self.fresh.append(line)
            yield finished, line

    def _record(self, finished: Finished) -> None:
        if self.store_path is None:
            return
        from kerneljudge.store import Store

        try:
            source = finished.job.solution.read_text(errors="replace")
        except OSError:
            source = ""
        try:
            Store(self.store_path).record(finished.result, verb=finished.job.verb, source=source,
                                          options=finished.job.options.to_json(),
                                          candidate_path=str(finished.job.solution), run_id=self.run_id,
                                          job_key=finished.job.key)
        except StoreError as exc:
            print(f"kerneljudge: warning: {finished.job.id} was not recorded: {exc}", file=sys.stderr)

    def lines(self) -> list[dict]:
        """Every job's latest line: the skipped ones' from the journal, then this run's."""
        ids = {job.id for job in self.jobs}
        if self.journal is not None:
            return self.journal.latest(ids)
        return self.fresh

    def summary(self, *, interrupted: bool = False) -> dict:
        return export.summary(self.lines(), self.fresh, total=len(self.jobs), skipped=len(self.skipped),
                              wall_s=self.clock() - self.started_s, lanes=len(self.scheduler.backend.lanes()),
                              device_seconds=self.scheduler.backend.device_seconds(), interrupted=interrupted)


@contextmanager
def local_batch(entries: Iterable[dict], options: Options, *, verb: Verb = "evaluate", lanes: int | None = None,
                lanes_per_gpu: int = 1,
                build_jobs: int | None = None, journal_dir: Path | None = None, force: bool = False,
                on_change: Callable[[Status], None] = lambda status: None) -> Iterator[BatchRun]:
    """A BatchRun of manifest entries on this machine's devices (the Python API's batches); with a
    `journal_dir`, resumable like `kerneljudge run`."""
    from kerneljudge.batch.discover import Setting, entries_to_jobs
    from kerneljudge.batch.keys import hardware
    from kerneljudge.batch.local import LocalBackend, local_devices
    from kerneljudge.pipeline import resolve_device

    options = options.validate()
    device = resolve_device(options.device)
    device_type = device.split(":")[0]
    jobs = entries_to_jobs(entries, Setting(options, device_type, hardware(device_type), verb=verb,
                                            kernelbench=options.problems_root))
    backend = LocalBackend(local_devices(device, lanes, lanes_per_gpu), options, build_slots=build_jobs or os.cpu_count() or 1)
    journal = Journal(journal_dir, force=force) if journal_dir is not None else None
    try:
        yield BatchRun(jobs, backend, journal=journal, store_path=options.store_path, on_change=on_change)
    finally:
        backend.stop()
        backend.close()
