"""Stage "time" inside the worker: the candidate and the baselines, timed the same way.

GPU: CUDA events around each call, L2 flushed (2x its size) before each call outside the events,
optionally CUDA-graph replays. CPU: the bound host clock, the last-level cache flushed the same way.
Timed calls rotate among several input sets that are refilled with new values each round, and
timed outputs at secret random positions are compared with the reference's output right after their
call (outside the timed region), so caching, replaying or skipping work while being timed cannot pay. The roofline floor (inputs read once, outputs written
once, at the measured copy bandwidth) turns an impossible time into a failing finding.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import Any, Callable

import torch

from kerneljudge import timing
from kerneljudge.records import Finding
from kerneljudge.worker import compare
from kerneljudge.worker.session import Session, clone_args, synchronize

STAGE = "timing"
IMPOSSIBLE_FRACTION = 0.5  # a time under half the memory floor cannot be honest
NOISY_FACTOR = 4  # warn when the SEM ends this many times above its target
CHECK_PROBABILITY = 0.125  # each timed call is checked with this probability, up to `checked_calls`
INPUT_SET_BUDGET_BYTES = 2 << 30  # rotation sets beyond this are not allocated
BATCH_OUTPUT_BUDGET_BYTES = 2 << 30  # outputs of one batch of timed calls kept until it finishes
BANDWIDTH_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}


@dataclass
class Timed:
    measurement: timing.Measurement
    checked: int
    host_overhead_ms: float | None  # plain CUDA events only
    hold_ms: float = 0.0  # the stream held per batch while the host enqueued it


def method(session: Session, opts: dict[str, Any]) -> str:
    if session.device.type == "cuda":
        return "cuda-graph" if opts.get("cuda_graph") else "cuda-events"
    return "host-clock"


def _l2_flush(session: Session) -> timing.L2Flusher:
    return timing.L2Flusher.for_cuda_device(session.device)


def _timer(session: Session, opts: dict[str, Any], input_sets: int):
    """Graph replays, or one call at a time on plain CUDA events (the copy bandwidth) or the bound host
    clock, each with its cache flush. The candidate and the baselines on CUDA events: `time_model`."""
    if method(session, opts) == "cuda-graph":
        return timing.cuda_graph_timer(session.device, _l2_flush(session), input_period=input_sets)
    if session.device.type == "cuda":
        return timing.cuda_event_timer(session.device, _l2_flush(session))
    return timing.HostTimer(session.guard.clock_ns, flush=timing.CpuCacheFlusher())


def _stop(opts: dict[str, Any]) -> timing.StopRule:
    return timing.StopRule(min_runs=opts["min_runs"], max_runs=opts["max_runs"], min_time_ms=opts["min_time_ms"],
                           budget_ms=opts["budget_ms"], target_rel_sem=opts["target_rel_sem"])


def time_model(session: Session, model, sets: list[list], opts: dict[str, Any], findings: list[Finding],
               label: str, check: bool, batch: int, progress=lambda calls: None) -> Timed:
    """Time `model` rotating over `sets`. From the second round on, each set is refilled in place with new
    values before its turn (same buffers, new contents: memos by address or by sampled content stop
    paying); with `check`, up to `checked_calls` outputs at secret random positions are compared with
    the reference's output for the same inputs, computed right after the call's batch (outside the timed
    region). On a GPU the events hold the calls' device time: they run in batches of `batch` calls, at
    most one per input set (back to back on the device, and no set is refilled while an output computed
    from it waits to be checked); the host's overhead per call is measured first, with the device held,
    and the stream is held while the host enqueues each batch (`timing.hold_for`)."""
    held = None
    if method(session, opts) == "cuda-events":
        session.spin_cycles_per_ms = session.spin_cycles_per_ms or timing.spin_cycles_per_ms(session.device)
        with torch.inference_mode():
            held = timing.held_event_timer(session.device, _l2_flush(session), lambda i: model(*sets[i % len(sets)]),
                                           batch=batch, clock_ns=session.guard.clock_ns,
                                           sync=lambda: synchronize(session.device),
                                           cycles_per_ms=session.spin_cycles_per_ms)
    timer = held.timer if held else _timer(session, opts, len(sets))
    chooser = random.SystemRandom()  # not from the run's seed: nothing in the process can predict it
    used = set(range(len(sets))) if held else set()  # sets whose values a call has seen
    outputs: dict[int, Any] = {}  # of the calls whose batch has not finished
    state = {"checked": 0}

    def call(i: int):
        outputs[i] = model(*sets[i % len(sets)])
        return outputs[i]

    def before(i: int) -> None:
        k = i % len(sets)
        if k in used:  # this set's values were seen: new values, same buffers
            _refill(session, sets[k])
        used.add(k)

    def after(i: int) -> None:
        # whether this output is checked is decided only now, after the call returned
        progress(i + 1)
        out = outputs.pop(i)
        if _buffers(out) & {ptr for later in outputs.values() for ptr in _buffers(later)}:
            return  # a later call of the batch wrote into this output (reuse: the output-alias probe's finding)
        if check and state["checked"] < opts["checked_calls"] and chooser.random() < CHECK_PROBABILITY:
            state["checked"] += 1
            _check_timed_output(session, i, out, sets[i % len(sets)], findings, label)

    with torch.inference_mode():
        measurement = timing.measure(call, timer=timer, stop=_stop(opts), warmup_runs=opts["warmup_runs"],
                                     warmup_ms=opts["warmup_ms"], wall_clock_ms=session.guard.wall_ms,
                                     before=before, after=after)
    return Timed(measurement, state["checked"], held.host_overhead_ms if held else None,
                 held.hold_ms if held else 0.0)


def _buffers(output) -> set[int]:
    """Addresses of the tensors in an output (a tensor, or a tuple or list of them)."""
    items = output if isinstance(output, (tuple, list)) else (output,)
    return {t.untyped_storage().data_ptr() for t in items if isinstance(t, torch.Tensor) and t.numel()}


def _refill(session: Session, args: list) -> None:
    """New values into the same buffers, from a seed nothing in the process derives from the run's seed."""
    for buffer, fresh in zip(args, session.make_inputs(secrets.randbits(63))):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(fresh)


