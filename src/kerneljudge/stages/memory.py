"""Memory, as the judge sees it: whether the problem can fit at all (before any work), and the result's
`memory` block (the judge's peak against the problem's footprint and the device's total).

The judge's memory is what its two torch processes hold: each keeps the parameters, the inputs and the
outputs, the worker also the reference's state while it loads it into ModelNew (then let go of: the probes'
parameter changes are made on ModelNew's entries, proc/perturb.py) and the referee its float64 truth beside its
expected output (the candidate's, in the worker, is compared where it lies on a GPU and crosses through host memory
on a CPU; a large reference's parameters are upcast where the float64 run reads them, referee/upcast.py). So the
least a judgement needs is twice the parameters, twice the inputs and three times the outputs; a problem whose least
need exceeds
the device is `problem-too-large`. The peak is reported per process and per device (the resident set,
and the GPU allocator's high-water mark on a GPU) and as a multiple of the problem's footprint
(parameters, inputs, outputs and, measured on a GPU, the reference's activations).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from kerneljudge import protocol
from kerneljudge.isolation import WorkerFailure
from kerneljudge.memtally import MAX_BYTES, MemoryTally
from kerneljudge.records import Finding
from kerneljudge.seeds import derive_seed
from kerneljudge.stages.context import Judging, StageEnded

STAGE = "worker"
GB = 1e9


def least_need_bytes(estimate: dict[str, int]) -> int:
    """What the two processes must hold at once, at the least (see the module's docstring)."""
    return 2 * estimate["parameters_bytes"] + 2 * estimate["inputs_bytes"] + 3 * estimate["outputs_bytes"]


def precheck(j: Judging, problem: dict[str, Any], seed: int, block: dict[str, Any]) -> None:
    """The referee's estimate of the problem's size (on the meta device), kept in the memory `block`; a
    `problem-too-large` finding ends the run when the least the judgement needs exceeds the device's memory."""
    reply = j.take(j.referee.call(protocol.Estimate(problem, derive_seed(seed, "init-inputs"))), STAGE)
    estimate, total = reply.get("estimate") or {}, reply.get("device_total_bytes")
    block["estimate"] = estimate
    if "unknown" in estimate or not total:
        return
    need = least_need_bytes(estimate)
    if need > total:
        j.findings.append(Finding.of(
            "problem-too-large", f"the problem needs {need / GB:.1f} GB at the least (parameters "
            f"{estimate['parameters_bytes'] / GB:.2f} GB twice, inputs {estimate['inputs_bytes'] / GB:.2f} GB "
            f"twice, outputs {estimate['outputs_bytes'] / GB:.2f} GB three times), more than the "
            f"device's {total / GB:.1f} GB", stage=STAGE, need_bytes=need, device_total_bytes=total, **estimate))
        raise StageEnded()


def _ask_both(j: Judging, request: protocol.MemoryReport) -> dict[str, dict[str, Any]]:
    """The referee's and the worker's replies to `request`, by name; a process that died or answered with
    an error has none (it has no peaks to tell; its failure is already a finding)."""
    replies = {}
    for name, process in (("referee", j.referee), ("worker", j.worker)):
        try:
            reply = process.call(request)
        except WorkerFailure:
            continue
        if not reply.get("error"):
            replies[name] = reply
    return replies


def report(j: Judging, block: dict[str, Any]) -> None:
    """Into the memory `block`: each process's peaks, the problem's footprint, the device's total, the ratio."""
    for name, reply in _ask_both(j, protocol.MemoryReport()).items():
        if name == "referee":  # the device, the footprint and the float64 plan: from the trusted side only
            block["device_total_bytes"] = reply.pop("device_total_bytes", block.get("device_total_bytes"))
            for key in ("footprint", "reference"):
                if key in reply:
                    block[key] = reply.pop(key)
        reply.pop("findings", None), reply.pop("poisoned", None)
        block[name] = {k: v for k, v in reply.items() if type(v) is int}  # the worker's are claims: numbers only
    block.update(_ratios(block, j.tally, j.device))


def mark_stage(j: Judging, block: dict[str, Any], stage: str) -> None:
    """Each process's peak in `stage`, just ended, into block["stages"] (GPU: the allocator's peak during the
    stage; CPU: the resident set's, where the system lets the mark be reset, else its high-water mark so
    far), so a peak can be traced to its stage."""
    block.setdefault("stages", {})[stage] = {  # the worker's is a claim: a number only
        name: reply["stage_peak_bytes"] for name, reply in _ask_both(j, protocol.MemoryReport(stage=stage)).items()
        if type(reply.get("stage_peak_bytes")) is int}


def _ratios(block: dict[str, Any], tally: MemoryTally | None, device: str) -> dict[str, Any]:
    """The judge's peak and its multiple of the footprint: both processes' memory at once, request by request
    (memtally.py: on a GPU the allocators' peaks, on a CPU the resident sets above their baselines), and
    beside it the sum of each process's own peak (an upper bound, as if both peaks fell at once). On a GPU
    also the processes' cuBLAS workspaces, a fixed cost (proc/memory.cublas_workspaces_bytes), and the peak
    less them over the footprint: what the problem's size costs, the multiple that says what a small problem takes
    (its workspaces made after the peak would be taken off too: the figure is a lower bound then). The
    worker's figures are claims: numbers below memtally.MAX_BYTES, a missing one counted as 0."""
    footprint = (block.get("footprint") or {}).get("total_bytes")
    processes = {p: block[p] for p in ("referee", "worker") if p in block}
    if not processes:
        return {}

    def figure(process: dict, key: str) -> int:
        value = process.get(key, 0)
        return value if 0 <= value < MAX_BYTES else 0

    on_gpu = device.startswith("cuda")
    if on_gpu:
        summed, baselines = sum(figure(p, "cuda_peak_bytes") for p in processes.values()), {}
    else:
        baselines = {name: figure(p, "rss_baseline_bytes") for name, p in processes.items()}
        summed = sum(max(0, figure(p, "rss_peak_bytes") - baselines[name]) for name, p in processes.items())
    what = "cuda max_memory_allocated" if on_gpu else "resident sets above each one's when the problem's work began"
    if tally is not None and tally.roles() == set(processes):
        peak = tally.peak_bytes(baselines)
        measured = (f"both processes at once, request by request ({what})" if tally.reset else
                    f"both processes at once, request by request, from marks the system would not reset (each "
                    f"request's peak is its process's peak so far: an upper bound; {what})")
    else:
        peak, measured = summed, f"the sum of each process's peak ({what})"
    ratios = {"judge_peak_bytes": peak, "judge_peak_measured": measured, "processes_peak_sum_bytes": summed,
              "peak_over_footprint": round(peak / footprint, 2) if footprint else None}
    if on_gpu:  # each process's workspaces, within its own peak (the worker's figure is a claim)
        fixed = sum(min(figure(p, "cublas_workspaces_bytes"), figure(p, "cuda_peak_bytes")) for p in processes.values())
        ratios.update(cublas_workspaces_bytes=fixed, peak_less_workspaces_over_footprint=round(
            max(0, peak - fixed) / footprint, 2) if footprint else None)
    return ratios


@contextmanager
def reported(j: Judging, block: dict[str, Any]):
    """Around the stages, inside the processes' lifetime: the peaks into `block` when the judgement finished or
    ended (a stage's end, a worker's failure), never on an interrupt or a judge error, where asking a
    process still running the candidate would wait for its deadline."""
    try:
        yield
    except (StageEnded, WorkerFailure):
        report(j, block)
        raise
    report(j, block)
