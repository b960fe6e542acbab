"""What an evaluation is doing while it runs: progress events, and their display on a terminal.

An evaluation takes from seconds to minutes (a worker importing torch, a cold compile, timing with
baselines). `pipeline.evaluate` tells an observer (`on_progress`) what each stage is doing as typed
events; the pipeline knows nothing of how, or whether, they are shown. The command line shows them on
stderr when stderr is a terminal and --json is off (`TerminalProgress`), and prints only the events that
explain a wait (`notice`) otherwise (`NoticePrinter`), so piped output and --json stay as they were.

The worker's own events (a compile, timing n/N) come over its channel as plain data, possibly forged by
candidate code: `from_worker` keeps only a bounded printable message and integer counts, and the
display prints it as text, never as markup.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, TextIO

MESSAGE_CHARS = 160  # a worker's message is cut to this length
#: The stage of an evaluation's last event: its processes end (a batch lane's gate shares the device then).
CLOSING = "closing"


@dataclass(frozen=True)
class ProgressEvent:
    """One step of an evaluation: `stage` (build, check, timing, ...), what it does now, and where it
    is in a count when it has one (`done` of `total`). `notice`: it explains a wait, so it is worth a
    line even where progress is not shown."""

    stage: str
    message: str
    done: int | None = None
    total: int | None = None
    notice: bool = False

    @classmethod
    def from_worker(cls, stage: str, data: dict[str, Any]) -> "ProgressEvent":
        """An event from a worker's progress message (untrusted data: bounded, counts kept only as ints)."""
        def count(value: Any) -> int | None:
            return value if isinstance(value, int) and not isinstance(value, bool) else None

        message = "".join(c for c in str(data.get("message", ""))[:MESSAGE_CHARS] if c.isprintable())
        return cls(stage, message, count(data.get("done")), count(data.get("total")))

    def text(self) -> str:
        where = f" ({self.done}/{self.total})" if self.done is not None and self.total else ""
        return f"{self.stage}{where}: {self.message}"


ProgressObserver = Callable[[ProgressEvent], None]


def ignore(event: ProgressEvent) -> None:
    """The default observer: nothing is shown."""


class NoticePrinter:
    """Where progress is not shown (stderr piped, --json): one stderr line for each event that explains
    a wait, nothing else."""

    def __init__(self, stream: TextIO | None = None):
        self.stream = stream or sys.stderr

    def __call__(self, event: ProgressEvent) -> None:
        if event.notice:
            print(f"kerneljudge: {event.message}", file=self.stream, flush=True)


class TerminalProgress:
    """A one-line live status on stderr (rich), replaced by each event and gone when the evaluation
    ends; notices stay printed above it. Redrawn only when an event comes (no refresh thread competing
    with a measurement on the CPU); the worker sends timing counts at most four times a second."""

    def __init__(self, label: str = "", clock: Callable[[], float] = time.monotonic):
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, transient=True, auto_refresh=False)
        self.label = label
        self.clock = clock
        self.started = clock()

    def __enter__(self) -> "TerminalProgress":
        self.live.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.live.__exit__(*exc_info)

    def start(self, label: str) -> None:
        """A new evaluation (of several on one command line): its label and its own elapsed time."""
        self.label, self.started = label, self.clock()

    def __call__(self, event: ProgressEvent) -> None:
        from rich.text import Text

        if event.notice:
            self.console.print(Text(f"kerneljudge: {event.message}"))
        elapsed = self.clock() - self.started
        line = Text()
        line.append(f"{self.label}  " if self.label else "", style="bold")
        line.append(f"{elapsed:5.1f} s  ", style="dim")
        line.append(event.text())  # a Text, not markup: a worker's message cannot style the terminal
        self.live.update(line, refresh=True)
