"""Stage "probe": behaviours a correct-looking candidate must not have, decided in the judge.

Each probe is a short exchange: the referee draws inputs (keeping the reference's outputs) or changes
the parameters; the worker calls the candidate the way a real caller could (new parameter values, the
same buffers holding new values, a second call on the same inputs, poisoned memory, a profiler watching)
and hands back outputs and observations; the referee compares; the judge decides. What only the
candidate's process can observe (threads it left running, memory it shares, streams it used) is a
claim from that process: it can only make the candidate look worse unless forged, and a forged reply
is no better than silence (README: what the judge trusts).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from kerneljudge import isolation, protocol
from kerneljudge.records import Finding
from kerneljudge.seeds import derive_seed
from kerneljudge.stages.context import Judging, StageEnded, fingerprints_agree

STAGE = "probe"


def _seed(j: Judging, label: str) -> int:
    return derive_seed(j.info["run_seed"], f"probe:{label}")


def _check_again(j: Judging, label: str, **flags) -> str | None:
    """Draw, call, compare: the failed comparison's message, or None when the output matches."""
    seed = _seed(j, label)
    reply = j.forward(j.draw(seed, STAGE), STAGE, **flags)
    trial, findings, _ = j.compare(seed, 0, reply, STAGE, verdict_only=True)
    return None if trial.passed else (trial.message or "; ".join(f.message for f in findings) or "outputs differ")


def probe_op_trace(j: Judging) -> list[Finding]:
    """Rows 12-13, 31: which of the candidate's own kernels ran (counted where they run: worker/optrace.py),
    and which of the reference's heavy ops it calls. The share of the call's time (device time on a GPU)
    its kernels took is reported, not judged: an honest epilogue kernel beside a library GEMM takes as
    little as a decoy run on a scrap of data."""
    seed = _seed(j, "trace")
    reference = j.take(j.referee.call(protocol.ProfileReference(seed)), STAGE)
    j.info["reference_aliases"] = reference.get("aliases")
    drawn = j.draw(seed, STAGE, expect=False)
    trace = j.observe("trace", drawn, STAGE).get("trace")
    if not isinstance(trace, dict):
        return [Finding.of("tampering", "the worker's op trace was missing", stage=STAGE)]
    own = protocol.strings(trace.get("own_kernels", []), "own_kernels")
    own_calls = {str(k): int(protocol.number(v, "own_calls", low=0)) for k, v in dict(trace.get("own_calls", {})).items()}
    ops = set(protocol.strings(trace.get("ops", []), "ops", limit=100_000))
    heavy = list(reference.get("heavy_ops", []))
    called = [op for op in heavy if op in ops]
    share = protocol.number(trace.get("own_share", 0.0), "own_share", low=0.0, high=1.0)
    j.info["op_trace"] = {"own_kernels": own, "own_calls": own_calls, "own_share": share,
                          "reference_heavy_ops": heavy, "reference_ops_called": called,
                          "gpu_kernels": [k[0] for k in trace.get("kernels", [])[:20] if isinstance(k, list)]}
    j.info["trace"] = trace
    names = ", ".join(called)
    if not own:
        return [Finding.of("pytorch-rewrite", "no custom kernel: a PyTorch rewrite"
                           + (f" (calls the reference's {names})" if called else ""), stage=STAGE,
                           reference_ops_called=called)]
    if not any(own_calls.values()):
        listed = ", ".join(own[:6])
        if called:
            return [Finding.of("reference-fallback", f"its own kernels ({listed}) never ran, and it computed with "
                               f"the reference's {names}", stage=STAGE)]
        return [Finding.of("decoy-kernel", f"its own kernels ({listed}) never ran during forward", stage=STAGE)]
    if called:
        return [Finding.of("reference-ops", f"besides its own kernels it calls the reference's {names}", stage=STAGE)]
    return []


