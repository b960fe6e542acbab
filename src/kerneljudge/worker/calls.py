"""Calling candidate code: one guarded wrapper, so every call site classifies failures the same way.

In the spirit of pytest's `CallInfo.from_call`: the call's value or its classified failure, never an
exception. A KeyboardInterrupt is the candidate's too: a worker runs in a session of its own (spawn.py,
proc/zygote.py), so no terminal's Ctrl-C reaches it; the judge stops a worker by killing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kerneljudge.proc.failures import Classified, classify


@dataclass(frozen=True)
class Called:
    value: Any = None
    failure: Classified | None = None


def guarded(fn: Callable[[], Any], *, stage: str, code: str, what: str, source_file: str | None = None) -> Called:
    try:
        return Called(fn())
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything, even SystemExit
        return Called(failure=classify(exc, stage=stage, code=code, what=what, source_file=source_file))
