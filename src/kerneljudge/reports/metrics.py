"""The metrics of a run, as pure functions of its samples: no store, no files, no clock.

A *sample* is one recorded evaluation of one candidate for one problem; a run may hold several samples per
problem (several generations of a model). The field's numbers, defined here once:

* **fast_p** (KernelBench): the fraction of ALL problems of the run whose candidate is correct and more
  than p times faster than the baseline; fast_0 is the correctness rate. A problem with several samples
  counts the fraction of its samples that qualify (the expected fast_p of one sample drawn per problem),
  which is KernelBench's figure exactly when each problem has one sample. A correct sample that was not
  timed against the baseline counts for fast_0 only. Problems without any correct sample count as 0: the
  denominator is every problem of the run, never only the ones that compiled.
* **geometric-mean speedup**: exp of the mean of log(speedup) over the correct samples with a speedup,
  computed in log space (`math.fsum` of logs), so 1e-3 and 1e3 neither underflow nor overflow.
* **pass@k**: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k) per problem with n
  samples of which c are correct, averaged over the problems with at least k samples.
* **confidence intervals**: percentile bootstrap over problems (problems are the unit a benchmark
  samples; a problem's samples move together), from a seeded generator so a report is reproducible.

Every statistic here is a ratio of per-problem sums (fast_p: the problem's fraction over 1; the geomean:
the sum of log speedups over their count), so one bootstrap routine serves them all.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

if TYPE_CHECKING:  # numpy is imported where it is used, so `kerneljudge` starts without it
    import numpy as np

#: KernelBench's thresholds for fast_p.
FAST_P_THRESHOLDS: tuple[float, ...] = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
#: pass@k is reported for these k where problems have that many samples (and for the most samples any has).
PASS_AT_K: tuple[int, ...] = (1, 5, 10, 100)


@dataclass(frozen=True)
class Bootstrap:
    """How intervals are drawn: `resamples` draws of the problems with replacement from a generator
    seeded with `seed`, and the central `confidence` share of the resampled statistic."""

    resamples: int = 2000
    seed: int = 0
    confidence: float = 0.95


@dataclass(frozen=True)
class Sample:
    """One recorded evaluation, reduced to what the metrics read. `speedup` is against the report's
    baseline (None: not timed against it); `failure_codes` are the codes of its fail/error findings."""

    record_id: int
    problem: str  # the key problems are matched on across runs: "level2/51"
    name: str  # the full problem name as recorded
    level: str  # "1", "2", ... or "?"
    correct: bool
    verdict: str
    speedup: float | None = None
    median_ms: float | None = None
    mean_ms: float | None = None
    sem_ms: float | None = None
    percent_of_light: float | None = None
    failure_codes: tuple[str, ...] = ()
    candidate_sha256: str = ""
    device: str | None = None
    sample_id: int | None = None


@dataclass(frozen=True)
class Estimate:
    """A point value and its bootstrap interval (None where undefined: no data, or one problem only)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    n: int = 0  # the problems (or items) it rests on


Problems = Sequence[Sequence[Sample]]  # the samples of each problem, one inner sequence per problem


def by_problem(samples: Iterable[Sample]) -> dict[str, list[Sample]]:
    """Samples grouped by problem key, problems in the order first seen."""
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(sample.problem, []).append(sample)
    return groups


def is_fast(sample: Sample, p: float) -> bool:
    """Correct and more than p times faster than the baseline (p = 0: correct)."""
    if not sample.correct:
        return False
    return p == 0 or (sample.speedup is not None and sample.speedup > p)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k for one problem: n samples, c of them correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def resample_indices(n: int, bootstrap: Bootstrap) -> np.ndarray:
    """`bootstrap.resamples` rows of n problem indices drawn with replacement (seeded)."""
    import numpy as np

    rng = np.random.default_rng(bootstrap.seed)
    return rng.integers(0, n, size=(bootstrap.resamples, n)) if n else np.zeros((0, 0), dtype=int)


def ratio_estimate(numerators: Sequence[float], denominators: Sequence[float], draws: np.ndarray,
                   confidence: float, transform: Callable[[float], float] = lambda x: x) -> Estimate:
    """transform(sum(num) / sum(den)) with a percentile interval over the rows of `draws` (problem
    indices). Resamples whose denominator is 0 are left out; no interval from fewer than 2 problems."""
    import numpy as np

    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if den.sum() <= 0:
        return Estimate(None, n=len(num))
    value = transform(float(num.sum() / den.sum()))
    if len(num) < 2 or draws.size == 0:
        return Estimate(value, n=len(num))
    sums, counts = num[draws].sum(axis=1), den[draws].sum(axis=1)
    kept = counts > 0
    stats = sums[kept] / counts[kept]
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return Estimate(value, transform(float(low)), transform(float(high)), n=len(num))


