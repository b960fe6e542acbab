"""Comparing a candidate's output with the reference's, in the referee: structure first, then values
against float64.

The candidate's output arrives as data (`proc/tensorwire.describe_output`): its structure, the facts its
own process reported about each tensor, and the tensors' bytes. Structure (None, type, count, shape,
dtype, device) is checked before values, each with its own finding. Values: an element passes when |out - ref| <= atol + rtol * |ref| against the float64
reference; if the reference at its own precision misses that bound itself (TF32 convolutions, long
fp16 reductions), the candidate is held to the native reference instead and an info finding says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, NamedTuple

import torch

from kerneljudge.options import DEFAULT_TOLERANCE
from kerneljudge.proc.tensorwire import MAX_DIMS
from kerneljudge.records import Finding, Trial

STAGE = "check"
WORST_SHOWN = 5  # elements listed on a failing trial, the message names the first WORST_IN_MESSAGE
WORST_IN_MESSAGE = 3
MAX_SHOWN_DIMS = 24  # of a mismatched shape the worker described (one that did not cross may have any number)
# Elements compared at once, at most, whatever the output's size: a block's float64 temporaries (about 66
# bytes an element at the comparison's peak) stay near 17 MB on a CPU and 132 MB on a GPU, where larger blocks
# keep launches fewer (a whole 16M-element output at once took 2 GB, ten times the footprint of a 4096x4096
# matmul) ...
CLOSE_BLOCK = {"cpu": 1 << 18, "cuda": 1 << 21}
# ... and on a GPU a mid-size output is compared in about this many blocks, none under CLOSE_BLOCK_LEAST
# elements (33 MB of temporaries), so they stay near its own size: level2/12's 32 MiB output took 132 MiB of them
# in blocks of 2M elements on an H100, the judge's peak a third of its footprint above what it held. (Each block
# is a few launches: a 16M-element output took 6.6 ms to compare in blocks of 1M, 3.5 ms in blocks of 2M.)
CLOSE_BLOCKS_PER_OUTPUT = 16
CLOSE_BLOCK_LEAST = 1 << 19


@dataclass
class Comparison:
    trial: Trial
    findings: list[Finding] = field(default_factory=list)


class TensorOutline(NamedTuple):
    """One tensor of a reference output, without its values."""

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device

    @property
    def nbytes(self) -> int:
        return self.shape.numel() * self.dtype.itemsize


@dataclass(frozen=True)
class Outline:
    """A reference output's structure, all a comparison checks before any value (`structure_problem`): kept
    with every expectation, where the native output itself may be let go once the float64 truth alone decides
    (session.RefereeSession.expect)."""

    tensor: bool  # a single tensor, else a tuple or list of them
    type_name: str
    tensors: tuple[TensorOutline, ...]

    @classmethod
    def of(cls, out) -> "Outline":
        tensors = as_tensors(out)
        if tensors is None:
            raise ValueError(f"the reference's forward returned a {type(out).__name__}, not a tensor or a tuple or "
                             "list of tensors")
        return cls(isinstance(out, torch.Tensor), type(out).__name__,
                   tuple(TensorOutline(t.shape, t.dtype, t.device) for t in tensors))

    @property
    def dtype(self) -> torch.dtype | None:
        """The first tensor's dtype (the tolerance's), None where there is none."""
        return self.tensors[0].dtype if self.tensors else None


def tolerance(dtype: torch.dtype | None, atol: float | None, rtol: float | None) -> tuple[float, float]:
    """atol/rtol from the reference output's dtype (its first tensor's: `Outline.dtype`; DEFAULT_TOLERANCE)
    unless given."""
    name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
    default = DEFAULT_TOLERANCE.get(name, DEFAULT_TOLERANCE["float32"])
    return (default if atol is None else atol), (default if rtol is None else rtol)


def as_tensors(out) -> list | None:
    """The output's tensors in order (a tensor, or a tuple/list of them), or None if it is neither."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    return None


