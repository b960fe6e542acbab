"""The timed side of the judge's measurement loop, the same in the referee (baselines) and the worker.

The loop itself (`timing.measure`: warm-up, stop rule, statistics) runs in the judge process; it asks
for one batch at a time (`TimeBatch`). Here a batch is run: calls back to back, a cache flush before
each outside its timed interval (CUDA events on a GPU, the host clock on a CPU), inputs refilled from
the seeds the judge chose, one device-wide synchronisation at the end, then the reply. The judge times
each request with its own clock, so what a batch claims can be checked against what it took.

On a GPU the device time outside the calls' events is the judge's alone: the flushes, the writes of new
input values and the batch's lead spin occupy every SM (proc/occupy.py), so work a call leaves on another
stream (or that waits there for its inputs) runs beside the calls themselves or delays the judge's work,
which the batch's wall time shows.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from kerneljudge import timing
from kerneljudge.proc import memory, occupy
from kerneljudge.proc.inputs import caller_views, generators_kept, make_inputs, refill, synchronize
from kerneljudge.proc.streamhold import StreamHold

INPUT_SET_BUDGET_BYTES = 2 << 30  # rotation sets beyond this are not allocated
INPUT_SET_FREE_SHARE = 8  # nor beyond this fraction of the free memory (fewer sets when memory is tight)
# A short spin queued on the device at the start of each batch: while it and the first flush run, the host
# records the first start event and launches the first call, so a call's host launch latency is not in its
# device time (the device would otherwise sit idle, waiting for the host, inside the first call's events). The
# same in both processes, so it is part of both sides of the cross-check.
LEAD_SPIN_MS = 0.05
LEAD_SPIN_CYCLES = 100_000  # the same where the occupying kernel is not loaded (torch's one-thread spin, at 2 GHz)
CALIBRATION_SPIN_CYCLES = 2_000_000  # timed once per TimedModel on a GPU: the device's spin cycles per ms


class TimedModel:
    """One model being timed: its input sets, its timer, and the outputs of the last batch."""

    def __init__(self, call: Callable[[list], Any], problem, device: torch.device, set_seeds: list[int],
                 method: str, clock_ns: Callable[[], int], after_call: Callable[[int, Any], None] | None = None):
        self.call, self.problem, self.device, self.after_call, self.method = call, problem, device, after_call, method
        first = make_inputs(problem, set_seeds[0], device)
        per_set = max(1, timing.tensor_bytes(first))
        budget = min(INPUT_SET_BUDGET_BYTES, memory.device_free_bytes(device) // INPUT_SET_FREE_SHARE)
        count = max(1, min(len(set_seeds), budget // per_set))
        self.sets = [first] + [make_inputs(problem, s, device) for s in set_seeds[1:count]]
        self.views = [caller_views(inputs) for inputs in self.sets]  # each set's memory as the calls left it
        self.outputs: dict[int, Any] = {}
        self._occupier = occupy.Occupier.for_device(device) if device.type == "cuda" else None
        self._copy = self._occupier.copy if self._occupier is not None else None  # writes new values (None: torch's)
        if device.type == "cuda":
            self._flusher = timing.L2Flusher.for_cuda_device(device, write=self._occupier and self._occupier.fill)
        if method == "cuda-graph":
            self.timer = timing.cuda_graph_timer(device, self._flush, input_period=len(self.sets))
        elif device.type == "cuda":
            self.timer = timing.cuda_event_timer(device, self._flush, batch=len(self.sets))
        else:
            self.timer = timing.HostTimer(clock_ns, flush=timing.CpuCacheFlusher())
        self._pending_refills: dict[int, int] = {}
        self._watched_values: tuple[int, list] | None = None  # a watched call's new values, written after its flush
        self._spin_cycles_per_ms = 0.0  # GPU: measured at the first watched batch (the worker's), with the hold
        self._hold: StreamHold | None = None
        self._output_bytes: int | None = None

    def redraw(self, set_seeds: list[int]) -> None:
        """New values in the input sets, drawn from `set_seeds` (same buffers): the same model timed again
        (the reference: eager, then the cross-check's rounds) needs no new sets, flusher or events."""
        self.outputs = {}
        for buffers, seed in zip(self.sets, set_seeds):
            refill(buffers, make_inputs(self.problem, seed, self.device))

    def describe(self, call: bool) -> dict[str, Any]:
        """How many input sets fit; with `call`, one untimed call (the first describe's only) for the bytes it
        reads and writes."""
        flush = {} if self.device.type != "cuda" else {"flush": "exclusive" if self._occupier else "shared"}
        if not call:
            return {"input_sets": len(self.sets), **flush}
        if self._output_bytes is None:
            with torch.inference_mode():
                out = self.call(self.sets[0])
            synchronize(self.device)
            self._output_bytes = timing.tensor_bytes(out)
        return {"input_sets": len(self.sets), "input_bytes": timing.tensor_bytes(self.sets[0]),
                "output_bytes": self._output_bytes, **flush}

    def _one(self, i: int):
        try:
            out = self.call(self.sets[i % len(self.sets)])
        finally:
            if self._hold is not None:
                self._hold.lift()  # a watched call has returned: its inputs may be written now
        if self.after_call is not None:  # the worker's watch (worker/watch.py), before the candidate runs again
            self.after_call(i, out)
        self.outputs[i] = out
        return out

    def _new_values(self, i: int) -> list | None:
        """Call i's new input values, drawn on the device from its seed (None where it has none)."""
        seed = self._pending_refills.pop(i, None)
        if seed is None:
            return None
        with generators_kept(self.device):  # the refill's seeding is not the candidate's to see
            return make_inputs(self.problem, seed, self.device)

    def _before(self, i: int) -> None:
        values = self._new_values(i)
        if values is not None:
            refill(self.sets[i % len(self.sets)], values)

    def _refill_batch(self, indices: list[int]) -> None:
        """The batch's new values drawn, then written (GPU) by the occupying copies back to back: work of the
        candidate's that waits on the device for a set's new values finds the device occupied until the last
        set is written (or delays a copy, in the batch's wall time)."""
        drawn = [(i, self._new_values(i)) for i in indices]
        for i, values in drawn:
            if values is not None:
                refill(self.sets[i % len(self.sets)], values, self._copy)

    def _flush(self) -> None:
        """The L2 flush before a call (GPU), then a watched call's new values written into its set: right before
        its start event, so work that waits on the device for them can only run inside the call's events (or
        delay the flush, which it cannot share the device with). Its inputs are then partly in the L2, one reason
        why the judge leaves a watched batch's times out of the figures (stages/measure.py)."""
        self._flusher()
        if self._watched_values is not None:
            i, values = self._watched_values
            self._watched_values = None
            refill(self.sets[i % len(self.sets)], values, self._copy)

    def _lead_spin(self) -> None:
        if self._occupier is not None:
            self._occupier.spin_ms(LEAD_SPIN_MS)
        else:
            torch.cuda._sleep(LEAD_SPIN_CYCLES)

    def _gated(self, watched: set[int], delay_ms: float) -> Callable[[int], None]:
        """Before a watched call (GPU): the caller's stream is held until the call has returned on the host
        (proc/streamhold.py: however long the host takes to launch it), then waits `delay_ms` more on the
        device (for work launched on other streams to run: about the reference's time); the call's new input
        values are drawn then and written after its flush (`_flush`). Work the call puts on another stream
        without waiting for the caller's stream reads the set's old values: its output is then wrong, and the
        judge checks every watched call's output."""
        if not self._spin_cycles_per_ms:
            self._spin_cycles_per_ms = _spin_cycles_per_ms(self.device)
            self._hold = StreamHold.for_device(self.device, self._spin_cycles_per_ms)
        delay_cycles = int(delay_ms * self._spin_cycles_per_ms)

        def before(i: int) -> None:
            if i in watched:
                if self._hold is not None:
                    self._hold.hold()
                torch.cuda._sleep(delay_cycles)
                self._watched_values = (i, self._new_values(i))
        return before

    def batch(self, first: int, count: int, refills: dict[int, int], watched: set[int] = frozenset(),
              watch_delay_ms: float = 0.0) -> list[float]:
        """Time calls first..first+count-1; keep their outputs until the next batch. On a GPU the batch's
        refills are done before its first call (each set is used once per batch), so the host has nothing
        to do between calls but launch them (`_refill_batch`); a watched call's refill is done right before
        it (`_gated`, `_flush`)."""
        self.outputs = {}
        self._pending_refills = dict(refills)
        calls = [timing.IterationCall(self._one, first + k) for k in range(count)]
        on_gpu = self.device.type == "cuda"
        watched = set(watched) & set(refills) if on_gpu else set()
        gate = self._gated(watched, watch_delay_ms) if watched else None
        with torch.inference_mode():
            samples = []
            step = getattr(self.timer, "batch", 1)
            for start in range(0, len(calls), step):
                group = calls[start:start + step]
                if on_gpu:
                    self._refill_batch([call.index for call in group if call.index not in watched])
                    self._lead_spin()
                samples += timing.time_calls(self.timer, group, gate if on_gpu else self._before)
        synchronize(self.device)
        return [float(s) for s in samples]


def _spin_cycles_per_ms(device: torch.device) -> float:
    """How many cycles of `torch.cuda._sleep` the device spins per millisecond (its clock, as it runs now).
    One short spin first: the first launch loads the kernel's module while the events wait (seen on the
    H200: 7.8 ms for a 1 ms spin, so every wait derived from it was 8 times too short)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.device(device):
        torch.cuda._sleep(1000)
        torch.cuda.synchronize(device)
        start.record()
        torch.cuda._sleep(CALIBRATION_SPIN_CYCLES)
        end.record()
        end.synchronize()
    return CALIBRATION_SPIN_CYCLES / max(start.elapsed_time(end), 1e-3)
