"""The timed side of the judge's measurement loop, the same in the referee (baselines) and the worker.

The loop itself (`timing.measure`: warm-up, stop rule, statistics) runs in the judge process; it asks
for one batch at a time (`TimeBatch`). Here a batch is run: calls back to back, a cache flush before
each outside its timed interval (CUDA events on a GPU, the host clock on a CPU), inputs refilled from
the seeds the judge chose, one device-wide synchronisation at the end, then the reply. The judge times
each request with its own clock, so what a batch claims can be checked against what it took.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from kerneljudge import timing
from kerneljudge.proc import memory
from kerneljudge.proc.inputs import make_inputs, synchronize

INPUT_SET_BUDGET_BYTES = 2 << 30  # rotation sets beyond this are not allocated
INPUT_SET_FREE_SHARE = 8  # nor beyond this fraction of the free memory (fewer sets when memory is tight)
# A short spin queued on the device at the start of each batch (about 0.05 ms at 2 GHz): while it and the
# first flush run, the host records the first start event and launches the first call, so a call's host
# launch latency is not in its device time (the device would otherwise sit idle, waiting for the host, inside
# the first call's events). The same in both processes, so it is part of both sides of the cross-check.
LEAD_SPIN_CYCLES = 100_000


class TimedModel:
    """One model being timed: its input sets, its timer, and the outputs of the last batch."""

    def __init__(self, call: Callable[[list], Any], problem, device: torch.device, set_seeds: list[int],
                 method: str, clock_ns: Callable[[], int], after_call: Callable[[int, Any], None] | None = None):
        self.call, self.problem, self.device, self.after_call = call, problem, device, after_call
        first = make_inputs(problem, set_seeds[0], device)
        per_set = max(1, timing.tensor_bytes(first))
        budget = min(INPUT_SET_BUDGET_BYTES, memory.device_free_bytes(device) // INPUT_SET_FREE_SHARE)
        count = max(1, min(len(set_seeds), budget // per_set))
        self.sets = [first] + [make_inputs(problem, s, device) for s in set_seeds[1:count]]
        self.outputs: dict[int, Any] = {}
        if method == "cuda-graph":
            self.timer = timing.cuda_graph_timer(device, timing.L2Flusher.for_cuda_device(device),
                                                 input_period=len(self.sets))
        elif device.type == "cuda":
            self.timer = timing.cuda_event_timer(device, timing.L2Flusher.for_cuda_device(device),
                                                 batch=len(self.sets))
        else:
            self.timer = timing.HostTimer(clock_ns, flush=timing.CpuCacheFlusher())
        self._pending_refills: dict[int, int] = {}

    def describe(self, call: bool) -> dict[str, Any]:
        """How many input sets fit; with `call`, one untimed call for the bytes it reads and writes."""
        if not call:
            return {"input_sets": len(self.sets)}
        with torch.inference_mode():
            out = self.call(self.sets[0])
        synchronize(self.device)
        return {"input_sets": len(self.sets), "input_bytes": timing.tensor_bytes(self.sets[0]),
                "output_bytes": timing.tensor_bytes(out)}

    def _one(self, i: int):
        out = self.call(self.sets[i % len(self.sets)])
        if self.after_call is not None:  # the worker's watch (worker/watch.py), before the candidate runs again
            self.after_call(i, out)
        self.outputs[i] = out
        return out

    def _before(self, i: int) -> None:
        seed = self._pending_refills.pop(i, None)
        if seed is not None:  # new values, same buffers: memos by address or by sampled content stop paying
            for buffer, fresh in zip(self.sets[i % len(self.sets)], make_inputs(self.problem, seed, self.device)):
                if isinstance(buffer, torch.Tensor):
                    buffer.copy_(fresh)

    def batch(self, first: int, count: int, refills: dict[int, int]) -> list[float]:
        """Time calls first..first+count-1; keep their outputs until the next batch. On a GPU the batch's
        refills are done before its first call (each set is used once per batch), so the host has nothing
        to do between calls but launch them."""
        self.outputs = {}
        self._pending_refills = dict(refills)
        calls = [timing.IterationCall(self._one, first + k) for k in range(count)]
        on_gpu = self.device.type == "cuda"
        with torch.inference_mode():
            samples = []
            step = getattr(self.timer, "batch", 1)
            for start in range(0, len(calls), step):
                group = calls[start:start + step]
                if on_gpu:
                    for call in group:
                        self._before(call.index)
                    torch.cuda._sleep(LEAD_SPIN_CYCLES)
                samples += timing.time_calls(self.timer, group, None if on_gpu else self._before)
        synchronize(self.device)
        return [float(s) for s in samples]
