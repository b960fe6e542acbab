"""The judge's account of its two processes' memory over time: the judge's peak as the device saw it.

Each process measures every request it answers (proc/memory.request_start/end, all but a timing's batches):
its peak before the request (since the last measured one ended: the batches ran then), its peak during it,
and what it holds after. The judge has at most one request in flight per process, and mostly one in all
(the two processes' starts overlap, and the referee's setup the worker's build), so while one process works
the other mostly holds what its last request left. The judge's peak is then the highest of: a process's peak in a span plus
the other's memory in that span (what it held when the span began, or its peak in any span of its own
that overlaps: a request it answered meanwhile, or its timing's batches). Adding each process's own highest peak, as if both peaks fell at once, is an upper bound
that counts up to twice the need (a referee's comparison never runs during the worker's call); both are
reported (stages/memory.py).

The worker's figures are its claims, like every figure it reports: numbers only, and they never reach a
verdict.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

MAX_BYTES = 1 << 60  # no device holds an exabyte: a larger claim is malformed


@dataclass(frozen=True)
class Span:
    """A stretch of one process's life, in the judge's count of sends and replies, and its memory in it."""

    role: str
    start: int
    end: int
    peak_bytes: int
    held_bytes: int  # at the end


@dataclass
class MemoryTally:
    """The spans of the evaluation's referee and worker on `device_type` ("cuda" or "cpu")."""

    device_type: str
    count: int = 0
    spans: list[Span] = field(default_factory=list)
    reset: bool = True  # False once a process said its marks could not be reset: its peaks are lifetime peaks
    _last_end: dict[str, int] = field(default_factory=dict)

    def sent(self) -> int:
        """A request goes out: its place in the count."""
        self.count += 1
        return self.count

    def replied(self, role: str, sent_at: int, figures: Any) -> None:
        """A reply to the request sent at `sent_at` came back with `figures` (proc/memory.request_end), or none."""
        self.count += 1
        numbers = _figures(figures, self.device_type)
        if numbers is None:
            return
        between, peak, held = numbers
        self.reset = self.reset and figures.get("reset") is True
        before = self._last_end.get(role, 0)
        if sent_at - before > 1:  # other requests (the other process's, or this one's batches) ran between
            previous = next((s.held_bytes for s in reversed(self.spans) if s.role == role), 0)
            self.spans.append(Span(role, before, sent_at, between, previous))
        self.spans.append(Span(role, sent_at, self.count, peak, held))
        self._last_end[role] = self.count

    def roles(self) -> set[str]:
        return {s.role for s in self.spans}

    def peak_bytes(self, baselines: dict[str, int]) -> int:
        """The judge's peak: the most any span of one process took with the other's memory beside it, each
        above its `baselines` (on a CPU the resident set when the problem's work began; 0 on a GPU)."""
        def above(span: Span, value: int) -> int:
            return max(0, value - baselines.get(span.role, 0))

        by_role = {role: [s for s in self.spans if s.role == role] for role in self.roles()}  # in order of end
        ends = {role: [s.end for s in spans] for role, spans in by_role.items()}
        best = 0
        for span in self.spans:
            beside = 0
            for role, spans in by_role.items():
                if role == span.role:
                    continue
                first_after = bisect.bisect_right(ends[role], span.start)  # spans ending after this one began
                if first_after:  # what it held when this span began
                    beside = max(beside, above(spans[first_after - 1], spans[first_after - 1].held_bytes))
                for other in spans[first_after:]:  # its spans overlapping this one (their starts are in order too)
                    if other.start >= span.end:
                        break
                    beside = max(beside, above(other, other.peak_bytes))
            best = max(best, above(span, span.peak_bytes) + beside)
        return best


def _figures(figures: Any, device_type: str) -> tuple[int, int, int] | None:
    """(between, peak, held) from a reply's memory figures when they are well formed and of the device (byte
    counts below MAX_BYTES: a claim of 10**400 bytes is not a figure)."""
    if not isinstance(figures, dict) or figures.get("device") != device_type:
        return None
    values = [figures.get(k) for k in ("between", "peak", "held")]
    if not all(type(v) is int and 0 <= v < MAX_BYTES for v in values):
        return None
    return values[0], values[1], values[2]
