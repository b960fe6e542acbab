"""What the check, probe and time stages share: the two processes and the relaying between them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from kerneljudge import protocol
from kerneljudge.errors import UsageError
from kerneljudge.isolation import WorkerProcess
from kerneljudge.memtally import MemoryTally
from kerneljudge.options import Options
from kerneljudge.progress import ProgressEvent, ProgressObserver, ignore
from kerneljudge.records import Finding, Trial

FINGERPRINT_TOLERANCE = 1e-9  # the same values (or the same change of them) sum alike: only rounding may differ


class StageEnded(Exception):
    """A blocking finding ended the stage (it is already on `Judging.findings`)."""


@dataclass
class DeviceMemo:
    """What the evaluations of a batch on one device work out once per problem and reuse for its later candidates
    (batch/local.py's lanes, a Ray actor's GPU): the reference's baselines, by problem and timing options
    (measure.py; cross-checked by a short eager run at each candidate), and the range probes' plan, by problem
    (`Judging.problem_id`; probe.py: making the plan runs the reference dozens of times, 0.53 s of a level2/51
    evaluation's 2.05 s of probes on an idle H100, more beside other lanes; checking a kept one on a candidate's
    draw runs it once, and once per move). A kept plan that covered less on a later candidate's draw is None:
    where the nonlinear ops bend moves with the draw there, and each candidate of the problem plans on its own.
    And the device's copy bandwidth (the memory floor's), by device key: settled once per run in the device's first
    baselines stage, before its candidate is loaded (a short copy checked it inside every timing's exclusive hold
    before)."""

    baselines: dict[str, Any] = field(default_factory=dict)
    range_plans: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    bandwidth_gbps: dict[str, float] = field(default_factory=dict)
    # the batches of the reference's full eager run on the device, by baselines key (made with the kept figures,
    # before that run's candidate was loaded; other lanes' workers stopped): (request time - claimed time) per call,
    # topping up a later candidate's short run as the cross-check's reference (measure.KEPT_CHECK_BATCHES)
    reference_slacks_ms: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Judging:
    """One evaluation in progress, as the check, probe and time stages see it."""

    options: Options
    worker: WorkerProcess
    referee: WorkerProcess
    device: str
    findings: list[Finding] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # what the probes saw, for the report
    on_progress: ProgressObserver = ignore
    memo: DeviceMemo | None = None  # a batch's, kept per device across its candidates
    problem_id: str | None = None  # the problem, its sizes, the protocol and the device (cache.key): the memo's key
    tally: MemoryTally | None = None  # both processes' memory, request by request (memtally.py)
    held_checks: list[Any] = field(default_factory=list)  # timed outputs the referee holds, to compare (measure.py)
    moved_bytes: int | None = None  # the reference's inputs and outputs, from the referee (the memory floor's bytes)
    input_bytes: int | None = None  # ... its inputs alone (whether a timed call's inputs are checked too: measure.py)
    flush: str | None = None  # a GPU's flushes, from the referee: "exclusive" (proc/occupy.py) or "shared"

    @property
    def baselines(self) -> dict[str, Any] | None:
        """A batch's baselines by problem key (measure.py), or None outside a batch."""
        return self.memo.baselines if self.memo is not None else None

    def kept_baselines(self, problem_key: str) -> dict[str, Any] | None:
        """The baselines a batch lane measured for this problem at an earlier candidate, or None."""
        if self.baselines is None or not self.options.timing.baselines:
            return None
        return self.baselines.get(problem_key)

    def tell(self, stage: str, message: str, done: int | None = None, total: int | None = None) -> None:
        self.on_progress(ProgressEvent(stage, message, done, total))

    # ---- replies ----------------------------------------------------------------------------------
    def take(self, reply: dict[str, Any], stage: str) -> dict[str, Any]:
        """A reply's findings go on the evaluation; a blocking one (or a referee fault) ends the stage."""
        if reply.get("usage_error"):  # only a device that is not there
            raise UsageError(reply["usage_error"] + "; choose another {argument} (cpu, cuda, cuda:N)", "device")
        if reply.get("error"):
            self.findings.append(Finding.of("judge-error", f"referee: {reply['error']}", stage=stage))
            raise StageEnded()
        found = reply.get("findings") or []
        if not isinstance(found, list):
            found = [{"code": "tampering", "message": "a reply whose findings are not a list"}]
        new = [reply_finding(f, stage) for f in found]
        self.findings.extend(new)
        if any(f.blocking for f in new):
            raise StageEnded()
        return reply

    def let_go(self, reply: dict[str, Any], stage: str) -> None:
        """The worker lets go of the tensors its `reply` shared in its own device memory (proc/deviceshare), once
        nothing reads them any more: it holds them until its next request (any request lets them go:
        worker/server.py), and the referee's next draw would otherwise make its expected outputs beside them
        (level1/7 on an H100: a 4 GiB output held through the next draw, three outputs at once)."""
        if _shared(reply):
            self.take(self.worker.call(protocol.Ready()), stage)

    # ---- the relay --------------------------------------------------------------------------------
    def draw(self, seed: int, stage: str, *, kernelbench: bool = False, expect: bool = True,
             timed: bool = False, transform: dict[str, Any] | None = None, keep_inputs: bool = False) -> dict[str, Any]:
        """Inputs from `seed`, drawn by the referee (which keeps the reference's outputs for them unless
        `expect` is False, and the inputs too where `keep_inputs`), moved by a range probe's `transform`. The worker
        draws and moves the same inputs itself (proc/inputs.py, proc/perturb.Transform: no tensor crosses),
        except under KernelBench's protocol, whose draw is sent.
        `timed`: for a timed output's check (the worker drew them when timed): only the native reference.
        `keep_inputs`: for a comparison of the inputs after the call too (`compare(inputs=True)`)."""
        request = protocol.MakeInputs(seed, kernelbench, expect, float64=not timed, send=kernelbench,
                                      transform=transform, keep_inputs=keep_inputs)
        drawn = self.take(self.referee.call(request), stage)
        if not kernelbench:
            drawn.update(inputs=[], draw=seed, transform=transform)
        return drawn

    def forward(self, drawn: dict[str, Any], stage: str, **flags: Any) -> dict[str, Any]:
        """The candidate on the drawn inputs; the worker's reply (its output as data and blobs)."""
        if flags.get("poison"):
            flags.update(output_bytes=drawn.get("output_bytes"), scratch_bytes=int(drawn.get("scratch_bytes") or 0))
        reply = self.take(self.worker.call(protocol.Forward(drawn["inputs"], drawn.get("draw"), drawn.get("transform"),
                                                            **flags),
                                           drawn["_blobs"]), stage)
        if not isinstance(reply.get("output"), dict):
            self.findings.append(Finding.of("tampering", f"{stage}: the worker's reply carried no output description",
                                            stage=stage))
            raise StageEnded()
        return reply

    def observe(self, what: str, drawn: dict[str, Any], stage: str) -> dict[str, Any]:
        """One call of the candidate on the drawn inputs, watched by the worker (protocol.Observe)."""
        request = protocol.Observe(what, drawn["inputs"], drawn.get("draw"), drawn.get("transform"))
        return self.take(self.worker.call(request, drawn["_blobs"]), stage)

    def compare(self, seed: int, index: int, reply: dict[str, Any] | None, stage: str, *, rule: str = "strict",
                inputs: bool = False, keep: bool = False, verdict_only: bool = False,
                release: bool = True) -> tuple[Trial, list[Finding], int]:
        """The referee's comparison of a worker's output with the kept expectation of `seed` (`verdict_only`: a
        passing trial without figures, and no unwritten count: protocol.Compare). `reply` None: the output the
        referee holds for `index` (protocol.HoldOutput). The worker then lets go of what the reply shared
        (`let_go`, unless `release` is False): the reply's output cannot be compared again."""
        check = self.options.check
        held = reply is None
        reply = reply or {"output": {}, "_blobs": []}
        answer = self.referee.call(protocol.Compare(seed, index, reply["output"],
                                                    reply.get("inputs_after") if inputs else None,
                                                    check.atol, check.rtol, rule, keep, verdict_only, held),
                                   reply["_blobs"])
        if answer.get("error"):
            self.take(answer, stage)  # a referee fault ends the stage
        if release:
            self.let_go(reply, stage)
        findings = [reply_finding(f, stage) for f in answer.get("findings") or []]
        if "trial" not in answer:  # a malformed output: the referee's findings say why
            return Trial(index, False, message="; ".join(f.message for f in findings)), findings, 0
        return Trial.from_json(answer["trial"]), findings, int(answer.get("unwritten", 0))