def fast_share(group: Sequence[Sample], p: float) -> float:
    """The share of a problem's samples that are correct and more than p times faster."""
    return sum(is_fast(s, p) for s in group) / len(group)


def fast_p(problems: Problems, p: float, draws: np.ndarray, confidence: float) -> Estimate:
    """fast_p over all problems, with its interval."""
    shares = [fast_share(group, p) for group in problems]
    return ratio_estimate(shares, [1.0] * len(shares), draws, confidence)


def fast_p_curve(problems: Problems, thresholds: Sequence[float], bootstrap: Bootstrap) -> dict[float, Estimate]:
    """fast_p at each threshold, every one from the same resamples."""
    draws = resample_indices(len(problems), bootstrap)
    return {p: fast_p(problems, p, draws, bootstrap.confidence) for p in thresholds}


def correct_speedups(group: Sequence[Sample]) -> list[float]:
    """The speedups of a problem's correct samples that have one."""
    return [s.speedup for s in group if s.correct and s.speedup is not None]


def geomean_speedup(problems: Problems, bootstrap: Bootstrap) -> Estimate:
    """The geometric-mean speedup over the correct samples, with an interval from resampling problems."""
    logs = [math.fsum(math.log(v) for v in correct_speedups(group)) for group in problems]
    counts = [len(correct_speedups(group)) for group in problems]
    estimate = ratio_estimate(logs, counts, resample_indices(len(problems), bootstrap), bootstrap.confidence,
                              transform=math.exp)
    return Estimate(estimate.value, estimate.low, estimate.high, n=sum(counts))


def pass_at_k_values(most_samples: int) -> list[int]:
    """The k to report pass@k at when the problem with the most samples has `most_samples`."""
    return sorted({k for k in PASS_AT_K if k <= most_samples} | {most_samples})


def pass_at_k_estimate(problems: Problems, k: int, bootstrap: Bootstrap) -> Estimate | None:
    """Mean pass@k over the problems with at least k samples; None if no problem has k samples."""
    eligible = [group for group in problems if len(group) >= k]
    if not eligible:
        return None
    values = [pass_at_k(len(g), sum(s.correct for s in g), k) for g in eligible]
    return ratio_estimate(values, [1.0] * len(values), resample_indices(len(values), bootstrap),
                          bootstrap.confidence)


def best_sample(group: Sequence[Sample]) -> Sample:
    """The sample a problem is shown by: its fastest correct sample, else its first."""
    timed = [s for s in group if s.correct and s.speedup is not None]
    if timed:
        return max(timed, key=lambda s: s.speedup)
    return next((s for s in group if s.correct), group[0])


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def failures_by_code(samples: Iterable[Sample]) -> list[dict]:
    """Failed samples grouped by the codes of their fail/error findings, most frequent first. A sample
    with several such codes counts under each; one without any counts under "(none)"."""
    counts: dict[str, dict] = {}
    for sample in samples:
        if sample.correct:
            continue
        for code in sample.failure_codes or ("(none)",):
            entry = counts.setdefault(code, {"code": code, "samples": 0, "problems": set()})
            entry["samples"] += 1
            entry["problems"].add(sample.problem)
    rows = [{**e, "problems": len(e["problems"])} for e in counts.values()]
    return sorted(rows, key=lambda e: (-e["samples"], e["code"]))


def time_interval_ms(sample: Sample) -> tuple[float, float] | None:
    """The 95% interval of a sample's mean time (mean +- 1.96 standard errors), where it was timed."""
    if sample.mean_ms is None or sample.sem_ms is None:
        return None
    return sample.mean_ms - 1.96 * sample.sem_ms, sample.mean_ms + 1.96 * sample.sem_ms


def time_change(before: Sample, after: Sample) -> str:
    """Whether `after` is significantly faster or slower than `before`: "faster", "slower", "n.s." (the
    95% intervals of the mean times overlap), or "n/a" (not both timed, or on different devices)."""
    a, b = time_interval_ms(before), time_interval_ms(after)
    if a is None or b is None or before.device != after.device:
        return "n/a"
    if b[1] < a[0]:
        return "faster"
    if b[0] > a[1]:
        return "slower"
    return "n.s."


def paired_difference(before: Sequence[float], after: Sequence[float], bootstrap: Bootstrap,
                      transform: Callable[[float], float] = lambda x: x) -> Estimate:
    """transform(mean(after - before)) over paired problems, with an interval from resampling the pairs
    (pass logs and `math.exp` for a ratio of geometric means)."""
    diffs = [b - a for a, b in zip(before, after, strict=True)]
    return ratio_estimate(diffs, [1.0] * len(diffs), resample_indices(len(diffs), bootstrap), bootstrap.confidence,
                          transform)


def significant(estimate: Estimate, null: float = 0.0) -> bool | None:
    """Whether the interval excludes `null` (None: no interval)."""
    if estimate.low is None or estimate.high is None:
        return None
    return not estimate.low <= null <= estimate.high
