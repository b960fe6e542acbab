"""KernelBench's correctness protocol, reproduced for compatibility (`--protocol kernelbench`).

As KernelBench's own eval does it: seed 42 before constructing Model and again before ModelNew,
no state_dict copy (weights match only if both draw them in the same order); 5 trials whose seeds
come from torch.randint after seeding 42; each trial reseeds, draws inputs, runs the reference and
then the candidate on the same, uncloned tensors; shape check, then allclose with atol = rtol = tol.
Nothing else: no float64 reference, no mutation check, no probes. The pipeline runs the strict
protocol beside it and reports where the two verdicts differ.
"""

from __future__ import annotations

import torch

from kerneljudge.records import Finding, Trial
from kerneljudge.worker import compare
from kerneljudge.worker.check import CheckOutcome
from kerneljudge.worker.failures import classify
from kerneljudge.worker.session import Session, synchronize

KERNELBENCH_SEED = 42
STAGE = "check"


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def run_kernelbench_check(session: Session, *, trials: int, atol: float | None, rtol: float | None) -> CheckOutcome:
    outcome = CheckOutcome()
    problem, path = session.loaded.problem, session.loaded.candidate.__file__
    init_inputs = problem.get_init_inputs()
    with torch.no_grad():
        _seed(KERNELBENCH_SEED)
        reference = problem.Model(*init_inputs).to(session.device)
        try:
            _seed(KERNELBENCH_SEED)
            candidate = session.loaded.model_new(*init_inputs).to(session.device)
        except BaseException as exc:  # noqa: BLE001 - candidate code
            failure = classify(exc, stage=STAGE, code="constructor-error", what="ModelNew(*get_init_inputs())",
                               source_file=path)
            outcome.findings.append(failure.finding)
            outcome.poisoned = failure.poisoned
            return outcome
    torch.manual_seed(KERNELBENCH_SEED)
    seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]
    for index, seed in enumerate(seeds):
        _seed(seed)
        inputs = [a.to(session.device) if isinstance(a, torch.Tensor) else a for a in problem.get_inputs()]
        with torch.no_grad():
            _seed(seed)
            expected = reference(*inputs)
            synchronize(session.device)
            _seed(seed)
            try:
                out = candidate(*inputs)
                synchronize(session.device)
            except BaseException as exc:  # noqa: BLE001 - candidate code
                failure = classify(exc, stage=STAGE, code="forward-error", what="ModelNew.forward", source_file=path)
                outcome.findings.append(failure.finding)
                outcome.poisoned = failure.poisoned
                outcome.trials.append(Trial(index, False, message=failure.finding.message))
                return outcome
        structure = compare.structure_problem(out, expected)
        if structure is not None:
            outcome.findings.append(structure)
            outcome.trials.append(Trial(index, False, message=structure.message))
            continue
        a, r = compare.tolerance(expected, atol, rtol)
        outs, refs = compare.as_tensors(out), compare.as_tensors(expected)
        diffs = [(o.double() - e.double()).abs() for o, e in zip(outs, refs)]
        max_abs = max(float(d.max()) if d.numel() else 0.0 for d in diffs)
        mean_abs = sum(float(d.sum()) for d in diffs) / max(1, sum(d.numel() for d in diffs))
        passed = all(torch.allclose(o, e, atol=a, rtol=r) for o, e in zip(outs, refs))
        outcome.trials.append(Trial(index, passed, max_abs, mean_abs, None, a, r, "native", None, None,
                                    None if passed else f"max_abs_err={max_abs:.3g}, mean_abs_err={mean_abs:.3g}"))
        if not passed:
            outcome.findings.append(Finding.of("wrong-output", f"trial {index} (KernelBench protocol): "
                                               f"max_abs_err={max_abs:.3g}", stage=STAGE, trial=index))
    return outcome