def _shared(reply: dict[str, Any]) -> bool:
    """Whether a worker's reply handed tensors over in its own device memory: an output's (a call's, or the
    repeat probe's two) or the inputs after a call."""
    outputs = [reply.get(key) for key in ("output", "first", "second")]
    lists = [output.get("tensors") for output in outputs if isinstance(output, dict)] + [reply.get("inputs_after")]
    return any(isinstance(fact, dict) and "shared" in fact for facts in lists if isinstance(facts, list)
               for fact in facts)


def fingerprints_agree(reply: dict, fingerprint: list[float]) -> bool:
    """Whether a worker's reply carries `fingerprint` (the referee's, of the same state entries:
    proc/perturb.fingerprint), to FINGERPRINT_TOLERANCE; a sum that is not finite (a -inf mask buffer) must be
    the same. Anything else in the reply is a disagreement, never an error."""
    theirs = reply.get("fingerprint")
    return type(theirs) is list and len(theirs) == len(fingerprint) and all(
        _same_sum(v, o) for v, o in zip(theirs, fingerprint))


def _same_sum(theirs: Any, ours: float) -> bool:
    if type(theirs) not in (int, float):
        return False
    try:
        theirs = float(theirs)  # an int of 400 digits parses as JSON, and overflows here
    except OverflowError:
        return False
    if not (math.isfinite(theirs) and math.isfinite(ours)):
        return theirs == ours or (math.isnan(theirs) and math.isnan(ours))
    return math.isclose(theirs, ours, rel_tol=FINGERPRINT_TOLERANCE, abs_tol=0.0)