def probe_streams(j: Judging) -> list[Finding]:
    """Row 7: the call's work must be ordered on the caller's stream. From the bracketed profile of the op
    trace: kernels on another stream may neither start before the caller's stream reached the call nor end
    after it moved past it; and the output, read in stream order at once, must equal the output after a
    device-wide synchronisation."""
    trace = j.info.get("trace") or {}
    findings = []
    bracket = trace.get("bracket")
    if not bracket:
        j.info["streams"] = {"error": "the profiler recorded no stream bracket; stream order not checked"}
    else:
        (_, caller, _, hold_end), (_, _, marker_start, _) = bracket
        kernels = [k for k in trace.get("kernels", []) if isinstance(k, list) and len(k) == 4]
        foreign = [k for k in kernels if k[1] != caller]
        early = [k for k in foreign if k[2] < hold_end]
        late = [k for k in foreign if k[3] > marker_start]
        j.info["streams"] = {"caller": caller, "other_streams": sorted({k[1] for k in foreign}),
                             "not_waiting": [k[0][:80] for k in early[:3]], "not_joined": [k[0][:80] for k in late[:3]]}
        if early or late:
            what = []
            if early:
                what.append(f"{len(early)} kernel(s) on stream(s) {sorted({k[1] for k in early})} started before "
                            "the caller's stream reached the call (they do not wait for it)")
            if late:
                what.append(f"{len(late)} kernel(s) on stream(s) {sorted({k[1] for k in late})} were still running "
                            "after the call returned (not joined back)")
            findings.append(Finding.of("side-stream", f"{'; '.join(what)}; caller's stream {caller}; first: "
                                       f"{(early or late)[0][0][:80]}", stage=STAGE))
    drawn = j.draw(_seed(j, "streams"), STAGE, expect=False)
    seen = j.observe("streams", drawn, STAGE)
    if seen.get("unsynchronized") is not False:
        findings.append(Finding.of("unsynchronized-work", "the output read in the caller's stream order right after "
                                   "the call differs from the output after a device-wide synchronisation", stage=STAGE))
    return findings


def probe_aliasing(j: Judging) -> list[Finding]:
    """Row 3: the output must not share memory with an input, a parameter or a buffer (unless the
    reference's output does the same)."""
    if j.info.get("reference_aliases"):
        return []
    seed = _seed(j, "alias")
    reply = j.forward(j.draw(seed, STAGE, expect=False), STAGE, alias=True)
    j.let_go(reply, STAGE)
    hit = reply.get("aliases")
    return [Finding.of("output-alias", f"the output shares memory with {str(hit)[:200]}", stage=STAGE)] if hit else []


def probe_threads(j: Judging) -> list[Finding]:
    """Row 8: no thread or process started by the call may outlive it, nor a thread or process started before it
    (at import, by an earlier call, however detached) run the candidate's code between calls (an idle helper,
    blocked until a call needs it, may stay); native thread growth is a warning (runtimes start pools lazily,
    so only the Python-visible ones fail). The processes are the judge's own view (isolation.stray_cpu_ms)."""
    drawn = j.draw(_seed(j, "threads"), STAGE, expect=False)
    seen = j.observe("threads", drawn, STAGE)
    threads = protocol.strings(seen.get("threads", []), "threads")
    earlier = protocol.strings(seen.get("earlier", []), "earlier")
    children = [int(protocol.number(c, "children", low=0)) for c in seen.get("children", [])]
    busy_ms = j.worker.stray_cpu_ms(isolation.STRAY_PATIENCE_S)
    if threads or children or earlier or busy_ms:
        what = ([f"thread(s) {', '.join(threads)}"] if threads else []) + (
            [f"process(es) {children}"] if children else [])
        started = [f"{' and '.join(what)} started by the call were still running"] if what else []
        running = [f"thread(s) {', '.join(earlier)}, started before this call (at import or by an earlier one), "
                   "ran the candidate's code with no call in flight"] if earlier else []
        running += [j.worker.strays_said(busy_ms)] if busy_ms else []
        return [Finding.of("thread-spawn", f"after forward returned, {'; '.join(started + running)}", stage=STAGE,
                           threads=threads + earlier)]
    growth = protocol.number(seen.get("native_growth", 0), "native_growth")
    if growth > 0:
        return [Finding.of("native-threads", f"the process had {growth:g} more native threads after the call",
                           stage=STAGE)]
    return []


def probe_repeat(j: Judging) -> list[Finding]:
    """Row 15: two calls on the same values must agree within tolerance (garbage reads, races); the second
    must not return memory the first call's output still holds."""
    drawn = j.draw(_seed(j, "repeat"), STAGE, expect=False)
    seen = j.observe("repeat", drawn, STAGE)
    if protocol.flag(seen.get("shared"), "shared"):
        j.let_go(seen, STAGE)
        return [Finding.of("output-alias", "the second call returned memory the first call's output still holds: "
                           "each call overwrites the previous result", stage=STAGE)]
    check = j.options.check
    answer = j.referee.call(protocol.ComparePair(seen["first"], seen["second"], check.atol, check.rtol), seen["_blobs"])
    j.let_go(seen, STAGE)
    if answer.get("error"):
        return [Finding.of("tampering", "the two outputs of the repeat probe could not be read", stage=STAGE)]
    if answer.get("difference"):
        return [Finding.of("nondeterministic", f"two calls on the same inputs disagree: {answer['difference']}",
                           stage=STAGE)]
    return []


