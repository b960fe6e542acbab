"""Every module the judge process runs after a worker has started, imported before the first one starts.

A module imported later would be read from disk after candidate code ran, and the candidate's process
may have written beside it (a bytecode file stamped with the source's time and size is loaded without a
question). So `isolation.WorkerProcess.start` calls `load()` first; tests/test_sandbox.py checks that a
whole evaluation, recorded and reported, imports no kerneljudge module in the judge after that point.
(The worker's mount view makes the package read-only where the system allows it; sandbox.Watch removes
planted bytecode where it does not.)
"""

from __future__ import annotations

import importlib
import sys

JUDGE_MODULES = (
    "kerneljudge.api", "kerneljudge.builder", "kerneljudge.cache", "kerneljudge.candidate", "kerneljudge.channel",
    "kerneljudge.daemon", "kerneljudge.devicelock", "kerneljudge.errors", "kerneljudge.findings",
    "kerneljudge.isolation", "kerneljudge.lint", "kerneljudge.options", "kerneljudge.pipeline",
    "kerneljudge.problem", "kerneljudge.progress", "kerneljudge.protocol", "kerneljudge.records",
    "kerneljudge.report", "kerneljudge.rl", "kerneljudge.sandbox", "kerneljudge.sandbox.launch", "kerneljudge.spawn",
    "kerneljudge.proc.lifeline",
    "kerneljudge.sandbox.linux", "kerneljudge.seeds", "kerneljudge.sourcefile", "kerneljudge.stages.check",
    "kerneljudge.stages.context", "kerneljudge.stages.measure", "kerneljudge.stages.probe", "kerneljudge.store",
    "kerneljudge.suite", "kerneljudge.timing",
)

#: The kerneljudge modules the judge had imported when its first worker started (None: none started yet).
loaded_before_first_worker: frozenset[str] | None = None


def load() -> None:
    """Import JUDGE_MODULES (once; cheap afterwards) and remember what was loaded at that point."""
    global loaded_before_first_worker
    if loaded_before_first_worker is None:
        for name in JUDGE_MODULES:
            importlib.import_module(name)
        loaded_before_first_worker = judge_modules()


def judge_modules() -> frozenset[str]:
    return frozenset(name for name in sys.modules if name == "kerneljudge" or name.startswith("kerneljudge."))
