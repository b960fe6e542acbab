"""How a batch shows itself: a live panel on a terminal, JSON lines with --json, nothing when piped.

The panel (rich, on stderr) says done/total, pass/fail/error so far, what each lane is doing, the
build pool and the candidates built and waiting, the rate and the ETA. It is redrawn when the
scheduler reports a change, at most `MAX_HZ` times a second (no refresh thread of its own competing
with a measurement); a finished candidate that did not pass is printed above it. Worker messages in it
are text, never markup.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from kerneljudge.batch.scheduler import Status

MAX_HZ = 4.0


def rate_and_eta(status: Status, now_s: float) -> tuple[float | None, float | None]:
    """Candidates per minute so far, and seconds to go at that rate."""
    elapsed = now_s - status.started_s
    if status.done == 0 or elapsed <= 0:
        return None, None
    per_s = status.done / elapsed
    return per_s * 60, (status.total - status.done) / per_s


class LivePanel:
    """The terminal display; use as a context manager, pass as the scheduler's `on_change`."""

    def __init__(self, title: str, clock: Callable[[], float] = time.monotonic):
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, transient=True, auto_refresh=False)
        self.title = title
        self.clock = clock
        self.lock = threading.Lock()
        self.drawn_s = float("-inf")

    def __enter__(self) -> "LivePanel":
        self.live.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        self.live.__exit__(*exc_info)

    def __call__(self, status: Status) -> None:
        now = self.clock()
        with self.lock:
            if now - self.drawn_s < 1 / MAX_HZ and status.done < status.total:
                return
            self.drawn_s = now
            self.live.update(self.render(status, now), refresh=True)

    def finished(self, line: dict[str, Any]) -> None:
        """A line above the panel for a candidate that did not pass."""
        from rich.text import Text

        if line["verdict"] != "pass":
            with self.lock:
                self.console.print(Text(f"{line['verdict']:5}  {line['id']}  {' '.join(line['codes'][:4])}"))

    def render(self, status: Status, now_s: float):
        from rich.table import Table
        from rich.text import Text

        per_min, eta = rate_and_eta(status, now_s)
        v = status.verdicts
        head = Text(f"{self.title}  {status.done}/{status.total}  ", style="bold")
        head.append(f"pass {v['pass']}", style="green")
        head.append(f"  fail {v['fail']}", style="yellow")
        head.append(f"  error {v['error']}", style="red")
        head.append(f"  {per_min:.1f}/min  ETA {eta:.0f} s" if per_min else "  rate --", style="dim")
        table = Table.grid(padding=(0, 2))
        table.add_row(head)
        for lane, doing in sorted(status.lanes.items()):
            table.add_row(Text(f"{lane:8} {doing}"[:200]))
        building = ", ".join(sorted(status.building)) or "-"
        table.add_row(Text(f"{'build':8} {len(status.building)} building ({building})"[:200]
                           + f", {status.builds_queued} queued, {status.ready} built and waiting for a lane",
                           style="dim"))
        return table
