"""Stage "probe" inside the worker: behaviours a correct-looking candidate must not have.

Each probe is one function `(ProbeContext) -> list[Finding]`, registered in PROBES with the devices
it applies to. They run after the correctness trials passed, on the same models, and each one calls
the candidate the way a real caller could: new parameter values, the same buffers holding new
values, a second call on the same inputs, poisoned memory, a profiler watching. Numbers in the
messages come from the comparison that failed.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Callable

import torch

from kerneljudge.records import Finding
from kerneljudge.worker import compare, optrace
from kerneljudge.worker.check import poison_free_memory, tensor_sizes
from kerneljudge.worker.session import Session, clone_args, derive_seed, synchronize, upcast

STAGE = "probe"


@dataclass
class ProbeContext:
    session: Session
    atol: float | None
    rtol: float | None
    info: dict = field(default_factory=dict)  # data for the report (op trace, streams seen)
    _trace: optrace.Trace | None = None

    def trace(self) -> optrace.Trace:
        """One profiled reference call and one profiled, counted candidate call, shared by the probes."""
        if self._trace is None:
            self._trace = optrace.trace(self.session, self.inputs("trace"))
        return self._trace

    def inputs(self, label: str) -> list:
        return self.session.make_inputs(derive_seed(self.session.seed, f"probe:{label}"))

    def call_candidate(self, args: list):
        out = self.session.run(self.session.candidate, args)
        synchronize(self.session.device)
        return out

    def expected(self, args: list):
        """Reference output and float64 output for these inputs (the reference on clones)."""
        s = self.session
        out = s.run(s.reference, clone_args(args))
        out64 = s.run(s.reference64, upcast(clone_args(args))) if s.reference64 is not None else None
        return out, out64

    def mismatch(self, out, args: list) -> compare.Comparison | None:
        """The failed comparison of `out` against the reference on `args`, or None if it matches."""
        expected, expected64 = self.expected(args)
        atol, rtol = compare.tolerance(expected, self.atol, self.rtol)
        result = compare.compare(0, out, expected, expected64, atol, rtol)
        return None if result.trial.passed else result

    def describe(self, result: compare.Comparison) -> str:
        t = result.trial
        return t.message or "outputs differ"


def _pairs(session: Session):
    """(reference tensor, candidate tensor, is_parameter) for every floating reference state entry."""
    candidate_state = session.candidate.state_dict()
    parameters = {n for n, _ in session.reference.named_parameters()}
    return [(v, candidate_state[k], k in parameters) for k, v in session.reference.state_dict().items()
            if v.is_floating_point() and k in candidate_state]


def _refresh_reference64(session: Session) -> None:
    if session.reference64 is not None:
        session.reference64 = copy.deepcopy(session.reference).to(torch.float64)


def probe_parameters_in_place(ctx: ProbeContext) -> list[Finding]:
    """Row 1: derived values cached once go stale when the parameters change in place.
    Values are scaled by 0.5..1.5 elementwise (signs kept, so variances stay positive) and parameters
    also get a small shift (so zero-initialised biases change too)."""
    s = ctx.session
    pairs = _pairs(s)
    if not pairs:
        return []
    ctx.call_candidate(ctx.inputs("params-warm"))  # let any cache fill with the current values
    generator = torch.Generator(s.device).manual_seed(derive_seed(s.seed, "params-values"))
    with torch.no_grad():
        for ref_t, cand_t, is_parameter in pairs:
            ref_t.mul_(_uniform(ref_t, generator, 0.5, 1.5))
            if is_parameter:
                ref_t.add_(_uniform(ref_t, generator, -0.1, 0.1))
            cand_t.copy_(ref_t)
    return _stale_after(ctx, "params-check", "the parameters were changed in place")


def probe_parameters_replaced(ctx: ProbeContext) -> list[Finding]:
    """Row 1: the same, when parameter objects are replaced (new storage, new identity)."""
    s = ctx.session
    names = [n for n, p in s.reference.named_parameters() if p.is_floating_point()]
    candidate_params = dict(s.candidate.named_parameters())
    names = [n for n in names if n in candidate_params]
    if not names:
        return []
    ctx.call_candidate(ctx.inputs("replace-warm"))
    generator = torch.Generator(s.device).manual_seed(derive_seed(s.seed, "replace-values"))
    for name in names:
        ref_owner, attr = _owner(s.reference, name)
        cand_owner, _ = _owner(s.candidate, name)
        old = getattr(ref_owner, attr)
        new = _uniform(old, generator, -0.5, 0.5)
        setattr(ref_owner, attr, torch.nn.Parameter(new.clone(), requires_grad=old.requires_grad))
        setattr(cand_owner, attr, torch.nn.Parameter(new.clone(), requires_grad=old.requires_grad))
    return _stale_after(ctx, "replace-check", "the parameter objects were replaced by new ones")


def _uniform(like: torch.Tensor, generator: torch.Generator, low: float, high: float) -> torch.Tensor:
    """Uniform values in [low, high) shaped and typed like `like`, drawn on its device (a 256 MB weight's
    worth of float64 draws on the CPU takes seconds)."""
    values = torch.rand(like.shape, generator=generator, device=like.device, dtype=torch.float32)
    return (values * (high - low) + low).to(like.dtype)


def _stale_after(ctx: ProbeContext, label: str, change: str) -> list[Finding]:
    """Once both models' parameters changed alike: on new inputs the candidate must match again."""
    _refresh_reference64(ctx.session)
    args = ctx.inputs(label)
    failed = ctx.mismatch(ctx.call_candidate(clone_args(args)), args)
    if failed:
        return [Finding.of("stale-parameters", f"after {change} (both models alike), the output no longer "
                           f"matches: {ctx.describe(failed)}", stage=STAGE)]
    return []


