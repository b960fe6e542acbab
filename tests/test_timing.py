"""CPU-only tests for kerneljudge.timing.

Everything that is about *logic* (statistics, stop rule, loop bookkeeping,
what is inside the timed interval) is tested with deterministic fake clocks,
fake events and fake graph capture, so no test sleeps or depends on machine
speed.  One test does a real small HostTimer run and checks invariants only.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from kerneljudge import timing as T


# ---------------------------------------------------------------- fakes


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.now_ns = 0

    def ns(self) -> int:
        return self.now_ns

    def ms(self) -> float:
        return self.now_ns / 1e6

    def advance_ms(self, ms: float) -> None:
        self.now_ns += round(ms * 1e6)


class ScriptedTimer:
    """CallTimer that runs fn, then pretends it took the next scripted duration.

    ``overhead_ms`` is extra wall time per call that is *not* part of the
    sample (flush, sync, Python), to check that the budget counts wall time.
    """

    def __init__(self, clock: FakeClock, durations_ms, overhead_ms: float = 0.0) -> None:
        self.clock = clock
        self.durations = list(durations_ms)
        self.overhead_ms = overhead_ms
        self.calls = 0

    def time_call(self, fn) -> float:
        fn()
        d = self.durations[self.calls % len(self.durations)]
        self.calls += 1
        if math.isfinite(d) and d >= 0:  # bad durations are returned, not applied
            self.clock.advance_ms(d + self.overhead_ms)
        return d


class FakeEvent:
    def __init__(self, clock: FakeClock, log: list, name: str) -> None:
        self.clock, self.log, self.name = clock, log, name
        self.t_ms: float | None = None

    def record(self) -> None:
        self.t_ms = self.clock.ms()
        self.log.append(f"{self.name}.record")

    def synchronize(self) -> None:
        self.log.append(f"{self.name}.synchronize")

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.t_ms is not None and end.t_ms is not None, "elapsed_time before record"
        return end.t_ms - self.t_ms


def fake_event_factory(clock: FakeClock, log: list):
    names = iter(["start", "end"] + [f"{kind}{k}" for k in range(1, 8) for kind in ("start", "end")])
    made = []

    def factory() -> FakeEvent:
        ev = FakeEvent(clock, log, next(names))
        made.append(ev)
        return ev

    return factory, made


# ---------------------------------------------------------------- Stats


def test_stats_hand_computed_five_values_unsorted():
    s = T.Stats.from_samples([5.0, 1.0, 4.0, 2.0, 3.0])
    assert s.n == 5
    assert s.mean_ms == pytest.approx(3.0)
    assert s.median_ms == pytest.approx(3.0)
    # sample std (n-1): sum sq dev = 4+1+0+1+4 = 10, /4 = 2.5
    assert s.std_ms == pytest.approx(math.sqrt(2.5))
    assert s.sem_ms == pytest.approx(math.sqrt(2.5) / math.sqrt(5))
    assert (s.min_ms, s.max_ms) == (1.0, 5.0)
    # linear interpolation: h = 4 * 0.1 = 0.4 -> 1 + 0.4*(2-1); h = 3.6 -> 4 + 0.6*(5-4)
    assert s.p10_ms == pytest.approx(1.4)
    assert s.p90_ms == pytest.approx(4.6)
    assert s.rel_sem == pytest.approx(math.sqrt(0.5) / 3.0)


def test_stats_two_values_interpolation_and_even_median():
    s = T.Stats.from_samples([20.0, 10.0])
    assert s.median_ms == pytest.approx(15.0)
    assert s.p10_ms == pytest.approx(11.0)
    assert s.p90_ms == pytest.approx(19.0)
    assert s.std_ms == pytest.approx(math.sqrt(50.0))  # n-1 = 1, not n = 2 (which gives 5)
    assert s.sem_ms == pytest.approx(5.0)


def test_stats_single_sample_has_unknown_spread():
    s = T.Stats.from_samples([7.5])
    assert s.n == 1
    assert s.mean_ms == s.median_ms == s.min_ms == s.max_ms == s.p10_ms == s.p90_ms == 7.5
    assert math.isnan(s.std_ms) and math.isnan(s.sem_ms)
    assert s.rel_sem == math.inf  # never counts as converged
    j = s.to_json()
    assert j["std_ms"] is None and j["sem_ms"] is None and j["rel_sem"] is None
    json.dumps(j, allow_nan=False)


def test_stats_empty_and_constant():
    e = T.Stats.from_samples([])
    assert e.n == 0 and math.isnan(e.mean_ms) and math.isnan(e.p90_ms)
    assert e.rel_sem == math.inf
    json.dumps(e.to_json(), allow_nan=False)
    c = T.Stats.from_samples([2.0] * 4)
    assert c.std_ms == 0.0 and c.rel_sem == 0.0
    z = T.Stats.from_samples([0.0, 0.0])
    assert z.rel_sem == 0.0


def test_stats_is_frozen():
    s = T.Stats.from_samples([1.0, 2.0])
    with pytest.raises(Exception):
        s.mean_ms = 3.0  # type: ignore[misc]


# ---------------------------------------------------------------- StopRule


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"min_runs": 0}, "min_runs"),
        ({"min_runs": 2.5}, "min_runs"),
        ({"min_runs": 20, "max_runs": 10}, "max_runs"),
        ({"min_time_ms": -1}, "min_time_ms"),
        ({"budget_ms": 0}, "budget_ms"),
        ({"budget_ms": math.inf}, "budget_ms"),
        ({"target_rel_sem": -0.1}, "target_rel_sem"),
        ({"max_runs": True}, "max_runs"),
    ],
)
def test_stop_rule_validation_names_the_field(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        T.StopRule(**kwargs)


def test_should_stop_each_reason_directly():
    rule = T.StopRule(min_runs=3, max_runs=6, min_time_ms=10, budget_ms=100, target_rel_sem=0.01)
    assert rule.should_stop([5.0, 5.0, 5.0], 1.0) == "converged"
    assert rule.should_stop([5.0, 5.0], 1.0) is None  # below min_runs
    assert rule.should_stop([1.0, 1.0, 1.0], 1.0) is None  # below min_time
    noisy = [1.0, 9.0, 1.0, 9.0, 1.0]
    assert rule.should_stop(noisy, 1.0) is None
    assert rule.should_stop(noisy + [9.0], 1.0) == "max-runs"
    assert rule.should_stop(noisy, 100.0) == "budget"
    assert rule.should_stop(noisy, 99.999) is None
    # target 0 disables convergence entirely
    no_conv = T.StopRule(min_runs=1, max_runs=4, min_time_ms=0, target_rel_sem=0)
    assert no_conv.should_stop([5.0, 5.0, 5.0], 0.0) is None


def _run(durations, stop, *, warmup=0, overhead_ms=0.0, fn=None):
    clock = FakeClock()
    timer = ScriptedTimer(clock, durations, overhead_ms)
    m = T.measure(fn or (lambda i: None), timer=timer, stop=stop, warmup_runs=warmup, wall_clock_ms=clock.ms)
    return m, timer, clock


def test_measure_converges_at_min_runs_when_stable():
    m, _, _ = _run([10.0], T.StopRule())  # defaults: 10 runs, 100 ms
    assert m.stop_reason == "converged"
    assert len(m.samples_ms) == 10
    assert m.stats.median_ms == 10.0


def test_measure_respects_min_runs_even_if_converged_earlier():
    m, _, _ = _run([50.0], T.StopRule(min_runs=25, min_time_ms=0))
    assert m.stop_reason == "converged" and len(m.samples_ms) == 25


def test_measure_respects_min_time():
    # 1 ms per call is converged from the second sample on, but 100 ms of
    # measured time is required -> exactly 100 samples.
    m, _, _ = _run([1.0], T.StopRule(min_runs=10, min_time_ms=100))
    assert m.stop_reason == "converged"
    assert len(m.samples_ms) == 100
    assert math.fsum(m.samples_ms) == pytest.approx(100.0)


def test_measure_max_runs_when_noise_never_settles():
    m, _, _ = _run([1.0, 3.0], T.StopRule(min_runs=5, max_runs=37, min_time_ms=0, budget_ms=1e9))
    assert m.stop_reason == "max-runs"
    assert len(m.samples_ms) == 37


def test_measure_budget_is_wall_time_including_overhead_and_is_a_hard_cap():
    # samples 100,300,100,300..., plus 50 ms of per-call overhead:
    # wall after each call: 150, 500, 650, 1000 -> stop at 4 samples,
    # although min_runs=10 is not reached and the sample sum is only 800.
    stop = T.StopRule(min_runs=10, max_runs=1000, min_time_ms=0, budget_ms=1000)
    m, _, _ = _run([100.0, 300.0], stop, overhead_ms=50.0)
    assert m.stop_reason == "budget"
    assert m.samples_ms == (100.0, 300.0, 100.0, 300.0)
    assert m.loop_wall_ms == pytest.approx(1000.0)


def test_measure_warmup_is_not_recorded_nor_charged_to_budget():
    seen = []
    stop = T.StopRule(min_runs=4, max_runs=4, min_time_ms=0, budget_ms=1e6, target_rel_sem=0)
    # first 3 calls are warm-up and "slow" (1000 ms); measured ones are 2 ms.
    clock = FakeClock()
    timer = ScriptedTimer(clock, [1000.0, 1000.0, 1000.0, 2.0, 2.0, 2.0, 2.0])
    m = T.measure(seen.append, timer=timer, stop=stop, warmup_runs=3, wall_clock_ms=clock.ms)
    assert m.samples_ms == (2.0, 2.0, 2.0, 2.0)
    assert m.warmup_runs == 3
    assert m.warmup_wall_ms == pytest.approx(3000.0)
    assert m.loop_wall_ms == pytest.approx(8.0)
    assert seen == [0, 1, 2, 0, 1, 2, 3]


def test_measure_passes_iteration_index_for_input_rotation():
    inputs = ["a", "b", "c"]
    used = []
    stop = T.StopRule(min_runs=7, max_runs=7, min_time_ms=0, target_rel_sem=0)
    m, timer, _ = _run([1.0], stop, warmup=2, fn=lambda i: used.append(inputs[i % len(inputs)]))
    assert used[:2] == ["a", "b"]  # warm-up
    assert used[2:] == ["a", "b", "c", "a", "b", "c", "a"]
    assert len(m.samples_ms) == 7 and timer.calls == 9


def test_a_call_the_timer_ran_as_a_check_is_not_a_sample():
    """A timer answers None for a call it ran as a check (the judge's watched calls on a GPU): the loop goes on to
    the next index, and the stop rule counts samples only."""
    clock, seen = FakeClock(), []

    class CheckingTimer:
        def time_call(self, fn):
            fn()
            clock.advance_ms(1.0)
            return None if len(seen) % 3 == 0 else 2.0  # every third call

    stop = T.StopRule(min_runs=6, max_runs=6, min_time_ms=0, target_rel_sem=0)
    m = T.measure(seen.append, timer=CheckingTimer(), stop=stop, warmup_runs=0, wall_clock_ms=clock.ms)
    assert m.samples_ms == (2.0,) * 6 and seen == list(range(8)) and m.stop_reason == "max-runs"
    seen.clear()
    seen += ["so that", "the first call is a check"]
    spent = T.StopRule(min_runs=6, max_runs=6, min_time_ms=0, budget_ms=0.5)
    m = T.measure(seen.append, timer=CheckingTimer(), stop=spent, warmup_runs=0, wall_clock_ms=clock.ms)
    assert m.samples_ms == (2.0,) and m.stop_reason == "budget"  # the budget spent at the check: one sample more


def test_measure_validation_and_bad_timer_output():
    clock = FakeClock()
    with pytest.raises(ValueError, match="warmup_runs"):
        T.measure(lambda i: None, timer=ScriptedTimer(clock, [1.0]), stop=T.StopRule(), warmup_runs=-1, wall_clock_ms=clock.ms)
    with pytest.raises(ValueError, match="StopRule"):
        T.measure(lambda i: None, timer=ScriptedTimer(clock, [1.0]), stop=None, warmup_runs=0, wall_clock_ms=clock.ms)  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="invalid duration"):
        T.measure(lambda i: None, timer=ScriptedTimer(clock, [math.nan]), stop=T.StopRule(), warmup_runs=0, wall_clock_ms=clock.ms)
    with pytest.raises(RuntimeError, match="invalid duration"):
        T.measure(lambda i: None, timer=ScriptedTimer(clock, [-1.0]), stop=T.StopRule(), warmup_runs=0, wall_clock_ms=clock.ms)


def test_measurement_to_json_is_strict_json():
    m, _, _ = _run([1.0, 2.0], T.StopRule(min_runs=3, max_runs=3, min_time_ms=0, target_rel_sem=0))
    j = json.loads(json.dumps(m.to_json(), allow_nan=False))
    assert j["samples_ms"] == [1.0, 2.0, 1.0]
    assert j["stop_reason"] == "max-runs"
    assert j["stats"]["n"] == 3 and j["stats"]["median_ms"] == 1.0


# ---------------------------------------------------------------- timers


def test_host_timer_excludes_flush_and_leading_sync():
    clock, log = FakeClock(), []

    def flush():
        log.append("flush")
        clock.advance_ms(50.0)

    def sync():
        log.append("sync")
        clock.advance_ms(0.5)

    def fn():
        log.append("fn")
        clock.advance_ms(2.0)

    timer = T.HostTimer(clock.ns, sync=sync, flush=flush)
    assert isinstance(timer, T.CallTimer)
    # interval = fn (2.0) + trailing sync (0.5); flush and leading sync excluded
    assert timer.time_call(fn) == pytest.approx(2.5)
    assert log == ["flush", "sync", "fn", "sync"]


def test_host_timer_without_flush_or_sync():
    clock = FakeClock()
    timer = T.HostTimer(clock.ns)
    assert timer.time_call(lambda: clock.advance_ms(3.25)) == pytest.approx(3.25)


def test_cuda_event_timer_with_fake_events():
    clock, log = FakeClock(), []
    factory, made = fake_event_factory(clock, log)

    def flush():
        log.append("flush")
        clock.advance_ms(40.0)

    def fn():
        log.append("fn")
        clock.advance_ms(3.0)

    timer = T.CudaEventTimer(factory, flush)
    assert timer.time_call(fn) == pytest.approx(3.0)
    assert log == ["flush", "start.record", "fn", "end.record", "end.synchronize"]
    assert timer.time_call(fn) == pytest.approx(3.0)
    assert len(made) == 2  # events are created once and reused

    clock2, log2 = FakeClock(), []
    f2, _ = fake_event_factory(clock2, log2)
    per_call = T.CudaEventTimer(f2, calls_per_fn=4)
    assert per_call.time_call(lambda: clock2.advance_ms(10.0)) == pytest.approx(2.5)
    with pytest.raises(ValueError, match="calls_per_fn"):
        T.CudaEventTimer(f2, calls_per_fn=0)


def test_warmup_lasts_a_minimum_time_as_well_as_a_count():
    clock = FakeClock()
    seen = []

    def fn(i):
        seen.append(i)
        clock.advance_ms(1.0)

    timer = T.HostTimer(clock.ns)
    m = T.measure(fn, timer=timer, stop=T.StopRule(min_runs=2, max_runs=2, min_time_ms=0, target_rel_sem=0),
                  warmup_runs=2, warmup_ms=5.0, wall_clock_ms=clock.ms)
    assert m.warmup_runs == 5  # 5 calls of 1 ms reach the 5 ms minimum; 2 would have met the count
    assert len(m.samples_ms) == 2


def test_batched_event_timer_enqueues_calls_back_to_back_and_waits_once():
    clock, log = FakeClock(), []
    factory, made = fake_event_factory(clock, log)
    timer = T.CudaEventTimer(factory, lambda: log.append("flush"), batch=3)
    calls = [T.IterationCall(lambda i: (log.append(f"fn{i}"), clock.advance_ms(i + 1.0)), i) for i in range(3)]
    assert timer.time_calls(calls, before=lambda i: log.append(f"before{i}")) == pytest.approx([1.0, 2.0, 3.0])
    assert log == ["before0", "flush", "start.record", "fn0", "end.record",
                   "before1", "flush", "start1.record", "fn1", "end1.record",
                   "before2", "flush", "start2.record", "fn2", "end2.record", "end2.synchronize"]  # one wait
    assert len(made) == 6
    log.clear()
    assert timer.time_calls(calls[:1]) == pytest.approx([1.0])  # a shorter batch waits on its own last event
    assert log[-1] == "end.synchronize"
    with pytest.raises(ValueError, match="1 to 3 calls"):
        timer.time_calls(calls + calls)


def test_measure_in_batches_runs_hooks_outside_the_intervals_and_cuts_at_max_runs():
    clock, log = FakeClock(), []
    factory, _ = fake_event_factory(clock, log)
    timer = T.CudaEventTimer(factory, batch=4)
    stop = T.StopRule(min_runs=6, max_runs=6, min_time_ms=0, budget_ms=1e6, target_rel_sem=0)
    events = []

    def fn(i):
        events.append(("call", i))
        clock.advance_ms(1.0 + i)

    m = T.measure(fn, timer=timer, stop=stop, warmup_runs=1, wall_clock_ms=clock.ms,
                  before=lambda i: events.append(("before", i)), after=lambda i: events.append(("after", i)))
    assert m.warmup_runs == 4  # a whole batch
    assert m.samples_ms == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)  # 8 calls ran, cut at max_runs
    timed = events[12:]  # after the warm-up batch's 12 events
    assert timed[:12] == [("before", 0), ("call", 0), ("before", 1), ("call", 1), ("before", 2), ("call", 2),
                          ("before", 3), ("call", 3), ("after", 0), ("after", 1), ("after", 2), ("after", 3)]


def test_cuda_event_timer_drives_measure_loop():
    clock, log = FakeClock(), []
    factory, _ = fake_event_factory(clock, log)
    durations = iter([9.0, 9.0] + [1.0, 2.0, 3.0, 4.0])  # 2 warm-up, 4 measured
    timer = T.CudaEventTimer(factory, flush=lambda: clock.advance_ms(100.0))
    stop = T.StopRule(min_runs=4, max_runs=4, min_time_ms=0, budget_ms=1e6, target_rel_sem=0)
    m = T.measure(lambda i: clock.advance_ms(next(durations)), timer=timer, stop=stop, warmup_runs=2, wall_clock_ms=clock.ms)
    assert m.samples_ms == (1.0, 2.0, 3.0, 4.0)
    assert m.stats.median_ms == pytest.approx(2.5)
    assert m.loop_wall_ms == pytest.approx(4 * 100.0 + 10.0)  # wall includes flushes


def test_cuda_graph_timer_captures_once_per_input_and_reports_per_call_time():
    clock, log = FakeClock(), []
    factory, _ = fake_event_factory(clock, log)
    captured_bodies = []
    replay_calls = []

    def capture(body):
        captured_bodies.append(body)

        def replay():
            replay_calls.append(len(captured_bodies))
            body()

        return replay

    flushes = []
    timer = T.CudaGraphTimer(
        factory,
        capture,
        flush=lambda: (flushes.append(1), clock.advance_ms(100.0)),
        input_period=3,
        calls_per_replay=4,
        replays=2,
    )
    seen = []

    def fn_for_iteration(i):
        seen.append(i)
        clock.advance_ms(0.5)

    stop = T.StopRule(min_runs=12, max_runs=12, min_time_ms=0, budget_ms=1e9, target_rel_sem=0)
    m = T.measure(fn_for_iteration, timer=timer, stop=stop, warmup_runs=3, wall_clock_ms=clock.ms)
    assert timer.captures == 3  # one graph per input slot, reused afterwards
    assert set(seen) == {0, 1, 2}  # replays re-run the captured inputs
    assert m.samples_ms == tuple([0.5] * 12)  # (4 calls * 2 replays * 0.5) / 8, flush excluded
    # each capture is followed by one untimed replay (upload) -> 3 extra replays
    assert len(replay_calls) == 3 + (3 + 12) * 2
    assert len(flushes) == 3 + 12  # one flush per timed group


def test_cuda_graph_timer_keys_plain_callables_by_identity_and_validates():
    clock, log = FakeClock(), []
    factory, _ = fake_event_factory(clock, log)
    timer = T.CudaGraphTimer(factory, lambda body: body, input_period=1, calls_per_replay=2, replays=1)
    f = lambda: clock.advance_ms(1.0)  # noqa: E731
    g = lambda: clock.advance_ms(3.0)  # noqa: E731
    assert timer.time_call(f) == pytest.approx(1.0)
    assert timer.time_call(f) == pytest.approx(1.0)
    assert timer.captures == 1
    assert timer.time_call(g) == pytest.approx(3.0)
    assert timer.captures == 2
    with pytest.raises(ValueError, match="input_period"):
        T.CudaGraphTimer(factory, lambda b: b, input_period=0)


# ---------------------------------------------------------------- flushers


def test_l2_flusher_on_cpu_buffer_resets_and_changes_values():
    torch = pytest.importorskip("torch")
    resets = []
    fl = T.L2Flusher("cpu", l2_cache_bytes=1000, reset_persisting_l2=lambda: resets.append(1))
    assert fl.buffer_bytes >= 2000
    fl()
    first = fl.buffer.clone()
    fl()
    assert not torch.equal(first, fl.buffer)  # the write really happens, with a new value
    assert bool((fl.buffer == fl.buffer[0]).all())
    assert len(resets) == 2 and fl.flushes == 2
    with pytest.raises(ValueError, match="multiple"):
        T.L2Flusher("cpu", l2_cache_bytes=1000, multiple=1)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="l2_cache_bytes"):
            T.L2Flusher("cpu")


def test_cpu_cache_flusher_writes_whole_buffer():
    fl = T.CpuCacheFlusher(cache_bytes=4096)
    assert fl.buffer_bytes == 8192
    fl()
    assert fl.buffer[0] == fl.buffer[8191] == 1
    fl()
    assert fl.buffer[0] == fl.buffer[4096] == fl.buffer[8191] == 2
    with pytest.raises(ValueError, match="multiple"):
        T.CpuCacheFlusher(cache_bytes=4096, multiple=1)


def test_last_level_cache_bytes_reads_sysfs_layout(tmp_path):
    for idx, size in [("index0", "48K"), ("index2", "1024K"), ("index3", "32768K")]:
        (tmp_path / idx).mkdir()
        (tmp_path / idx / "size").write_text(size + "\n")
    assert T.last_level_cache_bytes(str(tmp_path)) == 32 * 1024 * 1024
    assert T.last_level_cache_bytes(str(tmp_path / "missing"), fallback_bytes=123) == 123
    assert T.flush._parse_cache_size("2M") == 2 << 20


# ---------------------------------------------------------------- roofline


def test_tensor_bytes_nested_and_views():
    torch = pytest.importorskip("torch")
    a = torch.zeros(10, dtype=torch.float32)  # 40
    b = torch.zeros(5, dtype=torch.int64)  # 40
    c = torch.zeros(3, dtype=torch.bfloat16)  # 6
    assert T.tensor_bytes([a, (b, {"k": c}), 7, "x", None]) == 86
    assert T.tensor_bytes(a[::2]) == 20  # logical bytes of the view
    assert T.tensor_bytes(42) == 0


def test_copy_bandwidth_with_fake_timer_gives_known_gbps():
    pytest.importorskip("torch")
    outputs = []

    class OneMsTimer:
        def time_call(self, fn):
            outputs.append(fn())
            return 1.0

    clock = FakeClock()
    gbps = T.measure_copy_bandwidth(
        "cpu",
        1_000_000,
        timer=OneMsTimer(),
        stop=T.StopRule(min_runs=3, min_time_ms=0),
        warmup_runs=1,
        wall_clock_ms=clock.ms,
    )
    # 1e6 bytes read + 1e6 written in 1 ms = 2e9 B/s = 2.0 GB/s
    assert gbps == pytest.approx(2.0)
    assert len(outputs) == 4
    assert outputs[-1].numel() == 1_000_000 and bool((outputs[-1] == 1).all())  # the copy ran
    with pytest.raises(ValueError, match="nbytes"):
        T.measure_copy_bandwidth("cpu", 0, timer=OneMsTimer(), wall_clock_ms=clock.ms)


def test_floor_time_and_percent_of_light():
    assert T.floor_time_ms(2e9, 2000.0) == pytest.approx(1.0)
    assert T.floor_time_ms(0, 1.0) == 0.0
    assert T.percent_of_light(2.0, 1.0) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="bandwidth_gbps"):
        T.floor_time_ms(1.0, 0.0)
    with pytest.raises(ValueError, match="measured_ms"):
        T.percent_of_light(0.0, 1.0)


# ---------------------------------------------------------------- real clocks


def test_real_host_timer_on_tiny_torch_op_invariants_only():
    torch = pytest.importorskip("torch")
    xs = [torch.randn(256) for _ in range(3)]
    flusher = T.CpuCacheFlusher(cache_bytes=64 * 1024)
    timer = T.HostTimer(time.perf_counter_ns, flush=flusher)
    stop = T.StopRule(min_runs=5, max_runs=200, min_time_ms=0, budget_ms=500)
    m = T.measure(lambda i: torch.add(xs[i % 3], 1.0), timer=timer, stop=stop, warmup_runs=2, wall_clock_ms=T.perf_counter_ms)
    n = len(m.samples_ms)
    assert 1 <= n <= 200
    assert n >= 5 or m.stop_reason == "budget"  # min_runs, unless a busy machine used the budget first
    assert m.stop_reason in {"converged", "max-runs", "budget"}
    assert all(s > 0 for s in m.samples_ms)
    s = m.stats
    assert s.n == n
    assert s.min_ms <= s.p10_ms <= s.median_ms <= s.p90_ms <= s.max_ms
    assert s.min_ms <= s.mean_ms <= s.max_ms
    assert m.loop_wall_ms >= math.fsum(m.samples_ms)
    assert flusher.flushes == 2 + n


def test_module_imports_without_torch():
    code = "import sys; sys.modules['torch'] = None; import kerneljudge.timing as t; print(t.Stats.from_samples([1, 2]).median_ms)"
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1.5"