def float64_blocks(*tensors: torch.Tensor) -> Iterator[tuple[int, list[torch.Tensor]]]:
    """(first flat index, [the same block of each tensor in float64]) over equally sized tensors, a sixteenth of
    them at a time within CLOSE_BLOCK_LEAST and the device's CLOSE_BLOCK elements, on the first device that is not
    the host's (a large native output is kept in host memory: session.NATIVE_IN_HOST_FROM_BYTES): every
    elementwise pass of the referee over an output goes through here, so its float64 temporaries stay bounded
    whatever the output's size (the memory plan: a whole 6.4 GB float32 output would otherwise take 12.8 GB per
    temporary)."""
    flats = [t.detach().reshape(-1) for t in tensors]
    device = next((f.device for f in flats if f.device.type != "cpu"), flats[0].device)
    block = min(CLOSE_BLOCK.get(device.type, CLOSE_BLOCK["cpu"]),
                max(CLOSE_BLOCK_LEAST, flats[0].numel() // CLOSE_BLOCKS_PER_OUTPUT))
    for begin in range(0, flats[0].numel(), block):
        yield begin, [f[begin:begin + block].to(device=device, dtype=torch.float64) for f in flats]  # one copy each


def finite_and_squares(tensors: list[torch.Tensor]) -> torch.Tensor:
    """[1.0 where every element of the tensors is finite, else 0.0; the sum of their squares], accumulated in float64
    block by block (`torch.isfinite` on a whole 6 GB float32 output took 10 GB of temporaries on a GPU, in a range
    probe's comparison), left on the first tensor's device (the host's where there is none): the caller reads it
    together with what else it needs, in one transfer (each read of a GPU value waits for the device, and beside
    other lanes' work for its turn on it: a range plan read about eight per reference call)."""
    finite, squares = [], []
    for t in tensors:
        for _, (b,) in float64_blocks(t):
            finite.append(torch.isfinite(b).all())
            squares.append((b * b).sum())
    if not finite:
        return torch.tensor([1.0, 0.0], dtype=torch.float64)
    device = squares[0].device
    return torch.stack([torch.stack([f.to(device) for f in finite]).all().to(torch.float64),
                        torch.stack([q.to(device) for q in squares]).sum()])


@dataclass(frozen=True)
class Received:
    """A candidate's output as it crossed the channel: its kind ("none", "other", "tensor", "tuple",
    "list"), the facts its process reported per tensor, and the tensors (None where not transferable)."""

    kind: str
    facts: list[dict]
    tensors: list
    type_name: str = ""


def structure_problem(received: Received, outline: Outline, *, unpacked: bool = True) -> Finding | None:
    """The first structural difference between the outputs, as a finding; None if they line up. Not `unpacked`:
    seen from its description alone, before any of its tensors is (`tensorwire.described_output`)."""
    if received.kind == "none":
        return Finding.of("output-none", "forward returned None", stage=STAGE)
    if received.kind == "other":
        return Finding.of("output-type", f"forward returned {received.type_name.rsplit('.', 1)[-1] or 'an object'}, "
                          "not a tensor", stage=STAGE)
    refs = outline.tensors
    if (received.kind == "tensor") != outline.tensor:  # a drop-in replacement's structure
        got = "a tensor" if received.kind == "tensor" else f"a {received.kind} of {len(received.facts)} tensors"
        expected = "a tensor" if outline.tensor else f"a {outline.type_name} of {len(refs)} tensors"
        return Finding.of("output-shape", f"forward returned {got}, the reference {expected}", stage=STAGE)
    if len(received.facts) != len(refs):
        return Finding.of("output-shape", f"forward returned {len(received.facts)} tensors, the reference "
                          f"{len(refs)}", stage=STAGE)
    for fact, c, r in zip(received.facts, received.tensors, refs):
        if not fact.get("exact"):
            return Finding.of("output-type", f"output is a {str(fact.get('type'))[:120]}, a subclass of "
                              "torch.Tensor; a plain torch.Tensor is required", stage=STAGE)
        # (a tensor that did not cross, its dtype or dimensions not carried: its process's description of them)
        shape = list(c.shape) if c is not None else fact.get("shape")
        dtype = str(c.dtype) if c is not None else f"torch.{str(fact.get('dtype'))[:40]}"
        if shape != list(r.shape):
            shown = tuple(shape[:MAX_SHOWN_DIMS]) if isinstance(shape, list) else "unknown"
            return Finding.of("output-shape", f"output shape {shown}, expected {tuple(r.shape)}", stage=STAGE,
                              got=list(shown) if isinstance(shown, tuple) else None, expected=list(r.shape))
        if dtype != str(r.dtype):
            return Finding.of("output-dtype", f"output dtype {dtype}, expected {r.dtype}", stage=STAGE)
        if fact.get("storageless"):
            return Finding.of("output-type", "output has no real storage (a meta or storage-less tensor)",
                              stage=STAGE)
        if c is None and unpacked and fact.get("uncopyable"):
            return Finding.of("output-type", f"output ({dtype}, shape {tuple(shape)}) could not be copied to the referee: "
                              f"{str(fact['uncopyable'])[:240]}", stage=STAGE)
        if c is None and unpacked:
            return Finding.of("output-type", f"output ({dtype}, {len(shape)} dimensions) could not be carried to the "
                              "referee: kerneljudge carries float, integer, bool and complex dtypes but not float8 or "
                              f"uint16-64, and at most {MAX_DIMS} dimensions", stage=STAGE)
        try:
            device = torch.device(str(fact.get("device")))
        except (RuntimeError, ValueError):  # (a description the worker's process forged: the referee's error once)
            return Finding.of("tampering", f"the output's description names no device: {str(fact.get('device'))[:60]}",
                              stage=STAGE)
        if device != r.device:
            return Finding.of("output-device", f"output on {fact.get('device')}, expected {r.device}", stage=STAGE)
    return None


def described_mismatch(index: int, received: Received, outline: Outline) -> Comparison | None:
    """The trial failed on the output's structure as its description tells it (`tensorwire.described_output`: no
    tensor unpacked yet), else None: a wrong-shaped output of half the referee's memory limit ran it out of memory
    being unpacked before its shape was seen, a judge error."""
    problem = structure_problem(received, outline, unpacked=False)
    return None if problem is None else Comparison(Trial(index, False, message=problem.message), [problem])


def compare(index: int, received: Received, outline: Outline, ref_out, ref64_out, atol: float, rtol: float, *,
            verdict_only: bool = False) -> Comparison:
    """Compare one trial's outputs with the reference's (`outline`: its structure); ref64_out may be None when
    the reference cannot run in float64, ref_out (the native output) where it was let go because it is within
    the tolerance of ref64_out everywhere (`within`: the fallback to it below can never be taken then).
    `verdict_only`: an output within the tolerance of the truth everywhere passes at once, without the
    trial's figures (a timed output's check, a probe's): one pass that counts the misses, a third of the
    GPU launches of the figures' pass (each a Python call: 14 ms of a 64 MiB output's 15 ms on the H200).
    Any other output gets the full comparison, so the verdict and the findings are the same either way."""
    problem = structure_problem(received, outline)
    if problem is not None:
        return Comparison(Trial(index, False, message=problem.message), [problem])
    cands = received.tensors
    refs = as_tensors(ref_out) if ref_out is not None else None
    truths = as_tensors(ref64_out) if ref64_out is not None else refs
    if verdict_only and all(_misses_count(c, t, atol, rtol) == 0 for c, t in zip(cands, truths)):
        return Comparison(Trial(index, True, atol=atol, rtol=rtol,
                                compared_to="native" if ref64_out is None else "float64",
                                mismatched=0, elements=sum(c.numel() for c in cands)))
    findings: list[Finding] = []
    closeness, native = [], []
    for number, (c, t) in enumerate(zip(cands, truths)):
        close = _close(c, t, atol, rtol)
        # an output within the tolerance of float64 passes whatever the reference's own precision; one that is
        # not is compared with the reference at its precision where that reference misses float64 too
        if ref64_out is not None and refs is not None and not close[0] and \
                not _close(refs[number], t, atol, rtol, find_worst=False)[0]:
            close = _close(c, refs[number], atol, rtol)
            native.append(number)
        closeness.append(close)
    compared_to = "native" if ref64_out is None or native else "float64"
    if native:
        where = "" if len(cands) == 1 else f" (output{'s' if len(native) > 1 else ''} {', '.join(map(str, native))})"
        findings.append(Finding.of("reference-imprecise", f"the reference at its own precision misses the tolerance "
                                   f"against float64{where}; the candidate is compared with the native reference "
                                   "there", stage=STAGE))
    worst = None
    passed, mismatched, max_abs, sum_abs, count, max_rel = True, 0, 0.0, 0.0, 0, 0.0
    worst_elements: list[dict] = []
    for number, (ok, bad, stats) in enumerate(closeness):
        passed &= ok
        mismatched += bad
        if stats["max_abs"] >= max_abs:
            max_abs, worst = stats["max_abs"], stats["worst"]
        sum_abs += stats["sum_abs"]
        count += stats["count"]
        max_rel = max(max_rel, stats["max_rel"])
        worst_elements += [{**({"output": number} if len(cands) > 1 else {}), **e} for e in stats["worst_elements"]]
        if stats["nonfinite"]:
            findings.append(Finding.of("output-nonfinite", f"trial {index}: {stats['nonfinite']} output elements are "
                                       "NaN or Inf where the reference is finite", stage=STAGE, trial=index))
    worst_elements = sorted(worst_elements, key=_badness, reverse=True)[:WORST_SHOWN]
    trial = Trial(index, passed, max_abs, sum_abs / max(count, 1), max_rel, atol, rtol, compared_to, mismatched,
                  worst, None if passed else _mismatch_message(mismatched, count, atol, rtol, max_abs, worst_elements),
                  elements=count, worst=tuple(worst_elements))
    if not passed and not any(f.code == "output-nonfinite" for f in findings):
        findings.append(Finding.of("wrong-output", f"trial {index}: {trial.message}", stage=STAGE, trial=index,
                                   max_abs_err=max_abs, mismatched=mismatched, elements=count))
    return Comparison(trial, findings)


def _worst_elements(out: torch.Tensor, truth: torch.Tensor, bad: torch.Tensor, offset: int) -> list[dict]:
    """Of the elements `bad` marks (in flat blocks starting at element `offset`), the WORST_SHOWN that miss
    by most, each as its flat index, the expected value, the value got and |got - expected| (a NaN where a
    number was expected ranks first)."""
    diff = (out - truth).abs()
    score = torch.where(bad, diff.nan_to_num(nan=float("inf")), torch.full_like(diff, -1.0))
    picked = torch.topk(score, min(WORST_SHOWN, int(bad.sum()))).indices.tolist()
    return [{"index": offset + i, "expected": float(truth[i]), "got": float(out[i]), "abs_err": float(diff[i])}
            for i in picked]


def _badness(element: dict) -> float:
    err = element["abs_err"]
    return float("inf") if err != err else err


def _mismatch_message(mismatched: int, count: int, atol: float, rtol: float, max_abs: float,
                      worst: list[dict]) -> str:
    """'3 of 4096 elements miss atol=0.0001, rtol=0.0001 (max_abs_err=0.5); worst: [0, 7] expected 1.25
    got 1.75, ...' (an element of the second of several outputs: output 1 [0, 7])."""
    shown = ", ".join(f"{'output %d ' % e['output'] if 'output' in e else ''}{e['index']} expected "
                      f"{e['expected']:.6g} got {e['got']:.6g}" for e in worst[:WORST_IN_MESSAGE])
    return (f"{mismatched} of {count} elements miss atol={atol:g}, rtol={rtol:g} (max_abs_err={max_abs:.3g})"
            + (f"; worst: {shown}" if shown else ""))


def _close(out: torch.Tensor, truth: torch.Tensor, atol: float, rtol: float,
           find_worst: bool = True) -> tuple[bool, int, dict]:
    """Elementwise tolerance check in float64 with NaN/Inf handled: where the truth is not finite,
    the output must equal it (NaN where NaN). Done block by block (`float64_blocks`), each block's figures
    kept on the device and read back once (a read per figure and block was seven waits for the GPU per
    block); the worst elements are looked for in a second pass, only where some element missed and
    `find_worst` asks for them (not for a verdict alone)."""
    n = out.numel()
    rows = []
    for begin, (o, t) in float64_blocks(out, truth):
        finite, bad, diff = _misses(o, t, atol, rtol)
        block_max, block_arg = diff.max(dim=0)
        rows.append(torch.stack([block_max, block_arg.to(torch.float64) + begin, bad.sum().to(torch.float64),
                                 (finite & ~torch.isfinite(o)).sum().to(torch.float64),
                                 torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff)).sum(),
                                 (diff / t.abs().clamp_min(atol)).max()]))
    total = {"bad": 0, "nonfinite": 0, "max_abs": 0.0, "argmax": 0, "sum_abs": 0.0, "max_rel": 0.0}
    for number, (block_max, argmax, bad, nonfinite, sum_abs, max_rel) in enumerate(
            torch.stack(rows).tolist() if rows else []):
        if number == 0 or block_max > total["max_abs"]:
            total["max_abs"], total["argmax"] = block_max, int(argmax)
        total["bad"] += int(bad)
        total["nonfinite"] += int(nonfinite)
        total["sum_abs"] += sum_abs
        total["max_rel"] = max(total["max_rel"], max_rel)
    worst: list[dict] = []
    if total["bad"] and find_worst:
        for begin, (o, t) in float64_blocks(out, truth):
            _, bad, _ = _misses(o, t, atol, rtol)
            if bad.any():
                worst = sorted(worst + _worst_elements(o, t, bad, begin), key=_badness, reverse=True)[:WORST_SHOWN]
    shape = tuple(out.shape)
    for element in worst:
        element["index"] = list(_unravel(element["index"], shape))
    return total["bad"] == 0, total["bad"], {
        "max_abs": total["max_abs"], "sum_abs": total["sum_abs"], "count": n, "max_rel": total["max_rel"],
        "worst": _unravel(total["argmax"], shape) if n and out.dim() else (), "nonfinite": total["nonfinite"],
        "worst_elements": worst,
    }


