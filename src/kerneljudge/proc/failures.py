"""Turning an exception raised by candidate (or problem) code into a finding with a short, useful message.

Types are checked first (SystemExit, MemoryError, torch's OutOfMemoryError and AcceleratorError);
the CPU allocator and older CUDA builds raise plain RuntimeError, so their well-known messages are
matched as a last resort. Messages keep the actionable part: the exception, and the candidate's own
line where it was raised; compiler output is cut to its error lines.
"""

from __future__ import annotations

import re
import traceback
from dataclasses import dataclass
from types import TracebackType

from kerneljudge.records import Finding

MAX_MESSAGE_CHARS = 1500
_COMPILER_ERROR = re.compile(r"(\b[Ee]rror( [A-Z]+\d+)?:|undefined reference|\bfatal\b)")  # not "error" in a path
_NOISE = re.compile(r"^(FAILED: |ninja: build stopped|\[\d+/\d+\] )")


@dataclass(frozen=True)
class Classified:
    finding: Finding
    poisoned: bool  # the process must not be used again (a CUDA error poisons the context)


def classify(exc: BaseException, *, stage: str, code: str, what: str, source_file: str | None = None) -> Classified:
    """`what` names the action ("ModelNew.forward", "importing the candidate") for the message."""
    said = _text(exc)
    text = f"{type(exc).__name__}: {said}".strip()
    where = _where(exc.__traceback__, source_file)
    if isinstance(exc, SystemExit):
        return Classified(Finding.of("candidate-exit", f"{what} called exit({exc.code!r}){where}", stage=stage), False)
    if is_out_of_memory(exc, said):
        return Classified(Finding.of("out-of-memory", f"{what} ran out of memory{where}: {_clip(said, 400)}",
                                     stage=stage), False)
    if _is_cuda_error(exc, said):
        return Classified(Finding.of("cuda-error", f"{what} hit a CUDA error{where}: {_first_line(said)}",
                                     stage=stage), True)
    if "Error building extension" in said or type(exc).__name__ == "CalledProcessError":
        return Classified(Finding.of("compile-error", f"{what} failed to compile:\n{compiler_errors(said)}",
                                     stage=stage), False)
    return Classified(Finding.of(code, f"{what} raised {_clip(text, 600)}{where}", stage=stage), False)


def compiler_errors(output: str, max_lines: int = 20) -> str:
    """The compiler's error lines with one line of context after each, ninja's noise removed."""
    lines = [ln for ln in output.splitlines() if ln.strip() and not _NOISE.match(ln)]
    keep: list[str] = []
    for i, line in enumerate(lines):
        if _COMPILER_ERROR.search(line) and "Error building extension" not in line:
            for ctx in lines[i:i + 2]:
                if ctx not in keep:
                    keep.append(ctx)
    chosen = keep or lines[-max_lines:]
    return _clip("\n".join(chosen[:max_lines]), MAX_MESSAGE_CHARS)


def _text(exc: BaseException) -> str:
    """The exception's text; the candidate's exception class may fail to give one (its `__str__` raised, and the
    worker's own code reported that failure as the judge's)."""
    try:
        return str(exc)
    except Exception as failed:  # noqa: BLE001 - the candidate's __str__, whatever it raises
        return f"(its text could not be read: {type(failed).__name__})"


def is_out_of_memory(exc: BaseException, text: str | None = None) -> bool:
    """An allocation that failed: Python's, torch's on a device, or the CPU allocator's (a plain RuntimeError)."""
    import torch

    text = _text(exc) if text is None else text

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)


def _is_cuda_error(exc: BaseException, text: str) -> bool:
    import torch

    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return True
    return isinstance(exc, RuntimeError) and text.startswith(("CUDA error", "CUDA driver error"))


def _where(tb: TracebackType | None, source_file: str | None) -> str:
    """' at solution.py:12 (`line`)': the innermost frame in the candidate's file, if any."""
    if tb is None or source_file is None:
        return ""
    frames = [f for f in traceback.extract_tb(tb) if f.filename == source_file]
    if not frames:
        return ""
    frame = frames[-1]
    name = source_file.rsplit("/", 1)[-1]
    return f" at {name}:{frame.lineno} (`{(frame.line or '').strip()}`)"


def exception_line(exc: BaseException, limit: int) -> str:
    """'TypeName: the first line of its message', that line cut at `limit` characters: an exception said in a
    report's line."""
    text = str(exc)
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit] if text else ''}"


def _first_line(text: str) -> str:
    return _clip(text.strip().splitlines()[0] if text.strip() else text, 400)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ... [clipped]"
