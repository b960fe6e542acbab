"""The GPU cases: the candidates in tests/candidates/gpu/ and the shipped CUDA solutions, judged on a
CUDA device. Skipped (with the reason) on a machine without one, so CI on the CPU skips them; run on the
H200 through the device tool (`pytest -q tests/test_gpu.py`; figures in docs/benchmarks.md).

Each asserts the exact finding: on a GPU the caching allocator makes freed-memory poisoning exact, so a
half-written output reads NaN (`output-nonfinite`), never leftover values."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from conftest import CANDIDATES, SEED, codes
from kerneljudge import api, isolation, suite
from kerneljudge.proc import occupy

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="these cases need a CUDA device")

GPU = CANDIDATES / "gpu"
#: Timing on, short and with a fixed count of calls (no baselines): enough for the cross-check's batches.
SHORT_TIMING = {"enabled": True, "baselines": False, "min_runs": 200, "max_runs": 200,
                "target_rel_sem": 0.0, "min_time_ms": 0.0, "budget_ms": 1e7}


@pytest.fixture
def on_gpu(fast):
    return fast.replace(device="cuda")


def outcome(result) -> tuple[str, set[str]]:
    return result.verdict, {f.code for f in result.findings if f.severity in ("fail", "error")}


@pytest.mark.parametrize("name, verdict, failing", [
    ("side_stream", "fail", {"side-stream"}),
    ("side_stream_joined", "pass", set()),
    ("unwritten", "fail", {"output-nonfinite"}),
    ("illegal_address", "error", {"cuda-error"}),
])
def test_gpu_candidate_gets_its_exact_verdict(on_gpu, name, verdict, failing):
    result = api.evaluate(SEED, GPU / f"{name}.py", on_gpu)
    assert outcome(result) == (verdict, failing), [(f.code, f.message) for f in result.findings]


def test_re_recorded_start_event_is_timing_tampering(on_gpu):
    """Its claimed median (about 1 us) is also under the memory floor: both findings, the cross-check's first."""
    result = api.evaluate(SEED, GPU / "rearm_timer.py", on_gpu.replace(timing=SHORT_TIMING))
    verdict, failing = outcome(result)
    assert verdict == "fail" and "timing-tampering" in failing, [(f.code, f.message) for f in result.findings]
    assert failing <= {"timing-tampering", "impossible-speed"}


def test_side_stream_only_while_timed_is_seen_by_the_watched_timed_calls(on_gpu):
    """Its work goes to an unjoined side stream only inside the timing loop (found from the stack), so the probes
    see an honest candidate. Before a watched call the caller's stream is held until the call returns on the
    host, then waits, then writes the call's new inputs; after the call its output is read in the caller's
    stream order and again after the batch's synchronisation, and checked. Work that did not wait for the
    caller's stream shows as a wrong output (`timed-output-mismatch`) or as an output still changing after the
    call (`unsynchronized-work`): on the H200 the second (docs/benchmarks.md, fifth session)."""
    result = api.evaluate(SEED, GPU / "side_stream_when_timed.py", on_gpu.replace(timing=SHORT_TIMING))
    verdict, failing = outcome(result)
    watched = [f for f in result.findings if f.stage == "timing" and f.severity == "fail"
               and (f.code == "unsynchronized-work" or (f.code == "timed-output-mismatch" and f.details["watched"]))]
    assert verdict == "fail" and watched, [(f.code, f.message) for f in result.findings]
    assert not any(f.stage == "probe" for f in result.findings if f.severity == "fail")  # the probes see an honest one