def probe_unwritten_output(j: Judging) -> list[Finding]:
    """Row 6: with freed memory poisoned (NaN bytes) right before the call, every output element must still
    be written. On the CPU the poison is best effort (the allocator may hand out fresh pages)."""
    seed = _seed(j, "poison")
    reply = j.forward(j.draw(seed, STAGE), STAGE, poison=True)
    _, _, unwritten = j.compare(seed, 0, reply, STAGE)
    if unwritten:
        return [Finding.of("unwritten-output", f"{unwritten} output elements still held the poison the judge wrote "
                           "into free memory before the call", stage=STAGE, unwritten=unwritten)]
    return []


def probe_refilled_inputs(j: Judging) -> list[Finding]:
    """Row 4: outputs memoised by input address or identity go stale when the buffers get new values."""
    j.let_go(j.forward(j.draw(_seed(j, "refill-a"), STAGE, expect=False), STAGE, keep="refill"), STAGE)
    failed = _check_again(j, "refill-b", reuse="refill")
    if failed:
        return [Finding.of("stale-inputs", "the same input tensors, refilled with new values, gave the previous "
                           f"output: {failed}", stage=STAGE)]
    return []


# How the worker writes a parameter change into ModelNew (protocol.Perturb.how), as the messages say it.
CHANGES = {"in-place": "changed in place", "replace": "replaced by new objects",
           "data": "swapped under the same objects (`.data = new`: identity and version counter unchanged)",
           "state-dict": "loaded back through a state-dict round trip"}
MAX_ALONE = 6  # entries changed one at a time per way of changing; beyond it a secret sample (bounded cost)


def _change(j: Judging, label: str, names: list[str] | None, how: str) -> str | None:
    """The referee changes `names` (None: every entry) from a secret seed, the worker makes the same change
    and writes it into ModelNew the `how` way, and on new inputs the candidate must match again: the
    failure, or None. The previous call warmed whatever the candidate caches."""
    change = protocol.Perturb(_seed(j, f"{label}-values"), names, how)
    if not _made_alike(j, change):
        return None
    return _check_again(j, f"{label}-check")


def alone_sample(names: list[str], seed: int, cap: int = MAX_ALONE) -> list[str]:
    """The entries changed one at a time: all of them, or `cap` drawn with the run's secret seed (a
    candidate cannot know which of its parameters will be changed alone), in state-dict order."""
    if len(names) <= cap:
        return list(names)
    chosen = set(random.Random(seed).sample(names, cap))
    return [n for n in names if n in chosen]


def probe_parameters(j: Judging) -> list[Finding]:
    """Rows 1 and 29: derived values must follow every parameter and buffer. A warm call fills the
    candidate's caches; then each entry is changed alone (in place, then by new objects), then all of them
    together, then one of them, drawn in secret, swapped under its object (`.data = new`: a cache keyed on each
    object's identity and version counter passed every other change; one entry costs a fraction of all of them,
    a second "all together" change of a large model's parameters in both processes), then a state-dict round
    trip; after each change the candidate must match on new inputs. A cache keyed on one parameter only passes
    the changes of all together, not those of the others alone."""
    names = protocol.strings(j.take(j.referee.call(protocol.StateEntries()), STAGE).get("names"), "names")
    alone = alone_sample(names, _seed(j, "alone"))
    j.info["parameters_changed_alone"] = {"entries": len(names), "changed_alone": alone}
    j.let_go(j.forward(j.draw(_seed(j, "params-warm"), STAGE, expect=False), STAGE), STAGE)
    findings = []
    for how in ("in-place", "replace"):
        stale = {name: failed for name in alone
                 if (failed := _change(j, f"{how}:{name}", [name], how))}
        together = _change(j, f"{how}:all", None, how)
        findings += _stale(how, stale, together)
    if alone:  # one entry, drawn in secret: a cache keyed on every entry's identity and version misses its swap
        name = random.Random(_seed(j, "data-entry")).choice(alone)
        failed = _change(j, f"data:{name}", [name], "data")
        findings += _stale("data", {name: failed} if failed else {}, None)
    findings += _stale("state-dict", {}, _change(j, "state-dict", None, "state-dict"))
    return findings


