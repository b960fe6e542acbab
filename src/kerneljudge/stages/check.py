"""Stage "check": ModelNew built with the reference's parameters, then N correctness trials.

Strict protocol (the default): the referee builds the reference from the run's init seed; the worker
builds its own copy of the reference from the same seeds (its digest held against the referee's; the
referee's state is sent where they differ), then ModelNew from the same seed, and loads the reference's
state dict into it (extra candidate buffers allowed). Each trial: the referee draws fresh inputs from the trial's own seed and computes the
reference's outputs (native and float64); the worker runs the candidate on a copy, on memory it poisoned
first, and hands back the output and its inputs as they were after the call; the referee compares.
KernelBench's protocol (`--protocol kernelbench`) is reproduced the same way: seed 42 before each
constructor, no state copy, the reference first on the very values the candidate then gets, allclose.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from kerneljudge import protocol
from kerneljudge.isolation import Pending
from kerneljudge.records import Finding, Trial
from kerneljudge.seeds import derive_seed
from kerneljudge.stages.context import Judging, StageEnded

STAGE = "check"
KERNELBENCH_SEED = 42


@dataclass(frozen=True)
class SetupStarted:
    """The referee's setup in flight, with the seeds the worker must construct ModelNew from alike."""

    pending: Pending
    kernelbench: bool
    init_seed: int
    init_inputs_seed: int
    call_seed: int | None  # every reference call's (none under KernelBench's protocol: its trials reseed)
    ready: dict[str, Any] | None = None  # the referee's reply, where it was collected already (`reference_built`)


def reference_built(j: Judging, started: SetupStarted) -> SetupStarted:
    """The referee's setup answered: the reference is built there (the baselines stage times it before the
    worker imports the candidate)."""
    return dataclasses.replace(started, ready=j.take(j.referee.collect(started.pending), STAGE))


def start_setup(j: Judging, problem: dict[str, Any], seed: int, *, kernelbench: bool = False) -> SetupStarted:
    """The referee starts building the reference (Setup) and its answer is left for `setup`: the pipeline
    sends it before the worker's build, so the two run at once (each took a quarter to half a second of a
    served evaluation on the H200, one after the other), except where the reference is timed first
    (`reference_built`: before anything of the candidate's is imported)."""
    init_seed = KERNELBENCH_SEED if kernelbench else derive_seed(seed, "init")
    init_inputs_seed, call_seed = derive_seed(seed, "init-inputs"), None if kernelbench else derive_seed(seed, "call")
    check = j.options.check
    pending = j.referee.submit(protocol.Setup(problem, init_seed, init_inputs_seed, kernelbench, call_seed,
                                              check.float64_budget_mb, check.atol, check.rtol))
    return SetupStarted(pending, kernelbench, init_seed, init_inputs_seed, call_seed)


def setup(j: Judging, problem: dict[str, Any], seed: int, *, kernelbench: bool = False,
          started: SetupStarted | None = None) -> dict[str, Any] | None:
    """The referee builds the reference (or has, when `started`), the worker builds ModelNew from the same
    seed and loads its state. Returns the referee's setup reply (trial seeds under KernelBench's protocol;
    `reference_state`: where the state the worker loaded into ModelNew came from), None if a finding ended it."""
    try:
        started = started or start_setup(j, problem, seed, kernelbench=kernelbench)
        ready = started.ready if started.ready is not None else j.take(j.referee.collect(started.pending), STAGE)

        def construct(state: dict[str, Any] | None, derive: bool) -> dict[str, Any]:
            request = protocol.Construct(started.init_seed, started.init_inputs_seed, state and state["state"],
                                         state["names"] if state else ready["names"], started.call_seed,
                                         ready.get("parameters"), derive=derive)
            return j.take(j.worker.call(request, state["_blobs"] if state else []), STAGE)

        built = construct(None, derive=not started.kernelbench)
        ready["reference_state"] = "none loaded (KernelBench's protocol)" if started.kernelbench else \
            "built in the worker"
        if not started.kernelbench and not _same_digest(built.get("digest"), ready["digest"]):
            # the worker's own build of the reference differs (a constructor that depends on the process, or
            # draws from elsewhere than the seeded generators): ModelNew again, with the referee's state sent
            ready["reference_state"] = "sent by the referee"
            construct(j.take(j.referee.call(protocol.StateOf(ready["names"])), STAGE), derive=False)
    except StageEnded:
        return None
    return ready