def test_side_work_that_waits_past_the_watched_wait_is_seen_still_running(on_gpu):
    """Its timed calls' work goes to an unjoined side stream after a wait of 15 ms there, longer than a watched
    call's wait before the new inputs are written (1 ms + the reference's time) and shorter than the 4x the
    reference's time it was before the thirty-third session: a watched call's side work, behind the batch's earlier
    ones on its stream, reads the new inputs or the old ones, and either its output is wrong (`timed-output-mismatch`)
    or it is still running when the output is read in the caller's stream order (`unsynchronized-work`)."""
    result = api.evaluate(SEED, GPU / "side_stream_after_wait.py", on_gpu.replace(timing=SHORT_TIMING))
    verdict, failing = outcome(result)
    watched = [f for f in result.findings if f.stage == "timing" and f.severity == "fail"
               and (f.code == "unsynchronized-work" or (f.code == "timed-output-mismatch" and f.details["watched"]))]
    assert verdict == "fail" and watched, [(f.code, f.message) for f in result.findings]
    assert not any(f.stage == "probe" for f in result.findings if f.severity == "fail")


SQUARE_PRODUCT = Path(__file__).parent / "square_product.py"  # a problem: two 1,024 x 1,024 matrices multiplied


def test_side_work_waiting_for_the_next_flush_is_in_the_figures_or_fails(on_gpu):
    """flush_window.py: 60% of each timed product on a side stream whose first kernel waits on the device (for a
    watched call's new inputs, else for the caller's part to end), to run beside the judge's L2 flush. The flushes
    occupy the device (proc/occupy.py) and a watched call's inputs are written after its flush: the side part runs
    beside the calls' own work (its time in their events), delays a flush (in the batch's wall time: the
    cross-check), or is still running when a watched call's output is read. Before, its reported time was its
    caller's part alone (docs/benchmarks.md, thirty-fourth session)."""
    result = api.evaluate(SQUARE_PRODUCT, GPU / "flush_window.py", on_gpu.replace(timing={**SHORT_TIMING, "baselines": True,
                                                                                     "compile_baseline": False}))
    verdict, failing = outcome(result)
    print(verdict, sorted(failing), result.timing and result.timing.get("speedup"))
    if verdict == "pass":  # every timed output right: then its figures hold the side part's time
        assert result.timing["speedup"]["eager"] < 1.2, result.timing
    else:
        assert failing and failing <= {"unsynchronized-work", "timed-output-mismatch", "timing-tampering"}, [
            (f.code, f.message) for f in result.findings]


SPIN_EVERY_SM = r"""
extern "C" __global__ void spin(unsigned int ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ns);
}
"""


