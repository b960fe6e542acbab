"""Stage "check" inside the worker: build both models, then N correctness trials.

Protocol (strict, the default): reference and candidate are constructed from the same seed, then the
reference's state_dict is loaded into the candidate (extra candidate buffers allowed), both in eval and
inference mode on the device. Each trial draws fresh inputs from its own seed; each model gets its own
clones; the candidate runs first, on memory the judge poisoned, so it can never find the reference's
result in a freed block; its inputs are compared bit for bit afterwards; the reference also runs in
float64 on upcast copies. The KernelBench protocol (`--protocol kernelbench`) is reproduced in
`kernelbench.py`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch

from kerneljudge.records import Finding, Trial
from kerneljudge.worker import compare
from kerneljudge.worker.failures import Classified, classify
from kerneljudge.worker.session import Session, clone_args, derive_seed, synchronize, upcast

STAGE = "check"
POISON_BYTE = 0xFF  # every float format reads 0xFF.. as NaN


@dataclass
class CheckOutcome:
    """What a check stage found: the trials, the findings, and whether the process must be dropped."""

    trials: list[Trial] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    poisoned: bool = False


def construct(session: Session) -> Classified | Finding | None:
    """Build reference, candidate and the float64 reference; load the reference's state into the candidate."""
    problem, path = session.loaded.problem, session.loaded.candidate.__file__
    init_seed = derive_seed(session.seed, "init")
    try:
        init_inputs = session.init_inputs()
        torch.manual_seed(init_seed)
        with torch.device(session.device):  # parameters are initialised where they will live
            reference = problem.Model(*copy.deepcopy(init_inputs))
    except Exception as exc:  # noqa: BLE001 - the problem's own code
        return classify(exc, stage=STAGE, code="problem-error", what="Model(*get_init_inputs())")
    try:
        torch.manual_seed(init_seed)
        with torch.device(session.device):
            candidate = session.loaded.model_new(*copy.deepcopy(init_inputs))
    except BaseException as exc:  # noqa: BLE001 - candidate code
        return classify(exc, stage=STAGE, code="constructor-error", what="ModelNew(*get_init_inputs())",
                        source_file=path)
    mismatch = load_reference_state(reference, candidate)
    if mismatch is not None:
        return mismatch
    try:
        session.reference = reference.to(session.device).eval()
        session.candidate = candidate.to(session.device).eval()
    except BaseException as exc:  # noqa: BLE001
        return classify(exc, stage=STAGE, code="constructor-error", what=f"moving ModelNew to {session.device}",
                        source_file=path)
    try:
        session.reference64 = copy.deepcopy(session.reference).to(torch.float64)
    except Exception:  # noqa: BLE001 - the reference may not support float64; trials say so
        session.reference64 = None
    return None


def load_reference_state(reference: torch.nn.Module, candidate) -> Finding | None:
    """Copy the reference's parameters and buffers into the candidate; every reference key must fit."""
    reference_state = reference.state_dict()
    if not isinstance(candidate, torch.nn.Module):
        if not reference_state:
            return None
        return Finding.of("state-dict-mismatch", f"ModelNew is a {type(candidate).__name__}, not an nn.Module, so "
                          "the reference's parameters cannot be loaded into it", stage=STAGE)
    candidate_state = candidate.state_dict()
    missing = [k for k in reference_state if k not in candidate_state]
    wrong = [f"{k} {tuple(candidate_state[k].shape)} (reference {tuple(v.shape)})"
             for k, v in reference_state.items() if k in candidate_state and candidate_state[k].shape != v.shape]
    if missing or wrong:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"shape of {'; '.join(wrong)}"] if wrong else [])
        return Finding.of("state-dict-mismatch", f"ModelNew does not hold the reference's parameters: {'; '.join(parts)}"
                          f" (ModelNew has: {', '.join(candidate_state) or 'nothing'})", stage=STAGE,
                          missing=missing)
    candidate.load_state_dict(reference_state, strict=False)
    return None


