"""`kerneljudge build`: compile candidates ahead of evaluation, in parallel worker processes.

Each candidate is imported in its own worker, its extensions built by the judge into the build cache keyed on
what they compile (extensions.py), so a later `eval` of a candidate building the same extensions on the
same torch/CUDA/architecture is a cache hit, whatever its Python around them. No GPU is needed where
the toolchain is: give --arch (e.g. 9.0) when no GPU is visible.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from kerneljudge import protocol
from kerneljudge.candidate import load_candidate
from kerneljudge.errors import CandidateError
from kerneljudge.isolation import WorkerFailure, WorkerProcess
from kerneljudge.options import Options, WorkerOptions
from kerneljudge.records import Build, Finding
from kerneljudge.stages.context import reply_finding

#: Builders yield the host's cores to judging: in a batch (or on a Ray node) a lane times beside them, and an
#: honest candidate's host-side time per call grew by 1-4 ms in batches whose builds filled every core (H200 host).
BUILD_NICENESS = 10


@dataclass(frozen=True)
class BuildOutcome:
    path: Path
    build: Build | None
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not any(f.blocking for f in self.findings)

    def to_json(self) -> dict:
        return {"path": str(self.path), "ok": self.ok, "build": self.build.to_json() if self.build else None,
                "findings": [f.to_json() for f in self.findings]}


def build_one(path: Path, options: Options, device: str,
              spawn: Callable[[WorkerOptions], WorkerProcess] = WorkerProcess) -> BuildOutcome:
    """Build one candidate in a fresh worker (`spawn` makes it: a batch keeps hold of its workers)."""
    try:
        candidate = load_candidate(path)
    except CandidateError as exc:
        return BuildOutcome(path, None, (Finding.of("candidate-invalid", str(exc), stage="load"),))
    try:
        with spawn(replace(options.worker_options(), niceness=BUILD_NICENESS)) as worker:
            hello = worker.call(protocol.Ping(device))
            if hello.get("usage_error"):
                return BuildOutcome(candidate.path, None, (Finding.of("compile-error", hello["usage_error"],
                                                                      stage="build"),))
            reply = worker.call(protocol.CompileOnly(device,
                                                     {"path": str(candidate.path), "sha256": candidate.sha256,
                                                      "kinds": list(candidate.kinds)}, options.arch))
    except WorkerFailure as failure:
        return BuildOutcome(candidate.path, None, (failure.finding,))
    try:
        info = Build(**protocol.build_info(reply["build"])) if reply.get("build") else None
        found = tuple(reply_finding(f, "build") for f in reply["findings"])
    except (protocol.Untrusted, KeyError, TypeError, ValueError) as exc:
        return BuildOutcome(candidate.path, None, (Finding.of("tampering", f"the worker's reply was malformed: "
                                                              f"{type(exc).__name__}: {exc}", stage="build"),))
    return BuildOutcome(candidate.path, info, found)


def build_all(paths: list[Path], options: Options, device: str, jobs: int) -> list[BuildOutcome]:
    """Build every path, `jobs` at a time; results in the order given."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(lambda p: build_one(p, options, device), paths))