def _check_timed_output(session: Session, i: int, out, args: list, findings: list[Finding], label: str) -> None:
    if any(f.code == "timed-output-mismatch" for f in findings):
        return
    expected = session.reference(*clone_args(args))
    atol, rtol = compare.tolerance(expected, None, None)
    result = compare.compare(i, out, expected, None, atol, rtol)
    if not result.trial.passed:
        findings.append(Finding.of("timed-output-mismatch", f"timed call {i} ({label}): {result.trial.message}",
                                   stage=STAGE, call=i))


def input_sets(session: Session, count: int) -> list[list]:
    """Up to `count` input sets, fewer when they would not fit INPUT_SET_BUDGET_BYTES. Their seeds are
    fresh secrets, not derived from the run's seed: a candidate that found the run's seed in memory
    still cannot compute timed inputs ahead of time."""
    first = session.make_inputs(secrets.randbits(63))
    per_set = max(1, timing.tensor_bytes(first))
    count = max(1, min(count, INPUT_SET_BUDGET_BYTES // per_set))
    return [first] + [session.make_inputs(secrets.randbits(63)) for _ in range(1, count)]


def copy_bandwidth_gbps(session: Session) -> float:
    timer = _timer(session, {}, 1)
    nbytes = BANDWIDTH_BYTES[session.device.type]
    stop = timing.StopRule(min_runs=10, max_runs=200, min_time_ms=50, budget_ms=1000, target_rel_sem=0.01)
    return timing.measure_copy_bandwidth(session.device, nbytes, timer=timer, stop=stop,
                                         wall_clock_ms=session.guard.wall_ms)


def run_timing(session: Session, opts: dict[str, Any], *, baselines: list[str], bandwidth_gbps: float | None,
               progress=lambda message, done=None, total=None, throttle=False: None,
               ) -> tuple[dict[str, Any], list[Finding]]:
    """Time the candidate, then the requested baselines ("eager", "compile"), then the floor.
    `progress` (worker/server.py) is told each part and, throttled, the count of timed calls."""
    parts = 1 + len(baselines) + (bandwidth_gbps is None)

    def part(index: int, label: str):
        progress(label, index, parts)
        return lambda calls: progress(f"{label}: {calls} calls", index, parts, throttle=True)

    findings: list[Finding] = []
    started = session.guard.wall_ms()
    sets = input_sets(session, int(opts["input_sets"]))
    with torch.inference_mode():
        output_bytes = timing.tensor_bytes(session.reference(*clone_args(sets[0])))
    batch = max(1, min(len(sets), BATCH_OUTPUT_BUDGET_BYTES // max(1, output_bytes)))
    candidate = time_model(session, session.candidate, sets, opts, findings, "candidate", check=True, batch=batch,
                           progress=part(1, "candidate"))
    stats = candidate.measurement.stats
    if stats.rel_sem > NOISY_FACTOR * opts["target_rel_sem"]:
        findings.append(Finding.of("timing-noisy", f"relative SEM {100 * stats.rel_sem:.2g}% after "
                                   f"{stats.n} runs ({candidate.measurement.stop_reason})", stage=STAGE))
    timing_ms = session.guard.wall_ms() - started
    block: dict[str, Any] = {
        "method": method(session, opts), "input_sets": len(sets), "checked_outputs": candidate.checked,
        "candidate": stats.to_json(), "stop_reason": candidate.measurement.stop_reason,
        "host_overhead_ms": None if candidate.host_overhead_ms is None else round(candidate.host_overhead_ms, 6),
        "batch": batch if candidate.host_overhead_ms is not None else 1, "stream_hold_ms": round(candidate.hold_ms, 4),
        "samples_ms": [round(x, 6) for x in candidate.measurement.samples_ms[:1000]],
        "stop_rule": {k: opts[k] for k in ("min_runs", "max_runs", "min_time_ms", "budget_ms", "target_rel_sem")},
        "baselines": {},
    }
    started = session.guard.wall_ms()
    for index, name in enumerate(baselines, start=2):
        block["baselines"][name], note = _baseline(session, name, sets, opts, batch, part(index, f"baseline {name}"))
        if note:
            findings.append(Finding.of("baseline-unavailable", f"{name}: {note}", stage="baselines"))
    baselines_ms = session.guard.wall_ms() - started
    if bandwidth_gbps is None:
        part(parts, "copy bandwidth (for the memory floor)")
        bandwidth_gbps = copy_bandwidth_gbps(session)
    moved = timing.tensor_bytes(sets[0]) + output_bytes
    floor_ms = timing.floor_time_ms(moved, bandwidth_gbps)
    block["floor"] = {"bytes": moved, "bandwidth_gbps": round(bandwidth_gbps, 2), "floor_ms": floor_ms,
                      "percent_of_light": timing.percent_of_light(stats.median_ms, floor_ms)}
    if stats.median_ms < IMPOSSIBLE_FRACTION * floor_ms:
        findings.append(Finding.of("impossible-speed", f"median {stats.median_ms:.4g} ms is under "
                                   f"{IMPOSSIBLE_FRACTION:g}x the memory floor {floor_ms:.4g} ms ({moved} bytes at "
                                   f"{bandwidth_gbps:.0f} GB/s)", stage=STAGE))
    block["stage_ms"] = {"timing": round(timing_ms, 3), "baselines": round(baselines_ms, 3)}
    return block, findings


def _baseline(session: Session, name: str, sets: list[list], opts: dict[str, Any], batch: int, progress):
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
        timed = time_model(session, model, sets, opts, [], name, check=False, batch=batch, progress=progress)
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"
    return timed.measurement.stats.to_json(), None