def _passing(o: torch.Tensor, t: torch.Tensor, finite: torch.Tensor, distance: torch.Tensor, atol: float,
             rtol: float) -> torch.Tensor:
    """Which elements of a float64 block `o` pass against its truth `t` (`finite`: where `t` is; `distance`:
    |o - t|): within atol + rtol * |t| where the truth is finite (a NaN difference misses), else equal to it
    (NaN where NaN)."""
    return torch.where(finite, distance <= t.abs().mul_(rtol).add_(atol), (o == t) | (torch.isnan(o) & torch.isnan(t)))


def _misses(o: torch.Tensor, t: torch.Tensor, atol: float, rtol: float) -> tuple[torch.Tensor, ...]:
    """For one float64 block of an output `o` and its truth `t`: where the truth is finite, which elements
    miss, and |o - t| where the truth is finite (0 elsewhere; a NaN difference as +inf)."""
    finite = torch.isfinite(t)
    distance = (o - t).abs_()
    missed = ~_passing(o, t, finite, distance, atol, rtol)
    diff = distance.masked_fill_(~finite, 0.0)
    return finite, missed, diff.nan_to_num_(nan=float("inf"), posinf=float("inf"))


def within(ref_out, ref64_out, atol: float, rtol: float) -> bool:
    """Whether the reference's output at its own precision is within the tolerance of the float64 truth
    everywhere (`_passing`: then it is NaN exactly where the truth is, and infinite where it is)."""
    return all(_misses_count(r, t, atol, rtol) == 0 for r, t in zip(as_tensors(ref_out), as_tensors(ref64_out)))


