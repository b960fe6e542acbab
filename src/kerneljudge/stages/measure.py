"""Stages "baselines", "time" and "timed-checks": the reference in the referee (before the candidate is
loaded), then the candidate in its worker, measured by the judge, then the timed outputs it took compared.

The measurement loop (`timing.measure`: warm-up, stop rule, statistics) runs here, in the judge process;
each batch of calls is one request to the timed process (`RemoteTimer`), answered after a device-wide
synchronisation. The judge times every request with its own clock, so the per-call times the worker
claims must add up with what the batch took: the slack per call (request time minus claimed time, over
the calls) is compared with the referee's slack for the reference under the same loop, and a candidate
whose claims leave more time unexplained than the tolerance is `timing-tampering`. Which timed outputs
are compared with the reference, and with which inputs, is decided here after each batch returns; the
inputs of every timed call after the first round come from fresh secret seeds (same buffers, new values).
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from kerneljudge import cache, protocol, timing
from kerneljudge.isolation import WorkerProcess
from kerneljudge.records import Finding
from kerneljudge.seeds import fresh_seed
from kerneljudge.stages.context import Judging, StageEnded, reply_finding

STAGE = "timing"
BASELINES = "baselines"  # the reference's stage, before the candidate is loaded (`run_baselines`)
IMPOSSIBLE_FRACTION = 0.5  # a time under half the memory floor cannot be honest
NOISY_FACTOR = 4  # warn when the SEM ends this many times above its target
UNCONFIRMED_SHARE = 0.5  # warn when the unexplained time per call, though within the noise, is this share of the claim
# Which measured calls' outputs are checked (CheckSchedule): drawn call by call, about the same number expected in
# each doubling span of the calls, and never fewer than this many per span (a replay of the later half of a long
# timing meets about that many checks)
CHECK_SPAN_FIRST = 16  # the first span: measured calls [0, 16), then [16, 32), [32, 64), ...
CHECKS_PER_SPAN_AT_LEAST = 3.0  # a replay of a timing's later half then meets none with odds about e^-3 at most
CHECKED_FRACTION_AT_MOST = 0.25  # of a span's calls (a short timing's spans would otherwise check nearly every call)
# GPU: measured calls whose stream order is read (each read is a copy of the output inside its call), drawn like
# the checks: about WATCHES_EXPECTED over the timing, at most WATCHED_CALLS (each holds the device up to 50 ms), so
# a candidate that leaves work on another stream only late in a timing meets them there too
WATCHES_EXPECTED = 8
WATCHED_CALLS = 16
# Before a watched call the caller's stream is held until the call returns (proc/streamhold.py), then waits on the
# device this long, then writes the call's new inputs. Side work the call left running on another stream reads the old
# inputs meanwhile (a wrong output, which the referee's own comparison sees: within the reference's time, wholly); side
# work that waits for the new ones is still running when the output is read right after the call (the watch's
# `unsynchronized-work`) unless it fits in the L2 flush and the call's claimed time (README, "What remains assumed"),
# however long the wait. It was 1 ms + 4x the reference's time until the thirty-third session: 8 waits of 27 ms for
# level2/51 on the H200, a third of its timing, held alone on the device in a batch. A watched batch's time is not the
# cross-check's (it is the judge's).
WATCH_DELAY_MIN_MS = 1.0
WATCH_DELAY_REFERENCE_FACTOR = 1.0
WATCH_DELAY_MAX_MS = 50.0
# A GPU batch's input sets are refilled before its first call (refills between calls put the host's work inside
# the calls' events), so a candidate could do a batch's work at one call and time the others at a fraction of it:
# the median of the calls falls, the batch's total does not. Where the median of the calls is under this fraction
# of the median of the batches' means, and the batch's calls together took more than the allowance beyond their
# median, the batches' means are the samples reported (`timing-skewed`). A candidate gains at most 1 / this by
# moving work between a batch's calls (1 / (1 - SKEW_ALLOWANCE_SHARE) where the share binds).
SKEWED_FRACTION = 0.75
# An honest batch's first call carries the launches' latency after the refill (the device idle before it): on
# the H200, 0.02-0.035 ms per batch for one to a few kernels (0.16 ms for level2/51's dozen small ones), which
# for kernels of 13-30 us put the calls' median at 0.73-0.79 of the batches' means (benchmarks/skew_ratios.py).
# ... but never more than this share of the batch's time: a batch of a few microseconds a call cannot hide its
# whole work in the allowance (where the share binds, a median under 1 - this of the means is skewed)
SKEW_ALLOWANCE_MS = 0.05
SKEW_ALLOWANCE_SHARE = 0.4
# checked at secret positions among the first min_runs calls (the last batch's outputs instead when the budget ends
# the timing before as many were checked)
GUARANTEED_CHECKS = 2
MIN_CROSS_CHECK_BATCHES = 8  # the candidate is timed over at least this many batches where the budget allows
# A batch's later candidate of a problem checks the kept baselines with a short eager run of at least this many
# batches (its worker's processes stopped: the device's exclusive time of every candidate); where they are fewer than
# MIN_CROSS_CHECK_BATCHES, the cross-check's reference is topped up with the last batches of the problem's full eager
# run on the device, made before any candidate was loaded (DeviceMemo.reference_slacks_ms). Nine batches of
# level2/51's 5.6 ms reference took 225 ms of a 0.7 s timing stage on an H100 (thirty-first session).
KEPT_CHECK_BATCHES = 4
CONFIRM_ROUNDS = 12  # candidate and reference batches in turn, before an excess is called tampering
# ... and this many more when the first rounds' excess is over the tolerance, the decision then taken on all of
# them: an honest candidate's paired excess wanders near the line (H200, batches of level2/51 and level1/19
# candidates: -0.02 to +0.08 ms per call; 3 of 47 honest ones ended over their ~0.06 ms tolerance after 12 rounds),
# while a hidden time is over in every round (the fewer rounds the noisier the median of the differences).
CONFIRM_MORE_ROUNDS = 24
BATCHES_SHOWN = 64  # per-batch slacks kept in the result when the claims are looked at again
# How much more unexplained time per call the candidate's batches may leave than the reference's under
# the same loop before its claimed times are not believed: an absolute part (channel and scheduling
# jitter) and a part relative to the claimed median. This is the residual: a worker could shorten its
# claims by up to this much without being caught (docs/benchmarks.md has the figures measured).
SLACK_TOLERANCE_MS = 0.02
SLACK_TOLERANCE_REL = 0.10
SLACK_NOISE_FACTOR = 3.0  # and this many times the spread of the reference's own slack (never the candidate's)
# ... and this fraction of the reference's own slack: on a CPU most of it is the cache flush before each call
# (a 64 MiB memset, ~2.4-3.5 ms on the 2-core VM), and two honest processes flushing the same way differ by
# a steady 10-30% of it (seen: 3.65 ms per call against the reference's 2.81, and 0.38 ms more in all 12
# rounds of taking turns, for an honest candidate 1 run in 40). CPU only: on a GPU the slack is channel and
# host work (~0.2-0.3 ms per call), where this would double the residual for nothing.
CPU_SLACK_TOLERANCE_OF_SLACK = 0.3
PROGRESS_EVERY_MS = 250.0
# The judge's pause before each timed request on the CPU (see Pacer): on the 2-core EPYC VM, 2 ms of idle
# time before a 64 MiB flush was enough for it to run unpreempted under heavy load.
CPU_FLUSH_REST_MS = 4.0
# Timed outputs (and the inputs checked with them) the referee may hold at once for their comparison after the
# timing (HoldOutput); beyond it (or a quarter of the device's free memory) an output is compared at once, inside
# the timing
HELD_BYTES_MAX = 2 << 30
# A checked timed call's inputs are compared too (as the call left them: `input-mutation` while timed) at the
# first check and at about this share of the others, chosen in secret, where the inputs are no larger than
# TIMED_INPUTS_MAX_BYTES: each such check hands the inputs over and the referee holds a copy (a change made on
# every timed call is seen at once; the share bounds the cost for inputs of hundreds of MiB)
TIMED_INPUTS_SHARE = 0.25
TIMED_INPUTS_MAX_BYTES = 256 << 20
# A candidate's timed batch may take this many times the reference's eager time for its calls, at least
# TIMED_BATCH_MIN_S: past it the worker is stopped (`timeout`), so one that hangs only while timed holds the
# device's timing lock (and a batch's lane) a minute at most, not the whole --timeout (300 s by default; red-team
# trial, twenty-third session)
TIMED_BATCH_REFERENCE_FACTOR = 100.0
TIMED_BATCH_MIN_S = 60.0
CALIBRATION = timing.StopRule(min_runs=20, max_runs=400, min_time_ms=20.0, budget_ms=300.0, target_rel_sem=0.02)
KEPT_CHECK = dataclasses.replace(CALIBRATION, min_runs=1)  # (with KEPT_CHECK_BATCHES batches at least)
# A cached torch.compile time is used while the eager time measured beside it is within this factor of this
# run's, both ways (wide enough for a noisy CPU, where compiling again costs 8-27 s; a stale entry from
# other conditions, once seen 14x off, is measured again).
COMPILE_CACHE_FACTOR = 2.0
# ... and while the cached compile time itself is within this factor of this run's eager time, both ways
# (torch.compile rarely gains or loses more than 10x against eager; an entry written by anything but the
# judge, say a compile time inflated 250x to flatter a candidate, is measured again).
COMPILE_EAGER_FACTOR = 20.0
# A cached copy bandwidth is used while it is within this factor of a short measurement made in this run,
# both ways (an entry of 0.001 GB/s or 1e9 GB/s, written by anything but the judge, is measured again).
BANDWIDTH_CACHE_FACTOR = 2.0
CACHEABLE_REL_SEM = 0.02  # a baseline noisier than this is not cached


@dataclass
class Pacer:
    """The judge's pause before each timed request on the CPU, shared by the processes timed in turn.

    On the CPU each call is preceded by a cache flush in the timed process (a memset of twice the last-level
    cache, outside the call's timed interval, so part of the unexplained time the cross-check compares).
    On a busy machine a process that goes from one flush to the next without sleeping is preempted in the
    middle of it (benchmarks/flush_gap.py: a 64 MiB flush took 3.5 ms of CPU time in every case, but 24-36
    ms of wall time right after the previous one and 3.5 ms after 2 ms idle), so the unexplained time per
    call depended on how long and how the calls themselves ran: a one-thread candidate, which never sleeps
    within a batch, left more of it than the reference, whose OpenMP threads do, and failed
    `timing-tampering`. A rest before each request puts every flush after an idle gap. The pause is the
    judge's own time, outside every request it measures: nothing the worker does or claims changes it."""

    rest_ms: float
    clock_ms: Callable[[], float]
    sleep_s: Callable[[float], None] = time.sleep
    last_reply_ms: float = float("-inf")

    def rest(self) -> None:
        wait_ms = self.rest_ms - (self.clock_ms() - self.last_reply_ms)
        if wait_ms > 0:
            self.sleep_s(wait_ms / 1e3)


@dataclass(frozen=True)
class CheckSchedule:
    """Which measured calls have their outputs checked (or, on a GPU, watched), decided in secret call by call:
    in each doubling span of the measured calls ([0, first), [first, 2 first), [2 first, 4 first), ...) each
    call with probability `per_span` / the span's length, and the `forced` positions. Every doubling of the
    measurement expects its checks however long it runs, so a candidate that computes for a while and then
    replays (catalog row 5) meets checks among the calls it replays wherever it starts; and as each call is
    drawn alone, the checks seen so far (a checked batch's longer pause can be seen) say nothing of those to
    come: a fixed count per span would leave the rest of a span free after its last. (Checks drawn with one
    probability up to a total were spent on the first ~130 of 1,000 calls: a replay after them went unseen.)"""

    first: int
    per_span: float
    forced: frozenset[int]
    chooser: random.Random

    @classmethod
    def planned(cls, expected: int, max_runs: int, chooser: random.Random, *, at_least_per_span: float = 0.0,
                forced: int = 0, forced_within: int = 0) -> "CheckSchedule":
        """About `expected` calls over `max_runs` (the `forced` ones, at secret positions among the first
        `forced_within`, included), but at least `at_least_per_span` expected in each span however long
        `max_runs` is; none when `expected` is 0."""
        if expected <= 0:
            return cls(CHECK_SPAN_FIRST, 0.0, frozenset(), chooser)
        spans = 1 + max(0, math.ceil(math.log2(max(max_runs, 1) / CHECK_SPAN_FIRST)))
        forced = min(forced, expected)
        positions = frozenset(chooser.sample(range(max(forced_within, forced)), forced))
        return cls(CHECK_SPAN_FIRST, max(at_least_per_span, (expected - forced) / spans), positions, chooser)

    def wants(self, position: int) -> bool:
        start, end = self.span(position)
        chance = min(CHECKED_FRACTION_AT_MOST, self.per_span / (end - start))
        return position in self.forced or self.chooser.random() < chance

    def span(self, position: int) -> tuple[int, int]:
        if position < self.first:
            return 0, self.first
        start = self.first << ((position // self.first).bit_length() - 1)  # first x the power of 2 at or below
        return start, 2 * start


class RemoteTimer:
    """A `timing.CallTimer` whose calls run in another process, a batch per request, each request timed by
    the judge's clock (after the pacer's rest). `before(i)` may leave a refill seed in `refills` for call i."""

    def __init__(self, process: WorkerProcess, batch: int, clock_ms: Callable[[], float], pacer: Pacer | None = None,
                 *, watch_delay_ms: float | None = None, reference_ms: float | None = None):
        self.process, self.batch, self.clock_ms = process, batch, clock_ms
        self.reference_ms = reference_ms  # the reference's eager time per call: bounds a batch (None: no bound)
        self.pacer = pacer or Pacer(0.0, clock_ms)
        self.next_call = 0  # the index after the last call timed: confirming rounds go on from it
        self.refills: dict[int, int] = {}
        self.slacks_ms: list[float] = []  # per batch: (request time - claimed time) / calls
        self.means_ms: list[float] = []  # per batch: its calls' mean (`_unskewed`)
        self.findings: list[Finding] = []
        # the candidate's measured calls watched from inside their batches (worker/watch.py), chosen here in
        # secret by `watches` (set when the measurement starts) among the calls that get new inputs (each is
        # checked: see _measure); what the worker saw
        self.watch_left = WATCHED_CALLS if watch_delay_ms is not None else 0
        self.watch_delay_ms = watch_delay_ms or 0.0
        self.watches: CheckSchedule | None = None
        self.watched: set[int] = set()
        self.threads: list[str] = []
        self.unjoined: list[int] = []

    def time_call(self, fn) -> float:
        return self.time_calls([fn])[0]

    def time_calls(self, calls, before=None) -> list[float]:
        for call in calls:
            if before is not None:
                before(call.index)
        first, count = calls[0].index, len(calls)
        self.next_call = max(self.next_call, first + count)
        refills = {str(i): self.refills.pop(i) for i in range(first, first + count) if i in self.refills}
        watch = [i for i in range(first, first + count)
                 if str(i) in refills and self.watches is not None and self.watches.wants(i)][:self.watch_left]
        self.watch_left -= len(watch)
        self.watched.update(watch)
        self.pacer.rest()
        started = self.clock_ms()
        delay_ms = self.watch_delay_ms if watch else 0.0
        reply = self.process.call(protocol.TimeBatch(first, count, refills, watch, delay_ms),
                                  limit=self._limit(count, len(watch) * delay_ms))
        self.pacer.last_reply_ms = self.clock_ms()
        wall = self.pacer.last_reply_ms - started
        if reply.get("findings") or reply.get("error"):
            found = reply.get("findings") if isinstance(reply.get("findings"), list) else []
            self.findings = [reply_finding(f, STAGE) for f in found]
            if self.process.role == "worker" and not any(f.blocking for f in self.findings):
                # a batch ends in times or in a failure that stops the candidate: a reply forged with a warning
                # alone ended the turns early, and the first (false) times had been kept
                self.findings.append(Finding.of("tampering", "a timed batch's reply held neither times nor a failure "
                                                "(forged by candidate code)", stage=STAGE))
            raise TimedCallFailed(reply.get("error") or "a timed call failed")
        samples = protocol.numbers(reply.get("samples_ms"), "samples_ms", count=count, low=0.0, high=1e7)
        self.threads = protocol.strings(reply.get("threads", []), "threads") or self.threads
        self.unjoined += [int(i) for i in protocol.numbers(reply.get("unjoined", []), "unjoined") if int(i) in watch]
        if watch:  # a watched batch is a check, not a measurement: its holds are the judge's own time, a watched
            # call's inputs were written right before it (proc/timed.py, partly still in the L2), and its other calls
            # meet no cross-check
            return [None] * count
        self.slacks_ms.append((wall - math.fsum(samples)) / count)
        self.means_ms.append(math.fsum(samples) / count)
        return samples

    def _limit(self, count: int, held_ms: float) -> tuple[float, str] | None:
        """How long a batch of `count` calls may take (and the watched calls' holds, `held_ms`), and why."""
        if self.reference_ms is None:
            return None
        seconds = max(TIMED_BATCH_MIN_S, (TIMED_BATCH_REFERENCE_FACTOR * self.reference_ms * count + held_ms) / 1e3)
        return seconds, (f"a timed batch of {count} call(s): {TIMED_BATCH_REFERENCE_FACTOR:g} times the reference's "
                         f"{self.reference_ms:.3g} ms each, at least {TIMED_BATCH_MIN_S:g} s")

    @property
    def slack_ms(self) -> float:
        """Median time per call the batches took beyond what was claimed (flushes, the channel, Python): a
        claim must move more than half the batches to move the median time it reports, and then it moves
        this median too."""
        return _median(self.slacks_ms)


def _median(values: list[float]) -> float:
    return timing.Stats.from_samples(values).median_ms


def _spread(values: list[float]) -> float:
    """The median absolute deviation (the trusted side's noise)."""
    middle = _median(values)
    return _median([abs(v - middle) for v in values])


class TimedCallFailed(Exception):
    pass


@dataclass
class Timing:
    """The timing block of a result, built in one place."""

    method: str
    input_sets: int
    candidate: timing.Measurement
    checked_outputs: int
    slack: dict[str, float]
    baselines: dict[str, dict | None] = field(default_factory=dict)
    baselines_cached: list[str] = field(default_factory=list)
    floor: dict[str, Any] = field(default_factory=dict)
    stop_rule: dict[str, Any] = field(default_factory=dict)
    samples_are: str = "calls"  # or "batch means" (`_unskewed`)
    flush: str | None = None  # Judging.flush

    def to_json(self) -> dict[str, Any]:
        median = self.candidate.stats.median_ms
        return {"method": self.method, "input_sets": self.input_sets, "checked_outputs": self.checked_outputs,
                "candidate": self.candidate.stats.to_json(), "stop_reason": self.candidate.stop_reason,
                "samples_ms": [round(x, 6) for x in self.candidate.samples_ms[:1000]], "samples_are": self.samples_are,
                "stop_rule": self.stop_rule, "flush": self.flush,
                "batch": self.input_sets, "host_overhead_ms": None, "cross_check": self.slack,
                "baselines": self.baselines, "baselines_cached": self.baselines_cached, "floor": self.floor,
                # four significant figures: a candidate 10,000 times slower is 0.0001x, not 0 (which reports read as
                # "no time" and leave out of a geometric mean)
                "speedup": {name: float(f"{stats['median_ms'] / median:.4g}") for name, stats in self.baselines.items()
                            if stats and median}}


def _method(device: str, opts) -> str:
    if device.startswith("cuda"):
        return "cuda-graph" if opts.cuda_graph else "cuda-events"
    return "host-clock"


def _measure(j: Judging, process: WorkerProcess, model: str, stop: timing.StopRule, clock_ms,
             check: bool = False, watch_delay_ms: float | None = None, stage: str = STAGE,
             part: tuple[int, int] = (1, 1), reference_ms: float | None = None,
             batches_at_least: int = MIN_CROSS_CHECK_BATCHES
             ) -> tuple[timing.Measurement | None, RemoteTimer | None, int, str | None]:
    """One model timed through the judge's loop: (measurement, timer, outputs checked, why unavailable).
    `watch_delay_ms` (GPU): watch some timed calls from inside their batches, each checked (worker/watch.py).
    `reference_ms`: the reference's time per call, which bounds each batch (RemoteTimer._limit).
    `batches_at_least`: the unwatched batches timed at least, where the budget allows (the cross-check's).
    `stage` and `part` (its place among the stage's measurements): where its progress is told."""
    opts = j.options.timing
    name = _part_name(opts, model)
    j.tell(stage, name, *part)
    set_seeds = [fresh_seed() for _ in range(opts.input_sets)]
    ready = process.call(protocol.TimeSetup(model, set_seeds, _method(j.device, opts), describe=process is j.referee))
    if ready.get("unavailable"):
        if process is not j.referee:  # only the reference may be untimeable (torch.compile failing)
            j.findings.append(Finding.of("tampering", f"the {model} timing's setup reply said it could not be timed",
                                         stage=STAGE))
            raise StageEnded()
        return None, None, 0, str(ready["unavailable"])[:400]
    j.take(ready, STAGE)
    if process is j.referee and model != "compile":  # the floor's bytes, from the trusted side
        j.moved_bytes = int(ready["input_bytes"]) + int(ready["output_bytes"])
        j.input_bytes = int(ready["input_bytes"])
        j.flush = ready.get("flush")
    sets = int(protocol.number(ready.get("input_sets"), "input_sets", low=1, high=len(set_seeds)))
    current = list(set_seeds[:sets])  # the seed whose values each input set holds
    used: set[int] = set()
    on_gpu = j.device.startswith("cuda")
    timer = RemoteTimer(process, sets if on_gpu else 1, clock_ms, Pacer(0.0 if on_gpu else CPU_FLUSH_REST_MS, clock_ms),
                        watch_delay_ms=watch_delay_ms if on_gpu else None, reference_ms=reference_ms)
    # enough batches for the cross-check's medians, where the budget allows
    watches = WATCHES_EXPECTED if timer.watch_left else 0  # watched batches are left out of the cross-check
    least = max(stop.min_runs, (batches_at_least + watches) * timer.batch)
    stop = dataclasses.replace(stop, min_runs=least, max_runs=max(stop.max_runs, least))
    # calls: every call so far; measured: calls since the warm-up ended (None during it); done: measured calls checked
    checked = {"n": 0, "calls": 0, "measured": None, "done": set()}
    # the measured calls checked (a measurement that the budget ends before GUARANTEED_CHECKS of them checks its
    # last calls instead, below); the warm-up's calls are not
    # (a GPU's watched calls are checked besides: they do not count among these, as a candidate can tell them,
    # its set's values changing right before the call)
    chooser = random.SystemRandom()
    schedule = CheckSchedule.planned(opts.checked_calls if check else 0, stop.max_runs, chooser,
                                     at_least_per_span=CHECKS_PER_SPAN_AT_LEAST, forced=GUARANTEED_CHECKS,
                                     forced_within=opts.min_runs)

    def before(i: int) -> None:
        k = i % sets
        if k in used:  # this set's values were seen: new values, same buffers
            current[k] = timer.refills[i] = fresh_seed()
        used.add(k)

    told = {"ms": float("-inf")}
    checking = {"ms": 0.0}  # time spent checking outputs: not the timing budget's

    def loop_clock_ms() -> float:
        return clock_ms() - checking["ms"]

    def after(i: int) -> None:
        if clock_ms() - told["ms"] >= PROGRESS_EVERY_MS:
            told["ms"] = clock_ms()
            j.tell(stage, f"{name}: {checked['calls'] + 1} calls", *part)
        # whether this output is checked is decided only now, here, after its batch returned
        checked["calls"] += 1
        position = checked["measured"]
        if position is not None:
            checked["measured"] += 1
        if check and (i in timer.watched or (position is not None and schedule.wants(position))):
            check_output(i, measured=position is not None)

    def check_output(i: int, measured: bool) -> None:
        inputs = j.input_bytes is not None and j.input_bytes <= TIMED_INPUTS_MAX_BYTES and \
            (checked["n"] == 0 or chooser.random() < TIMED_INPUTS_SHARE)  # (unknown size: not checked)
        checked["n"] += 1
        if measured:
            checked["done"].add(i)
        started = clock_ms()
        _check_timed_output(j, i, current[i % sets], watched=i in timer.watched, inputs=inputs)
        checking["ms"] += clock_ms() - started

    def measuring() -> None:
        timer.slacks_ms.clear()  # the cross-check (and the skew's check) keep the measured batches only
        timer.means_ms.clear()
        checked["measured"] = 0
        if timer.watch_left:
            timer.watches = CheckSchedule.planned(WATCHES_EXPECTED, stop.max_runs, random.SystemRandom())

    try:
        measured = timing.measure(_nothing, timer=timer, stop=stop, warmup_runs=opts.warmup_runs,
                                  warmup_ms=opts.warmup_ms, wall_clock_ms=loop_clock_ms, before=before, after=after,
                                  on_measuring=measuring)
        # the budget ended the loop before the guaranteed positions: check the last batch's outputs (the
        # worker keeps them until the next batch), so no timed measurement goes unchecked
        total = checked["measured"] or 0
        for i in range(total - 1, max(0, total - timer.batch) - 1, -1):
            if not check or checked["n"] >= min(GUARANTEED_CHECKS, opts.checked_calls):
                break
            if i not in checked["done"]:
                check_output(i, measured=True)
    except TimedCallFailed:
        j.findings.extend(timer.findings)
        raise StageEnded() from None
    except protocol.Untrusted as exc:
        code = "judge-error" if process is j.referee else "tampering"  # the referee runs no candidate code
        j.findings.append(Finding.of(code, f"the {model} timing's reply was malformed: {exc}", stage=stage))
        raise StageEnded() from None
    j.findings.extend(_watched(timer))
    busy_ms = j.worker.stray_cpu_ms(0.0) if process is j.worker else 0.0  # one window: a start-up is long over
    if busy_ms:
        j.findings.append(Finding.of("thread-spawn", f"after the timing: {j.worker.strays_said(busy_ms)}", stage=STAGE))
    return measured, timer, checked["n"], None


def _watched(timer: RemoteTimer) -> list[Finding]:
    """What the worker saw of the timed calls themselves (worker/watch.py): a candidate that behaves only
    while timed (by its stack, a call count, the phase) is seen there, not by the probes."""
    found = []
    if timer.threads:
        found.append(Finding.of("thread-spawn", f"while timed: thread(s) {', '.join(timer.threads[:5])} were left "
                                "running beside the timed calls (started by one, or found running the candidate's "
                                "code when timing began)", stage=STAGE, threads=timer.threads[:20]))
    if timer.unjoined:
        found.append(Finding.of("unsynchronized-work", f"while timed: the output of timed call(s) "
                                f"{', '.join(map(str, timer.unjoined[:5]))}, read in the caller's stream order right "
                                "after the call, differs from the output after the batch's synchronisation (work "
                                "left running on another stream)", stage=STAGE, calls=timer.unjoined[:20]))
    return found


def _part_name(opts, model: str) -> str:
    """A measurement as progress names it."""
    if model == "eager":
        return "baseline eager" if opts.baselines else "calibration (eager)"
    return {"compile": "baseline compile"}.get(model, model)


@dataclass(frozen=True)
class HeldCheck:
    """A timed output the referee copied and holds, to be compared after the timing (`run_held_checks`)."""

    index: int
    seed: int  # its inputs' values
    watched: bool
    inputs: bool  # its inputs, as the call left them, are held with it and compared too


def _check_timed_output(j: Judging, i: int, seed: int, watched: bool, inputs: bool) -> None:
    """Timed call `i`'s output (and its inputs as it left them, where `inputs`), taken from the worker now: held
    by the referee for a comparison after the timing (drawing the reference's output and comparing took ~13 ms
    of a level2/51 check on the H200, the device the timing's alone meanwhile), or compared now where it would
    not fit the referee's budget."""
    if _mismatched(j):
        return
    exported = _exported(j, i, inputs)
    if exported is None:
        return
    held = j.take(j.referee.call(protocol.HoldOutput(i, exported["output"], HELD_BYTES_MAX, exported.get("inputs_after")),
                                 exported["_blobs"]), STAGE)
    if held.get("held") is True:
        j.held_checks.append(HeldCheck(i, seed, watched, inputs))
        return
    exported = _exported(j, i, inputs)  # the blobs went with the hold: again
    if exported is not None:
        _compare_timed(j, HeldCheck(i, seed, watched, inputs), exported)


def _exported(j: Judging, i: int, inputs: bool) -> dict | None:
    """Timed call `i`'s output from the worker, and (`inputs`) its inputs as the call left them (a candidate that
    changes its inputs only while timed is `input-mutation` as in the check), or None where a later call of its
    batch returned the same memory (that fails as such)."""
    exported = j.take(j.worker.call(protocol.ExportOutput(i, inputs=inputs)), STAGE)
    if exported.get("reused") is True:
        _reused_while_timed(j, i)
        return None
    return exported


def run_held_checks(j: Judging) -> None:
    """Stage "timed-checks", after the timing: the timed outputs the referee held, each compared with the
    reference's output for its inputs (the first that differs fails the candidate; the rest are not needed)."""
    for check in j.held_checks:
        if _mismatched(j):
            break
        _compare_timed(j, check, None)
    j.held_checks.clear()
    j.take(j.referee.call(protocol.TimeDone()), STAGE)  # the outputs a mismatch left uncompared


def _mismatched(j: Judging) -> bool:
    return any(f.code == "timed-output-mismatch" for f in j.findings)


def _compare_timed(j: Judging, check: HeldCheck, exported: dict | None) -> None:
    """One timed output compared (`exported`: the worker's reply; None: the one the referee holds)."""
    i, watched = check.index, check.watched
    j.draw(check.seed, STAGE, timed=True, keep_inputs=check.inputs)
    # (the worker keeps its timed outputs until the timing ends: a release would free nothing and cost a request)
    trial, findings, _ = j.compare(check.seed, i, exported, STAGE, rule="timed", inputs=check.inputs,
                                   verdict_only=True, release=False)
    if not any(f.code == "input-mutation" for f in j.findings):
        j.findings.extend(f for f in findings if f.code == "input-mutation")
    if not trial.passed:
        how = (" (its inputs were written in the caller's stream order just before it, after a wait: work that does "
               "not wait for the caller's stream read the old ones)") if watched else ""
        j.findings.append(Finding.of("timed-output-mismatch", f"timed call {i}{how}: {trial.message}", stage=STAGE,
                                     call=i, watched=watched))


def _reused_while_timed(j: Judging, i: int) -> None:
    """A timed output that a later call of its batch overwrote is what the repeat probe fails as `output-alias`
    (a call returning memory a previous result still holds), seen while timed: it fails the same way, or the
    calls whose outputs are overwritten could return anything unchecked (only a batch's last output could be)
    and time a fraction of the work."""
    if not any(f.code == "output-alias" for f in j.findings):
        j.findings.append(Finding.of("output-alias", f"while timed: the output of timed call {i} was overwritten by "
                                     "a later call of the same batch (memory a previous result still held returned "
                                     "again)", stage=STAGE, call=i))


def run_baselines(j: Judging, problem_key: str, device_key: str, clock_ms: Callable[[], float]) -> Baselines | None:
    """Stage "baselines", before the worker imports the candidate: the reference timed (eager, and
    torch.compile's), while nothing of the candidate's has run, so nothing of it (a thread loading the host,
    a kernel left running on the device) can slow the reference down and flatter the speedup, or widen the
    cross-check's reference. The pipeline skips this stage where a batch's lanes on the device kept the
    problem's baselines (`run_timing` then times a short eager run, the worker's processes stopped). None where
    the reference could not be timed (said; the candidate is then checked, not timed). In a batch, the device's
    first such stage also settles its copy bandwidth for the memory floor of every later candidate on it
    (`_bandwidth`), for the same reason: settled after a candidate was loaded, it could be one slowed on purpose."""
    try:
        measured = _baselines(j, _stop_rule(j.options.timing), clock_ms, problem_key)
    except StageEnded:
        if any(f.blocking for f in j.findings):  # a referee fault: the evaluation ends here, as in any stage
            raise
        j.findings.append(Finding.of("baseline-unavailable", "the reference could not be timed: the candidate "
                                     "is checked, not timed", stage=BASELINES))
        measured = None
    j.take(j.referee.call(protocol.TimeDone()), BASELINES)  # its timed inputs are not kept through the check
    if j.memo is not None and device_key not in j.memo.bandwidth_gbps:
        j.memo.bandwidth_gbps[device_key] = _bandwidth_settled(j, device_key, BASELINES)[0]
    if j.baselines is not None and measured is not None and measured.figures.get("eager"):
        # kept for the problem's later candidates on the device once the stage has ended well (its bandwidth
        # settled): the figures, and the eager run's batches that top up their short runs (`_kept`)
        j.baselines[problem_key] = {name: measured.figures[name] for name in ("eager", "compile")
                                    if name in measured.figures}
        j.memo.reference_slacks_ms[problem_key] = list(measured.timer.slacks_ms)
    return measured


def run_timing(j: Judging, problem_key: str, device_key: str, clock_ms: Callable[[], float],
               measured: Baselines | None, kept: dict[str, Any] | None) -> dict | None:
    """The candidate timed, its claims cross-checked against the reference's, then the floor. The reference's
    figures: `measured` in the baselines stage, or `kept` by the batch's lanes on the device (read once by the
    pipeline: another lane may forget them meanwhile), then beside a short eager run (`_kept`); neither: the
    reference could not be timed, nor is the candidate. The reference is timed once, before the candidate: a
    second time after it (the machine's drift between the two allowed for) cost as long again (0.2 s of a
    level2/51 timing on the H200, alone on the device in a batch), and an excess that the machine's conditions
    could explain is looked at again with the two taking turns (`_confirm`) before anyone is accused."""
    opts = j.options.timing
    stop = _stop_rule(opts)
    if measured is None and kept is None:
        return None
    try:
        baselines = measured if kept is None else _kept(j, problem_key, kept, clock_ms)
        candidate, timer, checked, _ = _measure(j, j.worker, "candidate", stop, clock_ms, check=True,
                                                watch_delay_ms=_watch_delay_ms(baselines.eager_ms),
                                                part=(1, 1) if kept is None else (2, 2), reference_ms=baselines.eager_ms)
    except StageEnded:
        return None
    per_call = candidate
    candidate = _unskewed(j, candidate, timer.batch, timer.means_ms)
    stats = candidate.stats
    for name, figures in baselines.figures.items():  # a speedup is only as certain as the baseline it divides
        if figures and name not in baselines.cached:
            rel_sem = figures.get("rel_sem")  # None (not finite) after a single run
            _warn_if_noisy(j, f"baseline {name}, so the speedup against it too: ",
                           math.inf if rel_sem is None else rel_sem, figures.get("n"), None, BASELINES)
    slack, in_turns = _cross_check(j, timer, baselines.timer, stats.median_ms, clock_ms)
    turns = timing.Stats.from_samples(in_turns) if in_turns else None
    # its first times were not explained, and those it gave while the two took turns were: where the turns' are
    # slower beyond what the machine's noise explains (their tolerance), they are reported (never where faster: the
    # turns' outputs are not checked, and a candidate doing no work there claims less)
    if turns is not None and turns.median_ms - stats.median_ms > slack["paired_tolerance_ms"]:
        candidate = per_call = dataclasses.replace(per_call, samples_ms=tuple(in_turns), stats=turns)
        j.findings.append(Finding.of(
            "timing-from-turns", f"the candidate's timed batches took {slack['excess_ms']:.4g} ms per call more than "
            f"its reported times explain (tolerance {slack['tolerance_ms']:.3g} ms), and not when it and the reference "
            f"took turns ({slack['paired_rounds']} rounds), where its median was {turns.median_ms:.4g} ms against "
            f"{stats.median_ms:.4g} ms: the turns' times are reported", stage=STAGE))
        stats = turns
    _warn_if_noisy(j, "", stats.rel_sem, stats.n, candidate.stop_reason, STAGE)
    _warn_if_unconfirmed(j, slack, stats.median_ms, baselines.eager_ms)
    block = Timing(_method(j.device, opts), timer.batch if timer.batch > 1 else opts.input_sets, candidate, checked,
                   slack, baselines.figures, baselines.cached,
                   samples_are="calls" if candidate is per_call else "batch means",
                   stop_rule={k: getattr(opts, k) for k in ("min_runs", "max_runs", "min_time_ms", "budget_ms",
                                                            "target_rel_sem")},
                   flush=j.flush)
    block.floor = _floor(j, *_bandwidth(j, device_key), stats.median_ms)
    return block.to_json()


def _stop_rule(opts) -> timing.StopRule:
    return timing.StopRule(min_runs=opts.min_runs, max_runs=opts.max_runs, min_time_ms=opts.min_time_ms,
                           budget_ms=opts.budget_ms, target_rel_sem=opts.target_rel_sem)


def _unskewed(j: Judging, measured: timing.Measurement, batch: int, means: list[float]) -> timing.Measurement:
    """The measurement, or, where its calls' median is under SKEWED_FRACTION of its batches' (`means`: each
    unwatched batch's mean per call, of `batch` calls) by more than the allowance (SKEW_ALLOWANCE_MS a batch, at
    most SKEW_ALLOWANCE_SHARE of it), the batches' means as its samples, with `timing-skewed`."""
    if batch <= 1 or len(means) < 2:
        return measured
    per_batch = timing.Stats.from_samples(means)
    excess_ms = (per_batch.median_ms - measured.stats.median_ms) * batch
    allowance_ms = min(SKEW_ALLOWANCE_MS, SKEW_ALLOWANCE_SHARE * per_batch.median_ms * batch)
    if measured.stats.median_ms >= SKEWED_FRACTION * per_batch.median_ms or excess_ms <= allowance_ms:
        return measured
    j.findings.append(Finding.of(
        "timing-skewed", f"the median of the timed calls, {measured.stats.median_ms:.4g} ms, is under "
        f"{SKEWED_FRACTION:g}x the median of their batches' means, {per_batch.median_ms:.4g} ms per call (work "
        f"done at one call of a batch for the others?): the batches' means are reported", stage=STAGE,
        calls_median_ms=measured.stats.median_ms, batches_median_ms=per_batch.median_ms, calls_per_batch=batch))
    return dataclasses.replace(measured, samples_ms=tuple(means), stats=per_batch)


def _watch_delay_ms(reference_ms: float | None) -> float:
    return min(WATCH_DELAY_MAX_MS, WATCH_DELAY_MIN_MS + WATCH_DELAY_REFERENCE_FACTOR * (reference_ms or 0.0))


def _warn_if_noisy(j: Judging, what: str, rel_sem: float, n, why: str | None, stage: str) -> None:
    """`timing-noisy` when a figure ended far from its precision target (the candidate's, or a baseline's)."""
    if rel_sem > NOISY_FACTOR * j.options.timing.target_rel_sem:
        spread = f"relative SEM {100 * rel_sem:.2g}% after {n} runs" if math.isfinite(rel_sem) else \
            f"{n} run{'s' * (n != 1)} only, no spread known"
        j.findings.append(Finding.of("timing-noisy", f"{what}{spread}" + (f" ({why})" if why else ""), stage=stage))


def _warn_if_unconfirmed(j: Judging, slack: dict, median_ms: float, eager_ms: float | None) -> None:
    """`timing-unconfirmed` where the judge's own clock saw a good share of the claimed time per call more
    than the claims explain, yet within the machine's noise (the cross-check's tolerance: on a CPU, where the
    cache flush between calls is noisy, larger than a short call), so nobody is accused: time hidden from the
    worker's claims passes there unseen (QA 36: a candidate that rewrote the worker timer's start from its
    stack claimed 17x on a 1.8 ms call). The report says what the judge's clock gives instead."""
    excess, tolerance = slack.get("excess_ms"), slack.get("tolerance_ms")
    if excess is None or tolerance is None or excess > tolerance or excess < UNCONFIRMED_SHARE * median_ms:
        return
    seen_ms = median_ms + excess
    speedup = f"; by that clock the speedup against eager is {eager_ms / seen_ms:.4g}x" if eager_ms else ""
    j.findings.append(Finding.of(
        "timing-unconfirmed", f"the judge's own clock saw {excess:.3g} ms per call more than the claimed "
        f"{median_ms:.4g} ms explain, within this machine's noise ({tolerance:.3g} ms){speedup}", stage=STAGE,
        excess_ms=round(excess, 6), tolerance_ms=round(tolerance, 6), seen_ms=round(seen_ms, 6)))


@dataclass
class Baselines:
    """The referee's figures of the reference (eager, torch.compile) and which of them were kept from before
    (the cache, the lane); `timer` and `eager_ms`: this run's eager measurement, the cross-check's reference
    and the watched calls' wait (None where it could not be timed)."""

    figures: dict[str, dict | None]
    cached: list[str]
    timer: RemoteTimer | None
    eager_ms: float | None


def _kept(j: Judging, problem_key: str, memo: dict[str, Any], clock_ms) -> Baselines:
    """The baselines of the problem that the batch's lanes on this device measured in full at an earlier
    candidate (`memo`), and a short eager run now for the cross-check, the worker's processes stopped
    meanwhile: nothing of the candidate runs on the host while the reference is timed (one that keeps running
    anyway is `tampering`). Where that run's time disagrees with the kept one, the kept figures still give this
    result's speedups (they were measured before any candidate code had run; this run was not), and the lanes
    forget them: their next candidate of the problem measures them again, first. The cross-check's reference is
    this run's batches (KEPT_CHECK_BATCHES at least) topped up, where it agrees, with the last ones of the full run
    the kept figures come from (made before any candidate was loaded: a short run's, made after, never serve
    another candidate), MIN_CROSS_CHECK_BATCHES in all; where it disagrees, its own batches alone."""
    with j.worker.frozen() as frozen:
        if frozen.running:
            _ran_while_stopped(j, frozen.running, "kept running")
        short, short_timer, _, _ = _measure(j, j.referee, "eager", KEPT_CHECK, clock_ms, part=(1, 2),
                                            batches_at_least=KEPT_CHECK_BATCHES)
    if frozen.ran:
        _ran_while_stopped(j, frozen.ran, "used CPU time or appeared")
    short_ms = short.stats.median_ms if short is not None else None
    then_ms = memo["eager"]["median_ms"]
    agrees = short_ms is not None and _agrees(short_ms, then_ms)
    missing = MIN_CROSS_CHECK_BATCHES - len(short_timer.slacks_ms) if short_timer is not None else 0
    if agrees and missing > 0 and j.baselines.get(problem_key) is memo:  # (the batches of these figures' run)
        short_timer.slacks_ms = j.memo.reference_slacks_ms.get(problem_key, [])[-missing:] + short_timer.slacks_ms
    if not agrees:
        if j.baselines.get(problem_key) is memo:  # not another lane's newer figures
            del j.baselines[problem_key]
            j.memo.reference_slacks_ms.pop(problem_key, None)
        j.findings.append(Finding.of(
            "baseline-disagrees", f"the reference's eager time now, {f'{short_ms:.4g} ms' if short_ms else 'none'}, "
            f"is not within {COMPILE_CACHE_FACTOR:g}x of the {then_ms:.4g} ms measured before on this device: the "
            "speedups are against those figures, measured again before its next candidate of this problem",
            stage=BASELINES, eager_ms=short_ms, kept_eager_ms=then_ms))
    return Baselines(dict(memo), sorted(memo), short_timer, short_ms)


def _ran_while_stopped(j: Judging, pids: list[int], what: str) -> None:
    j.findings.append(Finding.of(
        "tampering", f"the worker's process(es) {', '.join(map(str, pids[:5]))} {what} while the worker was stopped "
        "for the reference's timing (continued by another process?)", stage=STAGE, pids=pids[:20]))
    raise StageEnded()


def _baselines(j: Judging, stop: timing.StopRule, clock_ms, problem_key: str) -> Baselines:
    """Eager always (it calibrates the cross-check; a short run when baselines are off), torch.compile from
    the cache while the eager time it was measured beside agrees with this run's. In a batch lane
    (`j.baselines`), a problem's baselines are measured in full once and kept for its later candidates
    (`run_baselines`)."""
    opts = j.options.timing
    both = opts.baselines and opts.compile_baseline
    eager, eager_timer, _, why = _measure(j, j.referee, "eager", stop if opts.baselines else CALIBRATION, clock_ms,
                                          stage=BASELINES, part=(1, 2 if both else 1))
    eager_ms = eager.stats.median_ms if eager is not None else None
    if not opts.baselines:
        return Baselines({}, [], eager_timer, eager_ms)
    found: dict[str, Any] = {"eager": eager.stats.to_json() if eager else None}
    if why:
        j.findings.append(Finding.of("baseline-unavailable", f"eager: {why}", stage=BASELINES))
    cached: list[str] = []
    if opts.compile_baseline and eager is not None:
        entry = cache.load(j.options.cache_dir, "baselines", problem_key) or {}
        now = eager.stats.median_ms
        compiled = entry.get("compile") if isinstance(entry.get("compile"), dict) else {}
        if _within(entry.get("eager_median_ms"), now, COMPILE_CACHE_FACTOR) and \
                _within(compiled.get("median_ms"), now, COMPILE_EAGER_FACTOR):
            found["compile"], cached = compiled, ["compile"]
        else:
            compiled, _, _, why = _measure(j, j.referee, "compile", stop, clock_ms, stage=BASELINES, part=(2, 2))
            found["compile"] = compiled.stats.to_json() if compiled else None
            if why:
                j.findings.append(Finding.of("baseline-unavailable", f"compile: {why}", stage=BASELINES))
            elif compiled.stats.rel_sem <= CACHEABLE_REL_SEM:
                cache.save(j.options.cache_dir, "baselines", problem_key,
                           {"compile": found["compile"], "eager_median_ms": eager.stats.median_ms})
    return Baselines(found, cached, eager_timer, eager_ms)


def _agrees(median_ms: float, then_ms) -> bool:
    """An eager time within COMPILE_CACHE_FACTOR of the one a kept baseline was measured beside."""
    return isinstance(then_ms, (int, float)) and then_ms > 0 and \
        1 / COMPILE_CACHE_FACTOR <= median_ms / then_ms <= COMPILE_CACHE_FACTOR


def _cross_check(j: Judging, candidate: RemoteTimer, reference: RemoteTimer | None, median_ms: float,
                 clock_ms: Callable[[], float]) -> tuple[dict, list[float] | None]:
    """The candidate's unexplained time per call against the reference's under the same loop, measured before
    it (the eager baseline; torch.compile's, when not cached, comes between). An excess beyond the tolerance is
    looked at again, with the two taking turns (`_confirm`), before the candidate is accused: another process
    loading the machine while only the candidate was timed (or the machine's conditions drifting since the
    reference was) is not the candidate's doing. Cleared so, the times it gave in the turns are the ones
    returned to report (else None): a candidate that told the turns by the gaps between its calls (the
    reference's batch and a rest between two of its own) gave false times only outside them, and its first
    times had been reported."""
    if not candidate.slacks_ms:  # every batch the budget allowed was watched
        return {"slack_ms": None, "reference_slack_ms": None}, None
    if reference is None or not reference.slacks_ms:
        return {"slack_ms": round(candidate.slack_ms, 6), "reference_slack_ms": None}, None
    pooled = reference.slacks_ms
    reference_ms = _median(pooled)
    excess = candidate.slack_ms - reference_ms
    tolerance = _tolerance(j, median_ms, reference_ms, pooled)
    result = {"slack_ms": round(candidate.slack_ms, 6), "reference_slack_ms": round(reference_ms, 6),
              "excess_ms": round(excess, 6), "tolerance_ms": round(tolerance, 6)}
    if excess <= tolerance:
        return result, None
    # the evidence, batch by batch, when the candidate's claims are looked at again (at most BATCHES_SHOWN each)
    result.update(batch_slacks_ms=[round(x, 4) for x in candidate.slacks_ms[:BATCHES_SHOWN]],
                  reference_batch_slacks_ms=[round(x, 4) for x in pooled[:BATCHES_SHOWN]],
                  calls_per_batch=candidate.batch, reference_calls_per_batch=reference.batch)
    try:
        paired_excess, paired_tolerance, rounds, in_turns = _confirm(j, candidate, median_ms, clock_ms)
    except TimedCallFailed:
        j.findings.extend(candidate.findings)
        return result, None
    except protocol.Untrusted as exc:
        j.findings.append(Finding.of("tampering", f"the candidate timing's reply was malformed: {exc}", stage=STAGE))
        return result, None
    result.update(paired_excess_ms=round(paired_excess, 6), paired_tolerance_ms=round(paired_tolerance, 6),
                  paired_rounds=rounds)
    if paired_excess > paired_tolerance:
        j.findings.append(Finding.of(
            "timing-tampering", f"the candidate's batches took {excess:.4g} ms per call more than the times it reported "
            f"explain (the reference's batches under the same loop: {reference_ms:.4g} ms unexplained; "
            f"tolerance {tolerance:.3g} ms), and {paired_excess:.4g} ms more when the two took turns {rounds} times "
            f"(tolerance {paired_tolerance:.3g} ms): its reported times are not believed", stage=STAGE, **result))
        return result, None
    return result, in_turns


def _confirm(j: Judging, candidate: RemoteTimer, median_ms: float,
             clock_ms) -> tuple[float, float, int, list[float]]:
    """CONFIRM_ROUNDS rounds of one candidate batch and one reference batch in turn, every input set
    refilled (CONFIRM_MORE_ROUNDS more while the excess is over the tolerance): the median of the paired slack
    differences, its tolerance (from the reference's spread), the number of rounds and the candidate's times
    in them."""
    opts = j.options.timing
    j.take(j.referee.call(protocol.TimeSetup("calibration", [fresh_seed() for _ in range(opts.input_sets)],
                                             _method(j.device, opts))), STAGE)
    reference = RemoteTimer(j.referee, candidate.batch, clock_ms, candidate.pacer)  # one pause between any two
    candidate.watch_left = 0  # every round's slack is paired
    differences, reference_slacks, in_turns = [], [], []
    start = candidate.next_call  # the indices go on from the measurement's: a worker cannot tell these batches apart
    for rounds in (CONFIRM_ROUNDS, CONFIRM_MORE_ROUNDS):
        for _ in range(rounds):
            first = start + len(differences) * candidate.batch
            for timer in (candidate, reference):
                timer.refills.update({first + k: fresh_seed() for k in range(candidate.batch)})
                samples = timer.time_calls([timing.IterationCall(_nothing, first + k) for k in range(candidate.batch)])
                if timer is candidate:
                    in_turns += samples
            differences.append(candidate.slacks_ms[-1] - reference.slacks_ms[-1])
            reference_slacks.append(reference.slacks_ms[-1])
        excess = _median(differences)
        tolerance = _tolerance(j, median_ms, _median(reference_slacks), reference_slacks)
        if excess <= tolerance:
            break
    return excess, tolerance, len(differences), in_turns


def _tolerance(j: Judging, median_ms: float, reference_ms: float, reference_slacks: list[float]) -> float:
    """How much more unexplained time per call than the reference's is let pass (the constants above)."""
    of_slack = 0.0 if j.device.startswith("cuda") else CPU_SLACK_TOLERANCE_OF_SLACK * max(reference_ms, 0.0)
    return (SLACK_TOLERANCE_MS + SLACK_TOLERANCE_REL * median_ms + of_slack
            + SLACK_NOISE_FACTOR * _spread(reference_slacks))


def _bandwidth(j: Judging, device_key: str) -> tuple[float, str]:
    """The device's copy bandwidth, and where it came from: the cache, while it is within
    BANDWIDTH_CACHE_FACTOR of a short measurement made now ("cached"); else measured in full now and cached
    ("measured", or "remeasured" when the cached figure was out of range). In a batch, the figure the device's
    first baselines stage settled, before its candidate was loaded ("kept": `run_baselines`); a figure settled
    here, with the candidate loaded, serves this candidate alone."""
    kept = j.memo.bandwidth_gbps.get(device_key) if j.memo is not None else None
    if kept is not None:
        return kept, "kept"
    return _bandwidth_settled(j, device_key, STAGE)


def _bandwidth_settled(j: Judging, device_key: str, stage: str) -> tuple[float, str]:
    """The cache checked by a short copy, or a full measurement (`_bandwidth`), in `stage`."""
    check = j.take(j.referee.call(protocol.CopyBandwidth(quick=True)), stage)["gbps"]
    cached = (cache.load(j.options.cache_dir, "bandwidth", device_key) or {}).get("gbps")
    if _within(cached, check, BANDWIDTH_CACHE_FACTOR):
        return cached, "cached"
    gbps = j.take(j.referee.call(protocol.CopyBandwidth()), stage)["gbps"]
    cache.save(j.options.cache_dir, "bandwidth", device_key, {"gbps": gbps})
    return gbps, "measured" if cached is None else "remeasured"


def _within(value, reference: float, factor: float) -> bool:
    """`value` is a finite positive number within `factor` of `reference`, both ways."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
            and 1 / factor <= value / reference <= factor)


def _nothing(index: int) -> None:
    """The timed call's stand-in on the judge's side (the call itself runs in the timed process)."""


def _floor(j: Judging, gbps: float, source: str, median_ms: float) -> dict[str, Any]:
    """The roofline floor: inputs read once and outputs written once at the copy bandwidth the referee
    measured (`_bandwidth`: cached per device, checked against this run)."""
    moved = j.moved_bytes or 0
    floor_ms = timing.floor_time_ms(moved, gbps)
    if median_ms < IMPOSSIBLE_FRACTION * floor_ms:
        j.findings.append(Finding.of("impossible-speed", f"median {median_ms:.4g} ms is under {IMPOSSIBLE_FRACTION:g}x "
                                     f"the memory floor {floor_ms:.4g} ms ({moved} bytes at {gbps:.0f} GB/s)",
                                     stage=STAGE))
    return {"bytes": moved, "bandwidth_gbps": round(gbps, 2), "bandwidth": source, "floor_ms": floor_ms,
            "percent_of_light": timing.percent_of_light(median_ms, floor_ms) if median_ms > 0 else None}