def _stale(how: str, alone: dict[str, str], together: str | None) -> list[Finding]:
    """One finding per way of changing, naming the entries that, changed alone, left the output stale."""
    if not alone and not together:
        return []
    which = ([f"{', '.join(alone)} changed alone"] if alone else []) + (["all changed together"] if together else [])
    return [Finding.of("stale-parameters", f"after the parameters were {CHANGES[how]} (both models alike), the "
                       f"output no longer matches ({'; '.join(which)}): {next(iter(alone.values()), together)}",
                       stage=STAGE, parameters=list(alone), change=how, together=bool(together))]


def probe_ranges(j: Judging) -> list[Finding]:
    """Row 30: inputs and parameters moved (scaled, sign-flipped, shifted) so that the reference's
    nonlinear ops see their curved range; the referee chooses the moves from the problem itself
    (referee/ranges.py) and compares against float64 with a tolerance relative to the output's magnitude.
    The state entries are put back afterwards."""
    plan = _range_plan(j)
    transforms = [t for t in plan.get("probes", []) if isinstance(t, dict)]
    skipped = [str(s) for s in plan.get("skipped", [])]
    missed = []
    for number, transform in enumerate(transforms):
        _set_range(j, transform)
        seed = _seed(j, f"range-{number}")
        drawn = j.draw(seed, STAGE, transform=transform)
        reply = j.forward(drawn, STAGE)
        check = j.options.check
        answer = j.referee.call(protocol.Compare(seed, 0, reply["output"], None, check.atol, check.rtol, "range"),
                                reply["_blobs"])
        j.let_go(reply, STAGE)  # (a move of the inputs alone sends the worker nothing before the next draw)
        if answer.get("error"):
            j.take(answer, STAGE)  # a referee fault ends the stage
        if answer.get("skipped"):
            skipped.append(f"{transform['label']}: {answer['skipped']}")
        elif "trial" in answer and not answer["trial"]["passed"]:
            missed.append((transform["label"], answer["trial"].get("message") or "outputs differ"))
    if transforms:
        _set_range(j, None)
    j.info["ranges"] = {"probes": [t.get("label") for t in transforms], "sites": plan.get("sites", {}),
                        "skipped": skipped, "plan": plan.get("plan", "made"),
                        **({"short": plan["short"]} if plan.get("short") else {})}
    findings = [Finding.of("probe-skipped", f"range probes: {'; '.join(skipped)}", stage=STAGE, probes=["ranges"])
                ] if skipped else []
    if missed:
        findings.append(Finding.of("range-mismatch", f"with {missed[0][0]} the output no longer matches: "
                                   f"{missed[0][1]}" + (f" (also with {', '.join(m[0] for m in missed[1:])})"
                                                        if len(missed) > 1 else ""),
                                   stage=STAGE, transforms=[m[0] for m in missed]))
    return findings


def _range_plan(j: Judging) -> dict:
    """The referee's plan of range moves (referee/ranges.py): its own for this candidate's draw, or in a batch the
    one an earlier candidate of the problem got on this device (`Judging.memo`), where its moves cover on this
    candidate's draw every bin of each op's curved range they covered on the draw they were chosen on (else the
    referee plans again: `plan` "remade", `short` says where the kept one fell short, and the problem's later
    candidates plan on their own draws). Only a plan the referee calls the problem's alone is kept (none of its
    targets sampled with that candidate's secret seed, none of its moves left untried for the time, a moment's),
    and its rows move, which the seed draws too, takes this candidate's (seeds.rows_seed): the secret part of the
    moves is each candidate's own. (Run alone, a result's `reproduce` command plans on its own draw, and may
    choose other moves.)"""
    seed = _seed(j, "range-plan")
    plans, key = (j.memo.range_plans, j.problem_id) if j.memo is not None and j.problem_id else (None, None)
    kept = plans.get(key) if plans is not None else None
    reply = j.take(j.referee.call(protocol.RangePlan(seed, kept)), STAGE)
    plan = {name: reply[name] for name in ("probes", "skipped", "sites", "plan", "short") if name in reply}
    if plans is not None and plan.get("plan") == "remade":
        plans[key] = None
    elif plans is not None and key not in plans and plan.get("probes") and reply.get("reusable") is True:
        plans[key] = {name: reply[name] for name in ("probes", "skipped", "sites", "bins")}
    return plan