def test_the_judges_occupying_kernel_leaves_no_room_beside_it():
    """proc/occupy.py: a kernel launched on another stream while the occupying spin runs waits for it to end;
    beside torch's one-thread spin it runs at once. A block of 256 threads on every SM already spinning when the
    occupying flush starts runs beside blocks of it that only wait: the flush's writes come after the spin (torch's
    fill runs beside it; beside a spin of 1,024 threads a SM it waited too, on an H100). And its fill and copy
    write every word."""
    occupier = occupy.Occupier.for_device(torch.device("cuda"))
    assert occupier is not None
    flushed = torch.empty(torch.cuda.get_device_properties(0).L2_cache_size // 2, dtype=torch.int32, device="cuda")
    side = torch.cuda.Stream()
    spin = torch.cuda._compile_kernel(SPIN_EVERY_SM, "spin")
    sms, spin_us = torch.cuda.get_device_properties(0).multi_processor_count, 200

    def flush_after_spin_us(flush) -> float:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(side):
            start.record()
            spin(grid=(sms, 1, 1), block=(256, 1, 1), args=[spin_us * 1000])
        flush()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3

    def flush_us(flush) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        flush()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1e3

    # the writes of a flush of 2x the L2, without the flusher's persisting-lines reset (a host call of the runtime's)
    fills = {"occupying": lambda: occupier.fill(flushed, 3), "torch": lambda: flushed.fill_(3)}
    for fill in fills.values():  # (first launches)
        flush_after_spin_us(fill)
    alone = {name: sorted(flush_us(fill) for _ in range(9))[4] for name, fill in fills.items()}
    after = {name: sorted(flush_after_spin_us(fill) for _ in range(9))[4] for name, fill in fills.items()}
    print("flush alone us", alone, "ended after a spin of", spin_us, "us on every SM:", after)
    assert after["occupying"] >= spin_us + 0.8 * alone["occupying"], (alone, after)
    assert after["torch"] < spin_us + 0.5 * alone["torch"], (alone, after)
    buffer = torch.zeros(1 << 22, dtype=torch.int32, device="cuda")
    occupier.fill(buffer, 7)
    assert bool((buffer == 7).all())
    for source in (torch.rand(1 << 20, device="cuda"), torch.arange(5, device="cuda")):  # its copy, torch's
        target = torch.empty_like(source)
        occupier.copy(target, source)
        assert torch.equal(target, source)
    side = torch.cuda.Stream()
    ended_ms = {}
    for name, spin in (("occupying", lambda: occupier.spin_ms(3.0)), ("torch", lambda: torch.cuda._sleep(6_000_000))):
        torch.cuda.synchronize()
        start, side_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        spin()
        time.sleep(0.001)  # the spin has begun on the device
        with torch.cuda.stream(side):
            torch.cuda._sleep(1000)
            side_end.record()
        torch.cuda.synchronize()
        ended_ms[name] = start.elapsed_time(side_end)
    print(ended_ms)
    assert ended_ms["occupying"] >= 2.9 and ended_ms["torch"] < 2.5, ended_ms


def test_one_buffer_for_a_batchs_calls_while_timed_fails(on_gpu):
    """Honest through the trials and the probes, then one output buffer for all the calls of a timed batch, only
    the last computed: the overwritten outputs fail as `output-alias` (as the repeat probe fails a buffer
    returned again), or as a wrong output where it computed on another set than the batch's last."""
    result = api.evaluate(SEED, GPU / "reuse_while_timed.py", on_gpu.replace(timing=SHORT_TIMING))
    verdict, failing = outcome(result)
    assert verdict == "fail" and failing & {"output-alias", "timed-output-mismatch"}, [
        (f.code, f.message) for f in result.findings]
    assert not any(f.stage == "probe" for f in result.findings if f.severity == "fail")  # the probes see an honest one


def test_a_batchs_work_done_at_its_first_call_is_reported_as_the_batches_means(on_gpu):
    """Honest through the trials and the probes, then, while timed, all of a batch's outputs computed at its
    first call (its sets are refilled before it) and handed back at the others, computed again wherever a set's
    values changed (a watched call's): every output right, the calls' median a fraction of the work. The
    batches' means are reported instead (`timing-skewed`)."""
    result = api.evaluate(SEED, GPU / "precompute_batch.py", on_gpu.replace(timing=SHORT_TIMING))
    skewed = [f for f in result.findings if f.code == "timing-skewed"]
    assert skewed, [(f.code, f.message[:120]) for f in result.findings if f.severity != "info"]
    assert result.timing["candidate"]["median_ms"] == pytest.approx(skewed[0].details["batches_median_ms"])
    assert result.timing["samples_are"] == "batch means"
    assert not any(f.stage == "probe" for f in result.findings if f.severity == "fail")


def test_shipped_cuda_solution_passes_strict_with_timing(on_gpu):
    result = api.evaluate(SEED, suite.shipped_solutions(suite.find_builtin(SEED).name)["cuda"],
                          on_gpu.replace(timing=SHORT_TIMING))
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert result.protocol == "strict" and all(t.passed for t in result.trials)
    assert "timing-tampering" not in codes(result) and result.timing["candidate"]["median_ms"] > 0
    assert result.timing["flush"] == "exclusive"  # proc/occupy.py loaded (on the referee's side)
    assert result.memory["outputs_cross"] == "cuda-ipc"  # the 64 MiB outputs as handles (proc/deviceshare)
    # the Gemm's cuBLAS workspaces in both processes: named, within the peak, taken off it in the second ratio
    memory = result.memory
    assert 0 < memory["cublas_workspaces_bytes"] < memory["judge_peak_bytes"], memory
    assert memory["peak_less_workspaces_over_footprint"] < memory["peak_over_footprint"], memory


def test_the_cublas_workspaces_are_what_clearing_them_gives_back():
    """proc/memory.cublas_workspaces_bytes: one workspace per stream that multiplied matrices, each kept until
    asked for (then let go: a second asking finds none, the next product makes one again)."""
    from kerneljudge.proc import memory
    device = torch.device("cuda")
    a = torch.randn(64, 64, device=device)
    memory.cublas_workspaces_bytes(device)  # none left from before
    (a @ a).sum().item()
    one = memory.cublas_workspaces_bytes(device)
    assert one >= 2**20 and memory.cublas_workspaces_bytes(device) == 0, one
    (a @ a).sum().item()
    with torch.cuda.stream(torch.cuda.Stream()):
        (a @ a).sum().item()
    assert memory.cublas_workspaces_bytes(device) >= 2 * one


def test_outputs_through_host_memory_give_the_same_verdict(on_gpu):
    """The control of the CUDA IPC path: with `device_share` off the same candidate's outputs cross through
    host memory, and it passes the same way."""
    result = api.evaluate(SEED, suite.shipped_solutions(suite.find_builtin(SEED).name)["cuda"],
                          on_gpu.replace(worker={"device_share": False}))
    assert result.verdict == "pass" and result.memory["outputs_cross"] == "host memory", \
        [(f.code, f.message) for f in result.findings]


def _fails_as_wrong(problem, wrong, options) -> None:
    """The wrong candidate (1e-2 off everywhere) is `wrong-output`, nothing else."""
    failed = api.evaluate(problem, wrong, options, check={"trials": 2}, probes=False)
    assert outcome(failed) == ("fail", {"wrong-output"}), [(f.code, f.message) for f in failed.findings]


def _problem_honest_and_wrong(folder, template: str):
    """The problem written from `template` (its `{change}` empty), the reference renamed `ModelNew`, and the same
    with 1e-2 added to its output."""
    paths = [folder / name for name in ("problem.py", "honest.py", "wrong.py")]
    for path, change, name in zip(paths, ("", "", " + 1e-2"), ("Model", "ModelNew", "ModelNew")):
        path.write_text(template.format(change=change).replace("class Model", f"class {name}"))
    return paths


TALL_SKINNY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B){change}