def reply_finding(data: Any, stage: str) -> Finding:
    """A finding from a reply, rebuilt from our catalog (severity and fix are the judge's, whatever the reply
    says; its details plain values, or lists of them: a red team's nested 900 deep ended the report's printing);
    one that is not well formed says so instead of being believed."""
    try:
        details = data.get("details") or {}
        details = {str(k)[:100]: _plain(v) for k, v in list(details.items())[:64]
                   if k not in ("code", "message", "stage")} if isinstance(details, dict) else {}
        return Finding.of(str(data["code"]), str(data["message"])[:20_000], stage=str(data.get("stage", stage))[:100],
                          **details)
    except (KeyError, TypeError, AttributeError):
        return Finding.of("tampering", f"{stage}: a reply carried a malformed finding", stage=stage)


def _plain(value: Any, depth: int = 4) -> Any:
    """A finding's detail as a report can hold it: numbers, short strings, and lists and objects of them a few
    levels deep."""
    if isinstance(value, str):
        return value[:1000]
    if isinstance(value, (type(None), bool, int, float)):
        return value
    if depth > 0 and isinstance(value, list):
        return [_plain(v, depth - 1) for v in value[:1000]]
    if depth > 0 and isinstance(value, dict):
        return {str(k)[:100]: _plain(v, depth - 1) for k, v in list(value.items())[:64]}
    return "(not kept: not a plain value)"
