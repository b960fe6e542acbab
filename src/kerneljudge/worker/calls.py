"""Calling candidate code: one guarded wrapper, so every call site classifies failures the same way.

In the spirit of pytest's `CallInfo.from_call`: the call's value or its classified failure, never an
exception, except those listed in `reraise` (KeyboardInterrupt always).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from kerneljudge.proc.failures import Classified, classify


@dataclass(frozen=True)
class Called:
    value: Any = None
    failure: Classified | None = None


def guarded(fn: Callable[[], Any], *, stage: str, code: str, what: str, source_file: str | None = None,
            reraise: tuple[type[BaseException], ...] = ()) -> Called:
    try:
        return Called(fn())
    except (KeyboardInterrupt, *reraise):
        raise
    except BaseException as exc:  # noqa: BLE001 - candidate code may raise anything, even SystemExit
        return Called(failure=classify(exc, stage=stage, code=code, what=what, source_file=source_file))