def _misses_count(out: torch.Tensor, truth: torch.Tensor, atol: float, rtol: float) -> int:
    """How many elements of `out` miss (`_passing`), counted block by block on the device, read once."""
    count = None
    for _, (o, t) in float64_blocks(out, truth):
        passing = _passing(o, t, torch.isfinite(t), (o - t).abs_(), atol, rtol).sum()
        missed = o.numel() - passing
        count = missed if count is None else count + missed
    return int(count) if count is not None else 0


def _unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major index of element `flat` (torch.unravel_index imports torch._dynamo on first use: 2 s)."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size)
        index.append(i)
    return tuple(reversed(index))


def compare_allclose(index: int, received: Received, outline: Outline, ref_out, atol: float | None,
                     rtol: float | None) -> Comparison:
    """KernelBench's rule: shapes, then torch.allclose against the native reference (no float64)."""
    problem = structure_problem(received, outline)
    if problem is not None:
        return Comparison(Trial(index, False, message=problem.message), [problem])
    a, r = tolerance(outline.dtype, atol, rtol)
    outs, refs = received.tensors, as_tensors(ref_out)
    diffs = [(o.double() - e.double()).abs() for o, e in zip(outs, refs)]
    max_abs = max(float(d.max()) if d.numel() else 0.0 for d in diffs)
    mean_abs = sum(float(d.sum()) for d in diffs) / max(1, sum(d.numel() for d in diffs))
    passed = all(torch.allclose(o, e, atol=a, rtol=r) for o, e in zip(outs, refs))
    trial = Trial(index, passed, max_abs, mean_abs, None, a, r, "native", None, None,
                  None if passed else f"max_abs_err={max_abs:.3g}, mean_abs_err={mean_abs:.3g}")
    findings = [] if passed else [Finding.of("wrong-output", f"trial {index} (KernelBench protocol): "
                                             f"max_abs_err={max_abs:.3g}", stage=STAGE, trial=index)]
    return Comparison(trial, findings)