M = 16384
N = 32


def get_inputs():
    return [torch.rand(M, N), torch.rand(N, M)]


def get_init_inputs():
    return []
"""


def test_a_large_output_is_compared_where_the_worker_holds_it(on_gpu, tmp_path):
    """level1/9's shape at a 1 GiB output (inputs of 4 MiB): the referee compares the candidate's output viewed
    in the worker's memory (tensorwire.output_in_place), not an output-sized copy of it; its own native output
    is let go once drawn (within the tolerance of the truth: referee/session.expect), and the worker lets the
    compared output go before the next draw (stages/context.Judging.let_go): at most two outputs are held at
    once, the referee's expected one and truth while it draws (the referee's own peak: 2.26 outputs on an H100); the
    judge's peak was 3.29-3.30 outputs with the worker's output held through the next draw (the repeat and range
    probes') or the referee's expected output kept beside its truth; a wrong output is still seen there."""
    problem, honest, wrong = _problem_honest_and_wrong(tmp_path, TALL_SKINNY)
    result = api.evaluate(problem, honest, on_gpu, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    memory, output_bytes = result.memory, 1 << 30
    assert memory["outputs_cross"] == "cuda-ipc" and memory["reference"]["float64"] == "chunked", memory
    peaks = {stage: memory["stages"][stage]["referee"] / output_bytes for stage in ("check", "probes")}
    print(f"referee peaks {peaks}, judge peak {memory['judge_peak_bytes'] / output_bytes:.2f} outputs")
    assert all(peak < 2.75 for peak in peaks.values()), peaks
    assert memory["judge_peak_bytes"] / output_bytes < 2.5, memory
    _fails_as_wrong(problem, wrong, on_gpu)


TF32_CONVOLUTION = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 1024, 3, padding=1)

    def forward(self, x):
        return self.conv(x){change}


def get_inputs():
    return [torch.rand(16, 64, 64, 64)]


def get_init_inputs():
    return []
"""


def test_a_large_native_output_that_misses_the_truth_is_kept_in_host_memory(on_gpu, tmp_path):
    """A convolution in TF32 (cuDNN's default; 64 input channels: with 3 the H100's cuDNN chose a kernel in full
    float32 and the output was within the tolerance, twenty-third session) with a 256 MiB output: the reference's
    native output misses the float64 truth, so it is kept for the comparisons that fall back to it
    (`reference-imprecise`), in pinned host memory (referee/session.NATIVE_IN_HOST_FROM_BYTES), read a block at a
    time: between draws the referee holds the truth alone. The judge's peak is the worker's forward (its output, the
    input and cuDNN's TF32 workspace: 2.05 outputs, the reference's own activations in the footprint) beside the
    referee's truth and input (1.1 outputs): 3.37 outputs, 1.57 footprints on an H100 (twenty-sixth session). The
    native output kept on the device would add an output (4.4). The honest candidate passes against the native
    output, a wrong one fails."""
    problem, honest, wrong = _problem_honest_and_wrong(tmp_path, TF32_CONVOLUTION)
    result = api.evaluate(problem, honest, on_gpu, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    assert "reference-imprecise" in {f.code for f in result.findings}
    output_bytes = 16 * 1024 * 64 * 64 * 4
    memory = result.memory
    print(f"judge peak {memory['judge_peak_bytes'] / output_bytes:.2f} outputs, referee's stages "
          f"{ {stage: round(memory['stages'][stage]['referee'] / output_bytes, 2) for stage in ('check', 'probes')} }")
    assert memory["judge_peak_bytes"] / output_bytes < 3.8 and memory["peak_over_footprint"] < 2, memory
    _fails_as_wrong(problem, wrong, on_gpu)


WIDE_LINEAR = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16384, 16384)

    def forward(self, x):
        return torch.sigmoid(self.linear(x)){change}


def get_inputs():
    return [torch.rand(64, 16384)]


def get_init_inputs():
    return []
"""


def test_a_parameter_heavy_reference_is_held_twice_by_the_judge(on_gpu, tmp_path):
    """A Linear of 1 GiB (level2/56's shape, smaller): the referee holds its parameters once, their float64 run
    upcasting the weight 64 MiB at a time (referee/upcast.py), and the worker builds the reference's state into
    host memory before ModelNew's own (worker/server.STATE_IN_HOST_FROM_BYTES), so the judge holds the parameters
    twice at the most and a little more (it held three times them: the referee's float64 ones beside the worker's,
    and the worker's two builds beside the referee's), the referee's parked in host memory while the probes
    replace ModelNew's (a new weight beside the old one: referee/session.RefereeSession.park); a wrong candidate
    still fails."""
    problem, honest, wrong = _problem_honest_and_wrong(tmp_path, WIDE_LINEAR)
    result = api.evaluate(problem, honest, on_gpu, check={"trials": 2})
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
    memory = result.memory
    parameters = memory["footprint"]["parameters_bytes"]
    print(f"judge peak {memory['judge_peak_bytes'] / parameters:.2f} parameters, "
          f"{memory['peak_over_footprint']} footprints; stages "
          f"{ {s: {p: round(v / parameters, 2) for p, v in d.items()} for s, d in memory['stages'].items()} }")
    assert memory["reference"]["float64"] != "native", memory["reference"]
    assert memory["judge_peak_bytes"] / parameters < 2.3, memory
    _fails_as_wrong(problem, wrong, on_gpu)


def test_a_made_up_device_handle_does_not_open(on_gpu):
    """A forged CUDA IPC description on a GPU: the driver refuses the handle, the referee calls the reply
    malformed, and maps nothing."""
    result = api.evaluate(SEED, CANDIDATES / "referee" / "forged_handle.py", on_gpu)
    assert result.verdict == "fail" and "tampering" in codes(result), [(f.code, f.message) for f in result.findings]
    assert any("malformed" in f.message for f in result.findings if f.code == "tampering")


def test_a_candidate_past_its_share_of_the_gpus_memory_runs_out_in_its_own_process(on_gpu):
    """torch's allocator in the worker is capped at --gpu-memory-share (default half): a candidate keeping 60%
    of the GPU ends in `out-of-memory` (the referee on the same GPU unharmed, no `judge-error`); allowed the
    whole GPU, the same candidate passes."""
    capped = api.evaluate(SEED, GPU / "gpu_hog.py", on_gpu)
    assert outcome(capped) == ("error", {"out-of-memory"}), [(f.code, f.message) for f in capped.findings]
    whole = api.evaluate(SEED, GPU / "gpu_hog.py", on_gpu.replace(worker={"gpu_memory_share": 1.0}))
    assert outcome(whole) == ("pass", set()), [(f.code, f.message) for f in whole.findings]


def test_an_input_changed_in_place_is_seen_where_the_worker_holds_it(on_gpu, monkeypatch):
    """A check trial's inputs as the worker had them after the call come back as CUDA IPC handles (64 MiB at
    full size, a sixth of the problem's memory) and are compared where they lie, without a copy
    (tensorwire.values_in_place): a candidate that writes into its input is `input-mutation` on the GPU as on
    the CPU (the shipped solution above, whose inputs come back the same way, passes)."""
    shared = []
    call = isolation.WorkerProcess.call

    def watched(process, request, blobs=(), **kw):
        reply = call(process, request, blobs, **kw)
        if request.op == "forward" and reply.get("inputs_after"):
            shared.append(all("shared" in meta for meta in reply["inputs_after"] if meta.get("t") == "tensor"))
        return reply

    monkeypatch.setattr(isolation.WorkerProcess, "call", watched)
    result = api.evaluate(SEED, CANDIDATES / "integrity" / "input_mutation.py", on_gpu)
    assert "input-mutation" in codes(result), [(f.code, f.message) for f in result.findings]
    assert result.memory["outputs_cross"] == "cuda-ipc" and shared and all(shared), shared


def test_a_spares_preparation_makes_no_cuda_context():
    """`protocol.Prepare` runs outside the device's gate, beside other lanes' timings (batch/local.py): what it
    does (`machine.prepare_device`) starts the driver and looks things up, but makes no context, so nothing of it
    is on the GPU; the ping's `take_device` makes it. Read through the driver's primary-context state, in a fresh
    process (this one has its context already)."""
    import subprocess
    import sys

    script = (
        "import ctypes\n"
        "from kerneljudge.proc import cudadriver, machine\n"
        "machine.prepare_device('cuda:0')\n"
        "lib = cudadriver.libcuda()\n"
        "device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()\n"
        "assert lib.cuDeviceGet(ctypes.byref(device), 0) == 0\n"
        "assert lib.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0\n"
        "print('prepared', active.value)\n"
        "machine.take_device('cuda:0', None)\n"
        "assert lib.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) == 0\n"
        "print('taken', active.value)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["prepared", "0", "taken", "1"]


def test_a_range_plans_coverage_counted_on_the_gpu_is_the_hosts():
    """In process: the range plan counts each op site's bins on the GPU by comparison (referee/ranges._counted),
    on the host by `bincount`: the same model and draw, its values inside, beyond and across the curved ranges,
    cover the same bins, and the plan chooses the same moves, under torch.use_deterministic_algorithms as a problem
    may turn it on."""
    from kerneljudge.referee import ranges

    class GeluAndSoftmax(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = torch.nn.Parameter(torch.linspace(-2, 2, 50))

        def forward(self, x):
            return torch.nn.functional.gelu(x + self.bias) + torch.softmax(x * 10, dim=-1)

    x = torch.linspace(-9, 9, 1000).reshape(20, 50) * torch.linspace(0.05, 1, 20).reshape(20, 1)
    host = ranges.plan(GeluAndSoftmax(), [x], 5, lambda: 0.0)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        gpu = ranges.plan(GeluAndSoftmax().cuda(), [x.cuda()], 5, lambda: 0.0)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    assert gpu["bins"] == host["bins"] and gpu["sites"] == host["sites"], (gpu["sites"], host["sites"])
    assert gpu["probes"] == host["probes"] and 0 < host["sites"]["gelu#0"]["default"] < 1
