"""Stage "time" inside the worker: the candidate and the baselines, timed the same way.

GPU: CUDA events around each call, L2 flushed (2x its size) before each call outside the events,
optionally CUDA-graph replays. CPU: the bound host clock, the last-level cache flushed the same way.
Timed calls rotate among several input sets, and every `check_every`-th timed output is compared
with the reference's output for its set right after its call (outside the timed region), so caching
or skipping work while being timed cannot pay. The roofline floor (inputs read once, outputs written
once, at the measured copy bandwidth) turns an impossible time into a failing finding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from kerneljudge import timing
from kerneljudge.records import Finding
from kerneljudge.worker import compare
from kerneljudge.worker.session import Session, derive_seed, synchronize

STAGE = "timing"
IMPOSSIBLE_FRACTION = 0.5  # a time under half the memory floor cannot be honest
NOISY_FACTOR = 4  # warn when the SEM ends this many times above its target
INPUT_SET_BUDGET_BYTES = 2 << 30  # rotation sets beyond this are not allocated
BANDWIDTH_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}


class CheckedTimer:
    """A timer that, after the timed interval, lets `after(index)` inspect the output of that call."""

    def __init__(self, inner, after: Callable[[int], None]):
        self.inner, self.after = inner, after

    def time_call(self, fn) -> float:
        elapsed = self.inner.time_call(fn)
        self.after(fn.index)
        return elapsed


@dataclass
class Timed:
    measurement: timing.Measurement
    checked: int
    host_overhead_ms: float


def method(session: Session, opts: dict[str, Any]) -> str:
    if session.device.type == "cuda":
        return "cuda-graph" if opts.get("cuda_graph") else "cuda-events"
    return "host-clock"


def _timer(session: Session, opts: dict[str, Any], input_sets: int, hold_ms: float = 0.0):
    """The timer for this device and mode, with its cache flush (clocks bound before candidate import)."""
    kind = method(session, opts)
    if kind == "cuda-graph":
        flush = timing.L2Flusher.for_cuda_device(session.device)
        return timing.cuda_graph_timer(session.device, flush, input_period=input_sets)
    if kind == "cuda-events":
        hold = None
        if hold_ms > 0:
            if session.spin_cycles_per_ms is None:
                session.spin_cycles_per_ms = timing.spin_cycles_per_ms(session.device)
            hold = timing.spin_hold(hold_ms, session.spin_cycles_per_ms)
        return timing.cuda_event_timer(session.device, timing.L2Flusher.for_cuda_device(session.device), hold)
    return timing.HostTimer(session.guard.clock_ns, flush=timing.CpuCacheFlusher())


def _stop(opts: dict[str, Any]) -> timing.StopRule:
    return timing.StopRule(min_runs=opts["min_runs"], max_runs=opts["max_runs"], min_time_ms=opts["min_time_ms"],
                           budget_ms=opts["budget_ms"], target_rel_sem=opts["target_rel_sem"])


def time_model(session: Session, model, sets: list[list], expected: list | None, opts: dict[str, Any],
               findings: list[Finding], label: str) -> Timed:
    """Time `model` rotating over `sets`; with `expected`, check every Nth output against it.
    On a GPU the events hold the call's device time: the host's overhead is measured first and the
    stream is held (a spin of twice that) while the host enqueues each call."""
    overhead_ms = 0.0
    if session.device.type == "cuda":
        with torch.inference_mode():
            overhead_ms = timing.host_overhead_ms(lambda i: model(*sets[i % len(sets)]),
                                                  clock_ns=session.guard.clock_ns,
                                                  sync=lambda: synchronize(session.device))
    timer = _timer(session, opts, len(sets), hold_ms=timing.hold_for(overhead_ms) if overhead_ms else 0.0)
    outputs: dict[int, Any] = {}
    checked = 0
    every = max(1, int(opts["check_every"]))

    def call(i: int):
        out = model(*sets[i % len(sets)])
        if expected is not None and i % every == 0:
            outputs[i] = out
        return out

    def after(i: int) -> None:
        nonlocal checked
        out = outputs.pop(i, None)
        if out is None:
            return
        checked += 1
        reference = expected[i % len(sets)]
        atol, rtol = compare.tolerance(reference, None, None)
        result = compare.compare(i, out, reference, None, atol, rtol)
        if not result.trial.passed and not any(f.code == "timed-output-mismatch" for f in findings):
            findings.append(Finding.of("timed-output-mismatch", f"timed call {i} ({label}, input set "
                                       f"{i % len(sets)}): {result.trial.message}", stage=STAGE, call=i))

    with torch.inference_mode():
        measurement = timing.measure(call, timer=CheckedTimer(timer, after), stop=_stop(opts),
                                     warmup_runs=opts["warmup_runs"], wall_clock_ms=session.guard.wall_ms)
    return Timed(measurement, checked, overhead_ms)


def input_sets(session: Session, count: int) -> list[list]:
    """Up to `count` input sets, fewer when they would not fit INPUT_SET_BUDGET_BYTES."""
    first = session.make_inputs(derive_seed(session.seed, "timing", 0))
    per_set = max(1, timing.tensor_bytes(first))
    count = max(1, min(count, INPUT_SET_BUDGET_BYTES // per_set))
    return [first] + [session.make_inputs(derive_seed(session.seed, "timing", k)) for k in range(1, count)]


def copy_bandwidth_gbps(session: Session) -> float:
    timer = _timer(session, {}, 1)
    nbytes = BANDWIDTH_BYTES[session.device.type]
    stop = timing.StopRule(min_runs=10, max_runs=200, min_time_ms=50, budget_ms=1000, target_rel_sem=0.01)
    return timing.measure_copy_bandwidth(session.device, nbytes, timer=timer, stop=stop,
                                         wall_clock_ms=session.guard.wall_ms)


def run_timing(session: Session, opts: dict[str, Any], *, baselines: list[str],
               bandwidth_gbps: float | None) -> tuple[dict[str, Any], list[Finding]]:
    """Time the candidate, then the requested baselines ("eager", "compile"), then the floor."""
    findings: list[Finding] = []
    started = session.guard.wall_ms()
    sets = input_sets(session, int(opts["input_sets"]))
    with torch.inference_mode():
        expected = [session.reference(*s) for s in sets]
    candidate = time_model(session, session.candidate, sets, expected, opts, findings, "candidate")
    stats = candidate.measurement.stats
    if stats.rel_sem > NOISY_FACTOR * opts["target_rel_sem"]:
        findings.append(Finding.of("timing-noisy", f"relative SEM {100 * stats.rel_sem:.2g}% after "
                                   f"{stats.n} runs ({candidate.measurement.stop_reason})", stage=STAGE))
    timing_ms = session.guard.wall_ms() - started
    block: dict[str, Any] = {
        "method": method(session, opts), "input_sets": len(sets), "checked_outputs": candidate.checked,
        "candidate": stats.to_json(), "stop_reason": candidate.measurement.stop_reason,
        "host_overhead_ms": round(candidate.host_overhead_ms, 6) if session.device.type == "cuda" else None,
        "samples_ms": [round(x, 6) for x in candidate.measurement.samples_ms[:1000]],
        "stop_rule": {k: opts[k] for k in ("min_runs", "max_runs", "min_time_ms", "budget_ms", "target_rel_sem")},
        "baselines": {},
    }
    started = session.guard.wall_ms()
    for name in baselines:
        block["baselines"][name], note = _baseline(session, name, sets, opts)
        if note:
            findings.append(Finding.of("baseline-unavailable", f"{name}: {note}", stage="baselines"))
    baselines_ms = session.guard.wall_ms() - started
    if bandwidth_gbps is None:
        bandwidth_gbps = copy_bandwidth_gbps(session)
    moved = timing.tensor_bytes(sets[0]) + timing.tensor_bytes(expected[0])
    floor_ms = timing.floor_time_ms(moved, bandwidth_gbps)
    block["floor"] = {"bytes": moved, "bandwidth_gbps": round(bandwidth_gbps, 2), "floor_ms": floor_ms,
                      "percent_of_light": timing.percent_of_light(stats.median_ms, floor_ms)}
    if stats.median_ms < IMPOSSIBLE_FRACTION * floor_ms:
        findings.append(Finding.of("impossible-speed", f"median {stats.median_ms:.4g} ms is under "
                                   f"{IMPOSSIBLE_FRACTION:g}x the memory floor {floor_ms:.4g} ms ({moved} bytes at "
                                   f"{bandwidth_gbps:.0f} GB/s)", stage=STAGE))
    block["stage_ms"] = {"timing": round(timing_ms, 3), "baselines": round(baselines_ms, 3)}
    return block, findings


def _baseline(session: Session, name: str, sets: list[list], opts: dict[str, Any]):
    """Stats of the reference (eager or torch.compile), or None and why not."""
    model = session.reference
    if name == "compile":
        try:
            model = torch.compile(session.reference)
            with torch.inference_mode():
                model(*sets[0])  # compiling happens here, outside the timing
        except Exception as exc:  # noqa: BLE001 - torch.compile fails on some problems and machines
            return None, f"torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    try:
        timed = time_model(session, model, sets, None, opts, [], name)
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"
    return timed.measurement.stats.to_json(), None