def _set_range(j: Judging, transform: dict | None) -> None:
    _made_alike(j, protocol.RangeSet(transform))


def _made_alike(j: Judging, change: protocol.Perturb | protocol.RangeSet) -> bool:
    """A parameter change made by the referee, then by the worker on ModelNew's entries (proc/perturb.py):
    whether any entry changed. The two fingerprints of the changed entries must agree. Where they do not, the
    worker's entries no longer follow the reference (a reference that changes its own state when called and a
    candidate that does not, entries tied otherwise than the reference's): the referee's entries are sent
    to the worker instead, as all changes were before the eighth session. Still different after that, the
    worker's process says otherwise than it was sent: that is its own doing (`tampering`)."""
    done = j.take(j.referee.call(change), STAGE)
    names = protocol.strings(done.get("names") or [], "names")
    if not names:
        return False
    ours = [float(v) for v in done.get("fingerprint", [])]  # the referee's own figures (a -inf entry sums to -inf)
    how = change.how if isinstance(change, protocol.Perturb) else "in-place"
    # a change made by new objects holds an entry twice in the worker: the referee's large parameters wait in host
    # memory meanwhile (protocol.Park; it brings them back itself before any use of its model, so a failure in
    # between leaves nothing parked that matters)
    parked = how != "in-place"
    if parked:
        j.take(j.referee.call(protocol.Park(True, names)), STAGE)
    made = j.take(j.worker.call(change), STAGE)
    if parked:
        j.take(j.referee.call(protocol.Park(False)), STAGE)
    if fingerprints_agree(made, ours):
        return True
    j.info["parameter_changes_sent"] = j.info.get("parameter_changes_sent", 0) + 1
    state = j.take(j.referee.call(protocol.StateOf(names)), STAGE)
    synced = j.take(j.worker.call(protocol.SyncState(state["names"], state["state"], how), state["_blobs"]), STAGE)
    if not fingerprints_agree(synced, ours):
        j.findings.append(Finding.of("tampering", "the worker's process reported other values of the reference's "
                                     "parameters than it was sent", stage=STAGE))
        raise StageEnded()
    return True


@dataclass(frozen=True)
class Probe:
    name: str
    run: Callable[[Judging], list[Finding]]
    devices: tuple[str, ...] = ("cpu", "cuda")


# Order matters: the op trace feeds the streams and aliasing probes; the probes that change parameters
# come last, after those that need them untouched.
PROBES = (
    Probe("op-trace", probe_op_trace),
    Probe("aliasing", probe_aliasing),
    Probe("threads", probe_threads),
    Probe("repeat", probe_repeat),
    Probe("unwritten-output", probe_unwritten_output),
    Probe("streams", probe_streams, devices=("cuda",)),
    Probe("refilled-inputs", probe_refilled_inputs),
    Probe("parameters", probe_parameters),
    Probe("ranges", probe_ranges),
)


def run_probes(j: Judging, seed: int) -> None:
    """Every probe that applies on this device; findings go on `j`, what they saw on `j.info`, and each one's
    wall time on `j.info["probe_ms"]` (where the probes stage's time goes: a batch's turn is mostly probes)."""
    device_type = j.device.split(":")[0]
    j.info["run_seed"] = seed
    probe_ms = j.info.setdefault("probe_ms", {})
    skipped = [p.name for p in PROBES if device_type not in p.devices]
    if skipped:
        j.findings.append(Finding.of("probe-skipped", f"not on {device_type}: {', '.join(skipped)}", stage=STAGE,
                                     probes=skipped))
    try:
        for probe in PROBES:
            if device_type in probe.devices:
                start_s = j.worker.clock()
                try:
                    j.findings.extend(probe.run(j))
                finally:
                    probe_ms[probe.name] = round((j.worker.clock() - start_s) * 1e3, 1)
    except StageEnded:
        pass
    except (protocol.Untrusted, TypeError, ValueError, KeyError, AttributeError) as exc:
        # (the probes read the worker's replies, which candidate code can forge: a field of another type, or missing,
        # raised here and ended the judge; `tampering` names the exception, should one be the judge's own bug)
        j.findings.append(Finding.of("tampering", f"a probe's reply from the worker was malformed: "
                                     f"{type(exc).__name__}: {exc}", stage=STAGE))
    finally:
        j.info.pop("run_seed", None)
        j.info.pop("trace", None)
        j.info.pop("reference_aliases", None)