def _same_digest(theirs: Any, ours: list[int]) -> bool:
    """Whether the worker's digest of its build of the reference's state (untrusted data) is the referee's,
    exactly (proc/perturb.digest)."""
    return type(theirs) is list and all(type(v) is int for v in theirs) and theirs == ours


def note_reference(j: Judging, drawn: dict[str, Any]) -> None:
    """What the referee learnt running the reference, said once per evaluation: it draws random numbers
    (both models' calls were seeded alike), or its float64 copy is not used (and why)."""
    reference = drawn.get("reference") or {}
    seen = {f.code for f in j.findings}
    if reference.get("stochastic") and "stochastic-reference" not in seen:
        j.findings.append(Finding.of("stochastic-reference", "the reference draws random numbers in forward: the "
                                     "random-number generators were seeded alike before the reference's and the "
                                     "candidate's calls", stage=STAGE))
    if reference.get("float64") == "native" and "no-float64-reference" not in seen:
        j.findings.append(Finding.of("no-float64-reference", f"{reference.get('why')}; errors are measured against "
                                     "the reference at its own precision, with the tolerance of its dtype",
                                     stage=STAGE, why=reference.get("why")))


def run_check(j: Judging, seed: int, trials: int, *, label: str = "trial",
              kernelbench_seeds: list[int] | None = None) -> list[Trial]:
    """`trials` trials (strict, or KernelBench's when its trial seeds are given); their findings go on `j`
    once per code, with how many trials showed it."""
    results: list[Trial] = []
    found: list[Finding] = []
    try:
        for index in range(trials):
            if kernelbench_seeds is not None:
                trial_seed = kernelbench_seeds[index]
                drawn = j.draw(trial_seed, STAGE, kernelbench=True)
                reply = _forward(j, drawn, index, results, reseed=trial_seed)
                trial, findings, _ = j.compare(trial_seed, index, reply, STAGE, rule="kernelbench")
            else:
                trial_seed = derive_seed(seed, label, index)
                drawn = j.draw(trial_seed, STAGE, keep_inputs=True)
                note_reference(j, drawn)
                reply = _forward(j, drawn, index, results, poison=True, return_inputs=True)
                trial, findings, _ = j.compare(trial_seed, index, reply, STAGE, inputs=True)
            results.append(trial)
            found.extend(findings)
            if any(f.blocking for f in findings):
                break
    except StageEnded:
        pass
    j.findings.extend(_once_per_code(found, len(results)))
    return results


def _forward(j: Judging, drawn: dict[str, Any], index: int, results: list[Trial], **flags: Any) -> dict[str, Any]:
    try:
        return j.forward(drawn, STAGE, **flags)
    except StageEnded:
        failed = j.findings[-1] if j.findings else None
        results.append(Trial(index, False, message=failed.message if failed else "the call failed"))
        raise


def _once_per_code(findings: list[Finding], trials: int) -> list[Finding]:
    """One finding per code: the first, saying in how many of the trials it was seen."""
    first: dict[str, Finding] = {}
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.code] = counts.get(f.code, 0) + 1
        first.setdefault(f.code, f)
    return [f if counts[c] == 1 else Finding(f.code, f.severity, f"{f.message} (seen in {counts[c]} of {trials} "
                                              "trials)", f.fix, f.stage, {**f.details, "count": counts[c]})
            for c, f in first.items()]