def unwritten(received: Received, ref_out) -> int:
    """Output elements that are NaN where the reference's are not (left unwritten on poisoned memory); `ref_out`
    the native output or, where that was let go, the float64 truth (NaN at the same elements: `within`)."""
    refs = as_tensors(ref_out) or []
    counts = [(torch.isnan(x) & ~torch.isnan(y)).sum() for o, r in zip(received.tensors, refs)
              if o is not None and o.shape == r.shape and o.is_floating_point() for _, (x, y) in float64_blocks(o, r)]
    return int(torch.stack(counts).sum()) if counts else 0  # one read of the device for all the blocks


def pair_difference(first: Received, second: Received, atol: float | None, rtol: float | None) -> str | None:
    """Why two outputs of the same inputs disagree (beyond the tolerance of their dtype), or None."""
    if first.kind != second.kind or len(first.tensors) != len(second.tensors):
        return "the two calls returned different kinds of output"
    for a, b in zip(first.tensors, second.tensors):
        if a is None or b is None:
            continue
        if a.shape != b.shape:
            return "shapes differ"
        at, rt = tolerance(a.dtype, atol, rtol)
        misses = [float((x - y).abs().nan_to_num(float("inf")).max()) for _, (x, y) in float64_blocks(a, b)
                  if not torch.allclose(x, y, atol=at, rtol=rt, equal_nan=True)]
        if misses:
            return f"max difference {max(misses):.3g}"
    return None