def _owner(module: torch.nn.Module, dotted: str) -> tuple[torch.nn.Module, str]:
    """The submodule holding the parameter `dotted` ("gemm.weight"), and the attribute name."""
    *path, attr = dotted.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    return owner, attr


def probe_refilled_inputs(ctx: ProbeContext) -> list[Finding]:
    """Row 4: outputs memoised by input address or identity go stale when the buffers get new values."""
    first, second = ctx.inputs("refill-a"), ctx.inputs("refill-b")
    buffers = clone_args(first)
    ctx.call_candidate(buffers)
    for buffer, new in zip(buffers, second):
        if isinstance(buffer, torch.Tensor):
            buffer.copy_(new)
    failed = ctx.mismatch(ctx.call_candidate(buffers), second)
    if failed:
        return [Finding.of("stale-inputs", "the same input tensors, refilled with new values, gave the previous "
                           f"output: {ctx.describe(failed)}", stage=STAGE)]
    return []


def probe_repeat(ctx: ProbeContext) -> list[Finding]:
    """Row 15: two calls on the same values must agree within tolerance (garbage reads, races). The two
    calls get separate copies, both alive, so they are equal in value and nothing else."""
    args = ctx.inputs("repeat")
    first_args, second_args = clone_args(args), clone_args(args)
    first = ctx.call_candidate(first_args)
    poison_free_memory(ctx.session.device, tensor_sizes(first))
    second = ctx.call_candidate(second_args)
    firsts, seconds = compare.as_tensors(first), compare.as_tensors(second)
    if firsts is None or seconds is None:
        return []
    if any(_span_overlap(_span(a), _span(b)) for a in firsts for b in seconds):
        return [Finding.of("output-alias", "the second call returned memory the first call's output still holds: "
                           "each call overwrites the previous result", stage=STAGE)]
    atol, rtol = compare.tolerance(first, ctx.atol, ctx.rtol)
    for a, b in zip(firsts, seconds):
        if a.shape != b.shape or not torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True):
            diff = (a.double() - b.double()).abs().nan_to_num(float("inf")).max().item() if a.shape == b.shape else None
            return [Finding.of("nondeterministic", "two calls on the same inputs disagree"
                               + (f": max difference {diff:.3g}" if diff is not None else ": shapes differ"),
                               stage=STAGE)]
    return []