def poison_free_memory(device: torch.device, sizes: list[int]) -> None:
    """Fill blocks of the allocator with NaN bytes and free them, so an output the candidate allocates but
    never writes reads NaN (not zeros, and never an earlier result). One block per expected output size
    (the caching allocator hands a freed block of that size to the next request of that size), plus a
    large one. On the CPU freed chunks are reused by malloc only sometimes: there it is best effort."""
    blocks = [torch.empty(n, dtype=torch.uint8, device=device).fill_(POISON_BYTE) for n in sizes if n > 0]
    if device.type == "cuda":
        blocks.append(torch.empty(max(sizes + [0]) * 4 + (1 << 20), dtype=torch.uint8, device=device).fill_(POISON_BYTE))
    del blocks


def same_bits(before: list, after: list) -> bool:
    for a, b in zip(before, after):
        if isinstance(a, torch.Tensor):
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if not torch.equal(a.reshape(-1).view(torch.uint8) if a.numel() else a,
                               b.reshape(-1).view(torch.uint8) if b.numel() else b):
                return False
    return True


def tensor_sizes(values) -> list[int]:
    """Byte sizes of the tensors in an output or an argument list."""
    tensors = compare.as_tensors(values) if not isinstance(values, list) else [
        v for v in values if isinstance(v, torch.Tensor)]
    return [t.numel() * t.element_size() for t in tensors or []]


def run_trial(session: Session, index: int, seed: int, atol, rtol, outcome: CheckOutcome) -> bool:
    """One strict trial; returns False when the stage must stop (a blocking failure)."""
    inputs = session.make_inputs(seed)
    candidate_args, reference_args, before = clone_args(inputs), clone_args(inputs), clone_args(inputs)
    poison_free_memory(session.device, session.output_sizes or tensor_sizes(inputs))
    try:
        out = session.run(session.candidate, candidate_args)
        synchronize(session.device)
    except BaseException as exc:  # noqa: BLE001 - candidate code
        failure = classify(exc, stage=STAGE, code="forward-error", what="ModelNew.forward",
                           source_file=session.loaded.candidate.__file__)
        outcome.findings.append(failure.finding)
        outcome.poisoned |= failure.poisoned
        outcome.trials.append(Trial(index, False, message=failure.finding.message))
        return False
    if not same_bits(before, candidate_args):
        outcome.findings.append(Finding.of("input-mutation", f"trial {index}: the candidate's forward changed its "
                                           "input tensors", stage=STAGE, trial=index))
    try:
        expected = session.run(session.reference, reference_args)
        expected64 = session.run(session.reference64, upcast(clone_args(inputs))) if session.reference64 else None
    except Exception as exc:  # noqa: BLE001 - the problem's own code
        failure = classify(exc, stage=STAGE, code="problem-error", what="the reference Model.forward")
        outcome.findings.append(failure.finding)
        outcome.poisoned |= failure.poisoned
        return False
    session.output_sizes = tensor_sizes(expected)
    a, r = compare.tolerance(expected, atol, rtol)
    result = compare.compare(index, out, expected, expected64, a, r)
    outcome.trials.append(result.trial)
    outcome.findings.extend(result.findings)
    return True


def run_check(session: Session, *, trials: int, atol: float | None, rtol: float | None,
              label: str = "trial") -> CheckOutcome:
    """Construct the models (once per session) and run `trials` strict trials."""
    outcome = CheckOutcome()
    if session.candidate is None:
        failure = construct(session)
        if isinstance(failure, Classified):
            outcome.findings.append(failure.finding)
            outcome.poisoned = failure.poisoned
            return outcome
        if failure is not None:
            outcome.findings.append(failure)
            return outcome
        if session.reference64 is None:
            outcome.findings.append(Finding.of("no-float64-reference", "the reference cannot run in float64; errors "
                                               "are measured against it at its own precision", stage=STAGE))
    for index in range(trials):
        if not run_trial(session, index, derive_seed(session.seed, label, index), atol, rtol, outcome):
            break
    outcome.findings = _deduplicated(outcome.findings, len(outcome.trials))
    return outcome


def _deduplicated(findings: list[Finding], trials: int) -> list[Finding]:
    """One finding per code: the first, saying in how many of the `trials` trials it was seen."""
    first: dict[str, Finding] = {}
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
        first.setdefault(f.code, f)
    return [f if counts[c] == 1 else Finding(f.code, f.severity, f"{f.message} (seen in {counts[c]} of {trials} "
                                              "trials)", f.fix, f.stage, {**f.details, "count": counts[c]})
            for c, f in first.items()]
