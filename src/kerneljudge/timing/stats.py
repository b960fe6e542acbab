"""Statistics of timing samples and the rule that says when to stop taking them.

Stopping: a fixed number of runs is either wasteful (slow kernels) or noisy
(fast kernels).  :class:`StopRule` stops when the relative standard error of
the mean is small enough, but never before ``min_runs`` samples and
``min_time_ms`` of measured time, and always at ``max_runs`` / ``budget_ms``
(NVBench's "noise criterion + min time + timeout" scheme).

Statistics are computed in pure Python (no numpy, no torch), so the judge
process can summarise samples it never took itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

STOP_CONVERGED = "converged"
STOP_MAX_RUNS = "max-runs"
STOP_BUDGET = "budget"


def _json_number(x: float) -> float | None:
    """JSON has no NaN/inf; map them to null so ``json.dumps`` output is strict."""
    return x if math.isfinite(x) else None



def _quantile_sorted(xs: Sequence[float], q: float) -> float:
    """Quantile of sorted ``xs`` by linear interpolation between order statistics.

    This is the "type 7" definition (numpy's default, R's default): position
    ``h = (n - 1) * q``, interpolate between ``xs[floor(h)]`` and the next one.
    """
    n = len(xs)
    if n == 0:
        return math.nan
    h = (n - 1) * q
    lo = math.floor(h)
    hi = min(lo + 1, n - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


@dataclass(frozen=True)
class Stats:
    """Summary of timing samples, all in milliseconds.

    ``std_ms`` is the sample standard deviation (divisor n-1) because the
    samples estimate the spread of an unknown distribution; ``sem_ms`` is the
    standard error of the mean, ``std_ms / sqrt(n)``.  With fewer than two
    samples the spread is unknown and reported as NaN (not 0, which would
    wrongly read as "perfectly converged").
    """

    n: int
    mean_ms: float
    median_ms: float
    std_ms: float
    sem_ms: float
    min_ms: float
    max_ms: float
    p10_ms: float
    p90_ms: float

    @property
    def rel_sem(self) -> float:
        """SEM relative to the mean; ``inf`` when unknown, so it never converges."""
        if math.isnan(self.sem_ms) or math.isnan(self.mean_ms):
            return math.inf
        if self.mean_ms == 0.0:
            return 0.0 if self.sem_ms == 0.0 else math.inf
        return self.sem_ms / abs(self.mean_ms)

    @classmethod
    def from_samples(cls, samples_ms: Sequence[float]) -> "Stats":
        """Compute statistics in pure Python (no numpy needed)."""
        xs = sorted(float(x) for x in samples_ms)
        n = len(xs)
        if n == 0:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan, nan, nan)
        mean = math.fsum(xs) / n
        if n >= 2:
            var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
            std = math.sqrt(var)
            sem = std / math.sqrt(n)
        else:
            std = sem = math.nan
        return cls(
            n=n,
            mean_ms=mean,
            median_ms=_quantile_sorted(xs, 0.5),
            std_ms=std,
            sem_ms=sem,
            min_ms=xs[0],
            max_ms=xs[-1],
            p10_ms=_quantile_sorted(xs, 0.1),
            p90_ms=_quantile_sorted(xs, 0.9),
        )

    def to_json(self) -> dict[str, Any]:
        """Plain dict; non-finite values become ``None`` (strict JSON)."""
        return {
            "n": self.n,
            "mean_ms": _json_number(self.mean_ms),
            "median_ms": _json_number(self.median_ms),
            "std_ms": _json_number(self.std_ms),
            "sem_ms": _json_number(self.sem_ms),
            "min_ms": _json_number(self.min_ms),
            "max_ms": _json_number(self.max_ms),
            "p10_ms": _json_number(self.p10_ms),
            "p90_ms": _json_number(self.p90_ms),
            "rel_sem": _json_number(self.rel_sem),
        }



def _check_number(name: str, value: object, *, integer: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        want = "an int" if integer else "a number"
        raise ValueError(f"{name} must be {want}, got {value!r}; pass {want}")
    if not integer and not math.isfinite(float(value)):  # type: ignore[arg-type]
        raise ValueError(f"{name} must be finite, got {value!r}; pass a finite number")


@dataclass(frozen=True)
class StopRule:
    """When :func:`measure` may and must stop.

    Stopping as "converged" requires all of: at least ``min_runs`` samples,
    at least ``min_time_ms`` of *measured* time (sum of samples; this keeps
    very fast kernels running long enough for clocks/caches/boost to settle
    and for rare slow events to show up), and a relative SEM at most
    ``target_rel_sem``.  Regardless of convergence the loop stops at
    ``max_runs`` samples or when ``budget_ms`` of wall time (including host
    overhead and flushes) has been spent, so a noisy kernel cannot stall the
    judge.  ``target_rel_sem=0`` disables convergence (fixed-budget runs).
    """

    min_runs: int = 10
    max_runs: int = 10_000
    min_time_ms: float = 100.0
    budget_ms: float = 2000.0
    target_rel_sem: float = 0.005

    def __post_init__(self) -> None:
        _check_number("min_runs", self.min_runs, integer=True)
        _check_number("max_runs", self.max_runs, integer=True)
        _check_number("min_time_ms", self.min_time_ms)
        _check_number("budget_ms", self.budget_ms)
        _check_number("target_rel_sem", self.target_rel_sem)
        if self.min_runs < 1:
            raise ValueError(f"min_runs must be >= 1, got {self.min_runs}; pass min_runs=1 or more")
        if self.max_runs < self.min_runs:
            raise ValueError(
                f"max_runs ({self.max_runs}) is below min_runs ({self.min_runs}); "
                "raise max_runs or lower min_runs"
            )
        if self.min_time_ms < 0:
            raise ValueError(f"min_time_ms must be >= 0, got {self.min_time_ms}; pass 0 to disable it")
        if self.budget_ms <= 0:
            raise ValueError(f"budget_ms must be > 0, got {self.budget_ms}; pass a positive wall-time cap")
        if self.target_rel_sem < 0:
            raise ValueError(
                f"target_rel_sem must be >= 0, got {self.target_rel_sem}; "
                "pass e.g. 0.005 for 0.5%, or 0 to never stop early"
            )

    def should_stop(self, samples_ms: Sequence[float], elapsed_ms: float) -> str | None:
        """Return the stop reason, or ``None`` to keep measuring.

        Reasons are checked in the order ``"converged"``, ``"max-runs"``,
        ``"budget"`` so that a run which converged exactly at a cap is reported
        as converged (the more informative reason).
        """
        n = len(samples_ms)
        if (
            self.target_rel_sem > 0
            and n >= self.min_runs
            and math.fsum(samples_ms) >= self.min_time_ms
            and Stats.from_samples(samples_ms).rel_sem <= self.target_rel_sem
        ):
            return STOP_CONVERGED
        if n >= self.max_runs:
            return STOP_MAX_RUNS
        if elapsed_ms >= self.budget_ms:
            return STOP_BUDGET
        return None