def probe_unwritten_output(ctx: ProbeContext) -> list[Finding]:
    """Row 6: with freed memory poisoned (NaN bytes) right before the call, every output element must
    still be written. On the CPU the poison is best effort (the allocator may hand out fresh pages)."""
    args = ctx.inputs("poison")
    expected, _ = ctx.expected(args)
    candidate_args = clone_args(args)
    poison_free_memory(ctx.session.device, tensor_sizes(expected))
    out = ctx.call_candidate(candidate_args)
    outs, refs = compare.as_tensors(out), compare.as_tensors(expected)
    if outs is None:
        return []
    for o, r in zip(outs, refs):
        if o.shape == r.shape and o.is_floating_point():
            unwritten = int((torch.isnan(o) & ~torch.isnan(r)).sum())
            if unwritten:
                return [Finding.of("unwritten-output", f"{unwritten} of {o.numel()} output elements still held the "
                                   "poison the judge wrote into free memory before the call", stage=STAGE,
                                   unwritten=unwritten)]
    return []


def probe_aliasing(ctx: ProbeContext) -> list[Finding]:
    """Row 3: the output must not share memory with an input, a parameter or a buffer
    (unless the reference's output does the same)."""
    s = ctx.session
    args = ctx.inputs("alias")
    candidate_args, reference_args = clone_args(args), clone_args(args)
    out = ctx.call_candidate(candidate_args)
    ref_out = s.run(s.reference, reference_args)
    if _overlaps(ref_out, reference_args, s.reference):
        return []
    hit = _overlaps(out, candidate_args, s.candidate)
    if hit:
        return [Finding.of("output-alias", f"the output shares memory with {hit}", stage=STAGE)]
    return []


def _overlaps(out, args: list, model) -> str | None:
    outs = compare.as_tensors(out) or []
    owners = [(f"input {i}", a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    if isinstance(model, torch.nn.Module):
        owners += [(f"parameter {n}", p) for n, p in model.named_parameters()]
        owners += [(f"buffer {n}", b) for n, b in model.named_buffers()]
    for o in outs:
        for name, t in owners:
            if _span_overlap(_span(o), _span(t)):
                return name
    return None


def _span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _span_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[1] > a[0] and b[1] > b[0] and a[0] < b[1] and b[0] < a[1]


def probe_threads(ctx: ProbeContext) -> list[Finding]:
    """Row 8: no thread or process started by the call may outlive it; native thread growth is a warning
    (runtimes start pools lazily, so only the Python-visible ones fail)."""
    import psutil

    me = psutil.Process()
    ctx.call_candidate(ctx.inputs("threads-warm"))  # lazily created runtime pools start here
    threads_before, native_before = set(threading.enumerate()), me.num_threads()
    children_before = {c.pid for c in me.children(recursive=True)}
    ctx.call_candidate(ctx.inputs("threads"))
    new_threads = [t.name for t in threading.enumerate() if t not in threads_before]
    new_children = [c.pid for c in me.children(recursive=True) if c.pid not in children_before]
    findings = []
    if new_threads or new_children:
        what = ([f"thread(s) {', '.join(new_threads)}"] if new_threads else []) + (
            [f"process(es) {new_children}"] if new_children else [])
        findings.append(Finding.of("thread-spawn", f"after forward returned, {' and '.join(what)} started by the call "
                                   "were still running", stage=STAGE))
    elif me.num_threads() > native_before:
        findings.append(Finding.of("native-threads", f"the process had {me.num_threads() - native_before} more native "
                                   "threads after the call", stage=STAGE))
    return findings


def probe_streams(ctx: ProbeContext) -> list[Finding]:
    """Row 7: the call's work must be ordered on the caller's stream. From the bracketed profile (see
    optrace._profile): kernels on another stream may neither start before the caller's stream reached
    the call nor end after it moved past it; and the output, read in stream order at once, must equal
    the output after a device-wide synchronisation."""
    s = ctx.session
    trace = ctx.trace()
    findings = []
    if trace.hold is None or trace.marker is None:
        ctx.info["streams"] = {"error": "the profiler recorded no stream bracket; stream order not checked"}
    else:
        caller = trace.hold.stream
        foreign = [k for k in trace.kernels if k.stream != caller]
        early = [k for k in foreign if k.start_ns < trace.hold.end_ns]
        late = [k for k in foreign if k.end_ns > trace.marker.start_ns]
        ctx.info["streams"] = {"caller": caller, "other_streams": sorted({k.stream for k in foreign}),
                               "not_waiting": [k.name[:80] for k in early[:3]],
                               "not_joined": [k.name[:80] for k in late[:3]]}
        if early or late:
            what = []
            if early:
                what.append(f"{len(early)} kernel(s) on stream(s) {sorted({k.stream for k in early})} started "
                            "before the caller's stream reached the call (they do not wait for it)")
            if late:
                what.append(f"{len(late)} kernel(s) on stream(s) {sorted({k.stream for k in late})} were still "
                            "running after the call returned (not joined back)")
            findings.append(Finding.of("side-stream", f"{'; '.join(what)}; caller's stream {caller}; first: "
                                       f"{(early or late)[0].name[:80]}", stage=STAGE))
    args = ctx.inputs("streams")
    torch.cuda.synchronize(s.device)
    torch.cuda._sleep(optrace.HOLD_CYCLES)  # hold the caller's stream: unordered work shows up as a race
    out = s.run(s.candidate, clone_args(args))
    seen = [t.clone() for t in (compare.as_tensors(out) or [])]  # in the caller's stream order
    torch.cuda.synchronize(s.device)
    if any(not torch.equal(a.nan_to_num(), b.nan_to_num()) for a, b in zip(seen, compare.as_tensors(out) or [])):
        findings.append(Finding.of("unsynchronized-work", "the output read in the caller's stream order right after "
                                   "the call differs from the output after a device-wide synchronisation", stage=STAGE))
    return findings


def probe_op_trace(ctx: ProbeContext) -> list[Finding]:
    """Rows 12-13: which of the candidate's own kernels ran, and which heavy reference ops it still calls."""
    trace = ctx.trace()
    ctx.info["op_trace"] = trace.to_json()
    return trace.findings(STAGE)


@dataclass(frozen=True)
class Probe:
    name: str
    run: Callable[[ProbeContext], list[Finding]]
    devices: tuple[str, ...] = ("cpu", "cuda")


# Order matters: the probes that change parameters come last, after those that need them untouched.
PROBES = (
    Probe("op-trace", probe_op_trace),
    Probe("aliasing", probe_aliasing),
    Probe("threads", probe_threads),
    Probe("repeat", probe_repeat),
    Probe("unwritten-output", probe_unwritten_output),
    Probe("streams", probe_streams, devices=("cuda",)),
    Probe("refilled-inputs", probe_refilled_inputs),
    Probe("parameters-in-place", probe_parameters_in_place),
    Probe("parameters-replaced", probe_parameters_replaced),
)


def run_probes(session: Session, *, atol: float | None, rtol: float | None) -> tuple[list[Finding], dict, bool]:
    """Run every probe that applies on this device; returns findings, report data, and `poisoned`."""
    from kerneljudge.worker.failures import classify

    ctx = ProbeContext(session, atol, rtol)
    findings: list[Finding] = []
    skipped = [p.name for p in PROBES if session.device.type not in p.devices]
    if skipped:
        findings.append(Finding.of("probe-skipped", f"not on {session.device.type}: {', '.join(skipped)}",
                                   stage=STAGE, probes=skipped))
    for probe in PROBES:
        if session.device.type not in probe.devices:
            continue
        try:
            findings.extend(probe.run(ctx))
        except BaseException as exc:  # noqa: BLE001 - candidate code runs inside every probe
            failure = classify(exc, stage=STAGE, code="forward-error", what=f"ModelNew.forward (probe {probe.name})",
                               source_file=session.loaded.candidate.__file__)
            findings.append(failure.finding)
            if failure.poisoned or failure.finding.blocking:
                return findings, ctx.info, failure.poisoned
    return findings, ctx.info, False
