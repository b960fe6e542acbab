"""The candidate's worker: one dispatch table from request type to handler; every reply is data.

Requests (see `protocol`): ping, build/compile (import the candidate, compiling on the way), construct
(ModelNew with the reference's parameters, as this process builds them or as sent), forward (the candidate on relayed inputs, the output handed
back at once), perturb and range-set (the probes' parameter changes, made here alike), observe (threads, repeats, the op trace,
streams), and the timed side of the measurement loop. Candidate code is only ever called through
`calls.guarded`. The guard's tampering check (defence in depth: no verdict depends on it) is added to
any reply after which something it watches changed.
"""

from __future__ import annotations

import threading
import traceback
from pathlib import Path
from typing import Any, Callable, Iterable

import psutil
import torch

from kerneljudge import protocol
from kerneljudge.proc import deviceshare, machine, memory, occupy, streamhold, tensorwire
from kerneljudge.proc.inputs import (build_seeded, caller_views, equal_bits, make_inputs, refill, same_place,
                                     seed_generators)
from kerneljudge.proc.perturb import Transform, digest, fingerprint, move, perturbation, tie_key, ties
from kerneljudge.proc.profile import HOLD_CYCLES, output_aliases, spans_overlap, storage_span
from kerneljudge.proc.rng import CallSeeding
from kerneljudge.proc.serve import Ask
from kerneljudge.proc.timed import TimedModel
from kerneljudge.records import Finding
from kerneljudge.worker import build, optrace
from kerneljudge.worker.calls import guarded
from kerneljudge.worker.guard import Guard
from kerneljudge.worker.session import Session
from kerneljudge.worker.watch import TimedWatch, running_candidate_code

POISON_BYTE = 0xFF  # every float format reads 0xFF.. as NaN
POISON_EXTRA_BYTES = 1 << 30  # the most the large poisoned block on a GPU takes, beyond one block per output size
# A check's inputs after the call go back shared (held here until the next request, compared where they lie)
# where they are at most this share of the problem's own memory (parameters, inputs, outputs); larger ones go
# through host memory and are let go at once: held beside the output during the referee's comparison, an
# elementwise problem's inputs (half its memory) took the judge's peak from 2.5 to 3.0 footprints (H200).
INPUTS_SHARED_UP_TO = 0.25
# The reference's state, as built here or sent, waits in host memory while ModelNew is built (then is loaded from
# there) where it is this large on a device of these types: built beside ModelNew's own parameters, it made this
# process hold the parameters twice while the referee held them once (level2/56 on an H100: three times its 4 GiB
# weight at the worker's construction, the judge's peak once the referee no longer held them in float64)
STATE_IN_HOST_FROM_BYTES = 16 << 20
STATE_IN_HOST_DEVICES = ("cuda",)
# In a call's inputs after it, in place of an argument it pointed at other memory (the referee finds a value where
# a tensor was drawn: `input-mutation`)
REPOINTED = "re-pointed by the call"
Reply = tuple[dict[str, Any], list]


def _reply(findings: list[Finding], poisoned: bool = False, blobs: list | None = None, **data: Any) -> Reply:
    return {"findings": [f.to_json() for f in findings], "poisoned": poisoned, **data}, blobs or []


class Worker:
    def __init__(self, guard: Guard,
                 ask: Ask = lambda question: {"error": "Error building extension: no judge to ask"}):
        self.guard = guard
        self.ask = ask  # the judge's answer to a question: its extension builds (worker/build.py)
        self.device = torch.device("cpu")
        self.session: Session | None = None
        self.timed: TimedModel | None = None
        self.watch = TimedWatch(self.device)
        self.exporter: deviceshare.Exporter | None = None  # made at the ping on a GPU (its probe)
        self.share: deviceshare.Exporter | None = None  # the exporter, once the judge said the referee opens it
        self.reported_tampering: set[str] = set()
        self.handlers: dict[type, Callable[[Any, list], Reply]] = {
            protocol.Ping: self.ping, protocol.Build: self.build, protocol.CompileOnly: self.compile,
            protocol.Construct: self.construct, protocol.Forward: self.forward, protocol.Perturb: self.perturb,
            protocol.RangeSet: self.range_set, protocol.SyncState: self.sync_state,
            protocol.Observe: self.observe, protocol.TimeSetup: self.time_setup, protocol.TimeBatch: self.time_batch,
            protocol.ExportOutput: self.export_output, protocol.MemoryReport: self.memory_report,
            protocol.Ready: lambda request, blobs: _reply([]), protocol.ShareOutputs: self.share_outputs,
            protocol.Prepare: self.prepare,
        }
        self.baseline_rss_bytes = memory.rss_now_bytes()

    def handle(self, message: dict[str, Any]) -> Reply:
        op = message.get("op")
        # before any of this request's own work (a patch made during a timed call could do the call's work at
        # the next request's first use of it and undo itself: seen only before that use)
        before = [] if op == protocol.TimeBatch.op else self.guard.tampered(deep=False)
        if self.exporter is not None:
            self.exporter.release()  # the last reply's shared outputs: the referee has read them by this request
        if op == protocol.TimeBatch.op:
            return self._handle(message)  # nothing of the guard's own cost between timed batches (checked after)
        return memory.measured(self.device, lambda: self._watched(message, before))

    def _watched(self, message: dict[str, Any], before: list[str]) -> Reply:
        """The reply, with the guard's tampering check added when something it watches changed (before the
        request's work, `before`, or after it)."""
        reply, blobs = self._handle(message)
        tampered = [name for name in sorted({*before, *self.guard.tampered()}) if name not in self.reported_tampering]
        self.reported_tampering.update(tampered)
        if tampered:
            reply.setdefault("findings", []).append(Finding.of(
                "tampering", f"candidate code replaced {', '.join(tampered[:8])}", stage=str(message.get("op")),
                names=tampered).to_json())
        return reply, blobs

    def _handle(self, message: dict[str, Any]) -> Reply:
        op = message.get("op")
        try:
            request = protocol.from_wire(message)
            handler = self.handlers.get(type(request))
            if handler is None:
                raise ValueError(f"the worker does not answer {request.op!r}")
            reply, blobs = handler(request, message.get("_blobs") or [])
        except Exception as exc:  # noqa: BLE001 - a bug of ours must come back as data, not kill the channel
            reading = self._output_code_raised(exc)
            if reading is not None:
                finding = Finding.of("forward-error", f"reading what ModelNew.forward returned ran the candidate's own "
                                     f"code ({reading}), which raised {type(exc).__name__}: {str(exc)[:300]} (return "
                                     "a plain torch.Tensor)", stage=str(op))
            else:
                detail = "".join(traceback.format_exception(exc)[-6:])
                finding = Finding.of("judge-error", f"{op}: {type(exc).__name__}: {exc}\n{detail}", stage=str(op))
            reply, blobs = _reply([finding])
        return reply, blobs

    def _output_code_raised(self, exc: Exception) -> str | None:
        """Where the candidate's code raised while the worker read an output (a tensor subclass's
        __torch_function__, say: "file:line in name"), or None. Such an output is no plain tensor: the error is
        the candidate's, as if forward had raised, not a fault of the worker's."""
        frames = traceback.extract_tb(exc.__traceback__)
        if self.session is None or not any(f.filename == tensorwire.__file__ for f in frames):
            return None
        own = [f for f in frames if f.filename == self._source()]
        return f"{Path(own[-1].filename).name}:{own[-1].lineno} in {own[-1].name}" if own else None

    def _source(self) -> str:
        return self.session.loaded.candidate.__file__

    def _call(self, args: list, what: str, stage: str):
        """The candidate's call, guarded; on a GPU, what it allocated beyond its outputs is kept for the next
        poisoning (`poison_free_memory`)."""
        start = memory.cuda_call_start(self.device) if self.device.type == "cuda" else None
        called = guarded(lambda: self.session.call(args), stage=stage, code="forward-error", what=what,
                         source_file=self._source())
        if start is not None and not called.failure:
            self.session.scratch_bytes = max(0, memory.cuda_call_peak(self.device) - start - memory.tensor_bytes(
                tensorwire.tensors_of(called.value)))
        return called

    def prepare(self, request: protocol.Prepare, blobs: list) -> Reply:
        machine.prepare_device(request.device)
        if request.device.startswith("cuda"):
            build.preload_toolchain()
        return _reply([])

    def ping(self, request: protocol.Ping, blobs: list) -> Reply:
        device, missing = machine.take_device(request.device, request.memory_limit_mb, request.gpu_memory_share)
        if missing:
            return _reply([], usage_error=missing)
        self.device = device
        probe = None
        if device.type == "cuda":
            streamhold.load_watchdog(device.index or 0)  # their compilations paid now, not in the timing
            occupy.load(device.index or 0)
            build.preload_toolchain()
            try:
                self.exporter = deviceshare.Exporter()
                probe = self.exporter.probe(device)
            except deviceshare.ShareError as exc:
                probe = {"unavailable": str(exc)}
        return _reply([], device=machine.describe_device(device), versions=machine.versions(), share_probe=probe)

    def _export(self) -> tensorwire.Export | None:
        """How large CUDA outputs are handed back: shared, or None (through host memory)."""
        return self.share.export if self.share is not None else None

    def share_outputs(self, request: protocol.ShareOutputs, blobs: list) -> Reply:
        self.share = self.exporter
        return _reply([], sharing=self.share is not None)

    def compile(self, request: protocol.CompileOnly, blobs: list) -> Reply:
        candidate = request.candidate
        machine.interpret_triton(torch.device(request.device), candidate["kinds"])
        _, info, failure = build.import_candidate(
            candidate["path"], candidate["sha256"], candidate["kinds"], ask=self.ask,
            device=request.device, arch=request.arch, clock_ms=self.guard.wall_ms)
        return _reply([failure.finding] if failure else [], poisoned=bool(failure and failure.poisoned),
                      build=info.to_json())

    def build(self, request: protocol.Build, blobs: list) -> Reply:
        machine.interpret_triton(self.device, request.candidate["kinds"])
        problem, candidate = request.problem, request.candidate
        try:
            problem_module = build.import_problem(problem["path"], problem["source"], problem["constants"])
        except Exception:  # noqa: BLE001 - the referee imports the problem too and reports its errors
            problem_module = None
        if problem_module is not None:  # (its get_inputs makes every input the candidate gets: not its to wrap)
            self.guard.watch("the problem module", problem_module)
        constants, notice = build.candidate_constants(candidate["path"], problem["source"], problem["constants"])
        notices = [notice] if notice else []
        ops_before = optrace.registered_ops()
        module, info, failure = build.import_candidate(
            candidate["path"], candidate["sha256"], candidate["kinds"], ask=self.ask,
            device=str(self.device), arch=request.arch, clock_ms=self.guard.wall_ms, constants=constants)
        if failure is not None:
            return _reply(notices + [failure.finding], poisoned=failure.poisoned, build=info.to_json())
        model_new, missing = build.find_model_new(module, "build")
        if missing is not None:
            return _reply(notices + [missing], build=info.to_json())
        self.session = Session(self.guard, self.device, build.Loaded(problem_module, module, model_new),
                               own_ops=optrace.own_ops(ops_before))
        return _reply(notices, build=info.to_json())

    def construct(self, request: protocol.Construct, blobs: list) -> Reply:
        """ModelNew from the same seed as the reference, then the reference's state loaded into it: as sent,
        or (`derive`) as this process builds it from the same seeds, whose digest the reply carries."""
        session = self.session
        if session.candidate is None:  # the first construction (a second one comes with the referee's state)
            self.baseline_rss_bytes = memory.rss_now_bytes()
        session.candidate, session.own_copies = None, {}  # a first construction's, not held beside these
        names, state, init_inputs = request.names or [], None, None
        if request.state is not None:
            state = dict(zip(names, tensorwire.unpack_values(request.state, blobs, self.device)))
        elif request.derive:
            state, init_inputs = _derived_state(session.loaded.problem, self.device, request, names)
        kernelbench = not request.derive and request.state is None  # construct, then move; no state loaded
        checksums = digest(state, names) if request.derive and state is not None else None
        staged = state is not None and self.device.type in STATE_IN_HOST_DEVICES and \
            memory.tensor_bytes(list(state.values())) >= STATE_IN_HOST_FROM_BYTES
        if staged:
            state = _in_host(state)
        made = guarded(lambda: build_seeded(session.loaded.model_new, session.loaded.problem, self.device,
                                            request.init_seed, request.init_inputs_seed, kernelbench, init_inputs)[0],
                       stage="check", code="constructor-error", what="ModelNew(*get_init_inputs())",
                       source_file=self._source())
        if made.failure:
            return _reply([made.failure.finding], poisoned=made.failure.poisoned)
        candidate = made.value
        if state is not None:
            mismatch = _load_state(candidate, state)
            if mismatch is not None:
                return _reply([mismatch])
        moved = guarded(lambda: candidate.to(self.device).eval(), stage="check", code="constructor-error",
                        what=f"moving ModelNew to {self.device}", source_file=self._source())
        if moved.failure:
            return _reply([moved.failure.finding], poisoned=moved.failure.poisoned)
        session.candidate = moved.value
        session.seeding = CallSeeding(request.call_seed, self.device)
        self._follow_reference(state or {}, request, staged)
        return _reply([], digest=checksums)

    def _follow_reference(self, state: dict[str, torch.Tensor], request: protocol.Construct, staged: bool) -> None:
        """What the probes' changes are made on from now (worker/session.py): ModelNew's entries, loaded from
        `state`, which is let go of but for the entries ModelNew holds in another dtype or on another device
        (`staged`: `state` waited in host memory, and is compared by dtype alone, each copy kept where the entry
        is)."""
        session = self.session
        held = session.held = session.held_entries()
        session.reference_names, session.reference_parameters = list(state), set(request.parameters or ())
        moved: dict[int, torch.Tensor] = {}  # a staged tensor's copy on the device, once however many names it has
        session.own_copies = {}
        for name, value in state.items():
            if name in held and (held[name].dtype != value.dtype if staged else _kind(held[name]) != _kind(value)):
                if staged and id(value) not in moved:
                    moved[id(value)] = value.to(held[name].device)
                session.own_copies[name] = moved[id(value)] if staged else value
        tied = ties(list(state), list(state.values()))
        session.reference_bytes = memory.tensor_bytes([t for name, t in state.items() if name not in tied])

    def _inputs(self, request: protocol.Forward | protocol.Observe, blobs: list) -> list:
        """A call's inputs: drawn here from the judge's seed and moved by the range probe's transform, as the
        referee drew and moved them (it draws its own: inputs made up here only make this process's output
        wrong), else as sent."""
        if request.draw is not None:
            inputs = make_inputs(self.session.loaded.problem, request.draw, self.device)
            return Transform.from_json(request.transform).inputs(inputs) if request.transform else inputs
        return tensorwire.unpack_values(request.inputs, blobs, self.device)

    def forward(self, request: protocol.Forward, blobs: list) -> Reply:
        session = self.session
        args = self._inputs(request, blobs)
        blobs.clear()  # the inputs' bytes are not held beside the inputs during the call
        if request.reuse is not None:  # the same buffers, new values (then let go, unless kept again)
            args = refill(session.kept.pop(request.reuse), args)
        if request.keep is not None:
            session.kept[request.keep] = args
        if request.poison:
            if session.output_sizes:  # the candidate's own last call
                poison_free_memory(self.device, session.output_sizes, session.scratch_bytes)
            else:  # before its first: the reference's sizes
                poison_free_memory(self.device, request.output_bytes or [_bytes(a) for a in args], request.scratch_bytes)
        if request.reseed is not None:
            seed_generators(request.reseed, self.device)
        views = caller_views(args)
        called = self._call(args, "ModelNew.forward", "check")
        if called.failure:
            return _reply([called.failure.finding], poisoned=called.failure.poisoned)
        output, out_blobs = tensorwire.describe_output(called.value, self._export())  # the snapshot, before anything else runs
        data: dict[str, Any] = {"output": output}
        if request.return_inputs:
            out_blobs = self._with_inputs(data, out_blobs, args, views,
                                          share=shares_inputs(views, called.value, session.reference_bytes))
        if request.alias:
            data["aliases"] = output_aliases(called.value, views, session.candidate)
        session.output_sizes = [_bytes(t) for t in tensorwire.tensors_of(called.value)]
        return _reply([], blobs=out_blobs, **data)

    def perturb(self, request: protocol.Perturb, blobs: list) -> Reply:
        """The referee's change of the parameters, made alike on the reference's entries as this process
        follows them (proc/perturb.py): in place on ModelNew's own, or on new tensors swapped in one at a
        time as new objects ("replace") or under the same objects ("data"), or loaded through its state dict
        ("state-dict")."""
        session = self.session
        held = self._held()
        reply = self._write_state(perturbation(session.reference_values(held), session.reference_parameters,
                                               request.seed, request.names, replace=request.how == "replace",
                                               device=self.device, copy=request.how != "in-place"),
                                  request.how, held, fresh=True)
        if request.how != "in-place" and self.device.type == "cuda":
            torch.cuda.empty_cache()  # the old copies' blocks to the device: the referee takes its parameters back
        return reply

    def range_set(self, request: protocol.RangeSet, blobs: list) -> Reply:
        """The referee's range move of a state entry (or its undoing), made alike here, in place."""
        transform = Transform.from_json(request.transform) if request.transform else None
        held = self._held()
        values = self.session.reference_values(held)
        names = move(values, self.session.range_originals, transform)
        return self._write_state(((name, values[name]) for name in names), "in-place", held)

    def sync_state(self, request: protocol.SyncState, blobs: list) -> Reply:
        """The reference's entries as the referee holds them, written into ModelNew."""
        values = tensorwire.unpack_values(request.state, blobs, self.device)
        return self._write_state(zip(request.names, values), request.how, self._held())

    def _held(self) -> dict[str, torch.Tensor]:
        """ModelNew's entries now, by the names its state_dict gave at its construction (Session.held), each found
        again through torch's own records of it (`_entries`): one registered anew since (a layout converted at its
        first call) is the one changed, and none of its code is called (a stale cache dropped only when its
        state_dict was called passed)."""
        session = self.session
        now = _entries(session.candidate) if isinstance(session.candidate, torch.nn.Module) else {}
        session.held = {**session.held, **{name: t for name, t in now.items() if name in session.held}}
        return session.held

    def _write_state(self, changed: Iterable[tuple[str, torch.Tensor]], how: str, held: dict[str, torch.Tensor], *,
                     fresh: bool = False) -> Reply:
        """New values of the reference's entries written into ModelNew (`held`: its entries), each before the
        next is made: copied into the tensors it holds ("in-place"), as new Parameter or buffer objects
        ("replace"), as new tensors under the same objects ("data"), or through its own state dict with these
        entries changed, loaded back at once ("state-dict": their copies all held until then). `fresh`: the values
        are new tensors made here, taken as they are where ModelNew's entry has their dtype and device (no second
        copy of a 4 GB weight beside the old one); a value that is ModelNew's own entry, changed in place, needs no writing. Where ModelNew
        holds an entry in another dtype or on another device and this process keeps no copy of it yet, the
        value becomes that copy (the next change is made on it, not on ModelNew's rounding). The reply carries
        the values' fingerprint, which the judge holds against the referee's (proc/perturb.fingerprint)."""
        session = self.session
        written: list[tuple[str, torch.Tensor]] = []  # a name twice where a range move is undone and made again
        with torch.no_grad():
            for name, value in changed:
                written.append((name, value))
                entry, own = held.get(name), session.own_copies.get(name)
                if own is not None and own is not value:
                    if fresh:  # a new tensor made here: it becomes the copy (no second one beside it)
                        own = session.own_copies[name] = value
                    else:
                        own.copy_(value)
                elif own is None and entry is not None and _kind(entry) != _kind(value):
                    own = session.own_copies[name] = value if fresh else value.clone()
                if entry is None or entry is value or how == "state-dict":
                    continue
                if how in ("replace", "data"):
                    new = value if fresh and own is None and _kind(entry) == _kind(value) else \
                        torch.empty_like(entry.detach()).copy_(value)
                if how == "data":
                    entry.data = new
                elif how == "replace":
                    new = torch.nn.Parameter(new, requires_grad=entry.requires_grad) \
                        if isinstance(entry, torch.nn.Parameter) else new
                    _replace_everywhere(session.candidate, entry, new)
                    for other in [k for k, v in held.items() if v is entry]:  # the old object let go of here too
                        held[other] = new
                else:
                    entry.copy_(value)
                del entry
            if how == "state-dict":
                state = {name: t.detach() for name, t in session.candidate.state_dict().items()}
                changes = {name: value for name, value in written if name in state}
                loaded = guarded(lambda: session.candidate.load_state_dict({**state, **changes}),
                                 stage="probe", code="forward-error", what="ModelNew.load_state_dict",
                                 source_file=self._source())
                if loaded.failure:
                    return _reply([loaded.failure.finding], poisoned=loaded.failure.poisoned)
                # its own load_state_dict may have swapped the objects: what it holds now is what is changed next
                again = guarded(session.held_entries, stage="probe", code="forward-error", what="ModelNew.state_dict",
                                source_file=self._source())
                if again.failure:
                    return _reply([again.failure.finding], poisoned=again.failure.poisoned)
                session.held = again.value
        return _reply([], fingerprint=fingerprint(dict(written), [name for name, _ in written]))

    def observe(self, request: protocol.Observe, blobs: list) -> Reply:
        """One watched call (or two) of the candidate. Each call gets its own inputs, drawn right before it
        (`draw`), so no copy of the inputs is kept beside a call: the probes' memory stays that of a call."""
        session = self.session

        def draw() -> list:
            return self._inputs(request, blobs)

        if request.what == "threads":
            return self._threads(draw)
        if request.what == "trace":
            args = draw()
            traced = guarded(lambda: optrace.trace(session, args, self.guard.clock_ns), stage="probe", code="forward-error",
                             what="ModelNew.forward (probe op-trace)", source_file=self._source())
            if traced.failure:
                return _reply([traced.failure.finding], poisoned=traced.failure.poisoned)
            return _reply([], trace=traced.value)
        if request.what == "repeat":
            return self._repeat(draw)
        if request.what == "streams":
            return self._streams(draw)
        raise ValueError(f"nothing to observe as {request.what!r}")

    def _threads(self, draw: Callable[[], list]) -> Reply:
        """Threads or processes the call started that are still running after it returned, and threads that an
        earlier call started (the warm call here, or any before it) still running the candidate's code."""
        me = psutil.Process()
        warm_args = draw()  # kept while the next draw is made: the two calls never share an address
        warm = self._call(warm_args, "ModelNew.forward (probe threads)", "probe")  # runtime pools start here
        if warm.failure:
            return _reply([warm.failure.finding], poisoned=warm.failure.poisoned)
        del warm  # its output goes before the watched call
        args = draw()
        threads_before, native_before = set(threading.enumerate()), me.num_threads()
        children_before = {c.pid for c in me.children(recursive=True)}
        called = self._call(args, "ModelNew.forward (probe threads)", "probe")
        if called.failure:
            return _reply([called.failure.finding], poisoned=called.failure.poisoned)
        started = [t.name for t in threading.enumerate() if t not in threads_before]
        return _reply([], threads=started,
                      earlier=[name for name in running_candidate_code(self._source()) if name not in started],
                      children=[c.pid for c in me.children(recursive=True) if c.pid not in children_before],
                      native_growth=me.num_threads() - native_before)

    def _repeat(self, draw: Callable[[], list]) -> Reply:
        """Two calls on separate draws of the same values (at different addresses: the second is drawn while
        the first's inputs are still held, and those are let go only then), both outputs handed back, and
        whether the second returned memory the first still holds. The second draw is made before the free
        memory is poisoned. The first output goes through host memory (a snapshot, since candidate code
        runs again before the reply, and no second copy of it on the device beside the first)."""
        first_args = draw()
        first = self._call(first_args, "ModelNew.forward (probe repeat)", "probe")
        if first.failure:
            return _reply([first.failure.finding], poisoned=first.failure.poisoned)
        second_args = draw()
        del first_args
        first_meta, first_blobs = tensorwire.describe_output(first.value)
        poison_free_memory(self.device, [_bytes(t) for t in tensorwire.tensors_of(first.value)], self.session.scratch_bytes)
        second = self._call(second_args, "ModelNew.forward (probe repeat)", "probe")
        if second.failure:
            return _reply([second.failure.finding], poisoned=second.failure.poisoned)
        second_meta, second_blobs = tensorwire.describe_output(second.value, self._export())
        for fact in second_meta.get("tensors", []):
            if "blob" in fact:
                fact["blob"] += len(first_blobs)
        shared = any(spans_overlap(storage_span(a), storage_span(b))
                     for a in tensorwire.tensors_of(first.value) for b in tensorwire.tensors_of(second.value))
        return _reply([], blobs=first_blobs + second_blobs, first=first_meta, second=second_meta, shared=shared)

    def _streams(self, draw: Callable[[], list]) -> Reply:
        """The output read in the caller's stream order right after the call, against after a device-wide
        synchronisation (unjoined work on another stream makes them differ)."""
        args = draw()
        torch.cuda.synchronize(self.device)
        torch.cuda._sleep(HOLD_CYCLES)  # hold the caller's stream: unordered work shows up as a race

        def call():
            with torch.inference_mode():
                out = self.session.candidate(*args)
            return out, [t.clone() for t in tensorwire.tensors_of(out)]  # copies in the caller's stream order

        called = guarded(call, stage="probe", code="forward-error", what="ModelNew.forward (probe streams)",
                         source_file=self._source())
        if called.failure:
            return _reply([called.failure.finding], poisoned=called.failure.poisoned)
        out, seen = called.value
        torch.cuda.synchronize(self.device)
        differs = any(not equal_bits(a, b) for a, b in zip(seen, tensorwire.tensors_of(out)))
        return _reply([], unsynchronized=differs)

    def time_setup(self, request: protocol.TimeSetup, blobs: list) -> Reply:
        session = self.session
        self.watch = TimedWatch(self.device, self._source())
        self.timed = None  # the last model's input sets and outputs go before the next one's are drawn
        call = lambda args: session.candidate(*args)  # noqa: E731
        if session.seeding is not None:
            call = session.seeding.timed(call)
        made = guarded(lambda: TimedModel(call, session.loaded.problem,
                                          self.device, request.set_seeds, request.method, self.guard.clock_ns,
                                          after_call=self.watch.after_call),
                       stage="timing", code="forward-error", what="preparing the timed calls",
                       source_file=self._source())
        if made.failure:
            return _reply([made.failure.finding], poisoned=made.failure.poisoned)
        self.timed = made.value
        return _reply([], **self.timed.describe(False))

    def time_batch(self, request: protocol.TimeBatch, blobs: list) -> Reply:
        refills = {int(k): int(v) for k, v in request.refills.items()}
        self.watch.start_batch(request.watch)
        timed = guarded(lambda: self.timed.batch(request.first, request.count, refills, set(request.watch),
                                                 request.watch_delay_ms), stage="timing",
                        code="forward-error", what="ModelNew.forward (while timed)", source_file=self._source())
        if timed.failure:
            return _reply([timed.failure.finding], poisoned=timed.failure.poisoned)
        return _reply([], samples_ms=timed.value, threads=list(self.watch.threads),
                      unjoined=self.watch.unjoined(self.timed.outputs))

    def memory_report(self, request: protocol.MemoryReport, blobs: list) -> Reply:
        if request.stage is not None:
            return _reply([], stage_peak_bytes=memory.stage_peak_bytes(self.device))
        return _reply([], **memory.peaks(self.device, self.baseline_rss_bytes))

    def export_output(self, request: protocol.ExportOutput, blobs: list) -> Reply:
        out = self.timed.outputs.get(request.index)
        later = [o for i, o in self.timed.outputs.items() if i > request.index]
        reused = any(spans_overlap(storage_span(a), storage_span(b)) for a in tensorwire.tensors_of(out)
                     for other in later for b in tensorwire.tensors_of(other))
        output, out_blobs = tensorwire.describe_output(out, self._export())
        data: dict[str, Any] = {"output": output, "reused": reused}
        if request.inputs:  # shared where they lie (the judge asks only for inputs of bounded size)
            at = request.index % len(self.timed.sets)
            out_blobs = self._with_inputs(data, out_blobs, self.timed.sets[at], self.timed.views[at],
                                          share=True)
        return _reply([], blobs=out_blobs, **data)

    def _with_inputs(self, data: dict[str, Any], out_blobs: list, args: list, views: list, share: bool) -> list:
        """A call's inputs as it left them into `data` (inputs_after): the memory it was given (`views`, made before
        the call), and in place of an argument the call pointed at other memory (`x.set_(y)`, `x.data = y`: the
        caller's tensor changed, whatever its old memory holds) a note the referee finds differs; their blobs after
        the output's, shared in device memory where `share` (and the device allows); the reply's blobs."""
        after = [view if not isinstance(arg, torch.Tensor) or same_place(arg, view) else REPOINTED
                 for arg, view in zip(args, views)]
        data["inputs_after"], after_blobs = tensorwire.pack_values(after, self._export() if share else None)
        for meta in data["inputs_after"]:
            if "blob" in meta:
                meta["blob"] += len(out_blobs)
        return out_blobs + after_blobs


def _bytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def shares_inputs(args: list, out, state_bytes: int) -> bool:
    """Whether a check's inputs after the call go back shared: they are at most INPUTS_SHARED_UP_TO of the
    problem's own memory (the reference's state, `state_bytes`; the inputs, the output)."""
    inputs = memory.tensor_bytes(args)
    own = inputs + memory.tensor_bytes(tensorwire.tensors_of(out)) + state_bytes
    return inputs <= INPUTS_SHARED_UP_TO * own


def _kind(t: torch.Tensor) -> tuple:
    """What a copy of an entry must share with it to be written as it is: its dtype and device."""
    return t.dtype, t.device


def poison_free_memory(device: torch.device, sizes: list[int], scratch_bytes: int = 0) -> None:
    """Fill blocks of the allocator with NaN bytes and free them, so an output the candidate allocates but
    never writes reads NaN (not zeros, and never an earlier result). One block per expected output size
    (the caching allocator hands a freed block of that size to the next request of that size), plus on a GPU
    a large one the size of what the candidate's last call allocated beyond its outputs (`scratch_bytes`:
    where an earlier result could lie other than in an output's block; four times the largest output before,
    a 1 GiB block beside level1/40's 256 MiB output and inputs, 1.9 footprints). On the CPU freed chunks are
    reused by malloc only sometimes: there it is best effort. Bounded: the large block is at most
    POISON_EXTRA_BYTES, and no block is taken that would leave less free memory than the blocks themselves (a 6
    GB output is poisoned with one 6 GB block, not 30 GB)."""
    free = memory.device_free_bytes(device)
    blocks = []
    wanted = [n for n in sizes if n > 0]
    if device.type == "cuda":
        wanted.append(min(scratch_bytes, POISON_EXTRA_BYTES) + (1 << 20))
    for n in wanted:
        if 2 * n > free:
            continue
        try:
            blocks.append(torch.empty(n, dtype=torch.uint8, device=device).fill_(POISON_BYTE))
        except torch.OutOfMemoryError:  # the device had room, the worker's share of it (--gpu-memory-share) not
            break
        free -= n
    del blocks


def _derived_state(problem, device: torch.device, request: protocol.Construct,
                   names: list[str]) -> tuple[dict | None, list | None]:
    """The reference's state as this process builds it from the run's seeds (proc/inputs.build_seeded), with
    the entries the referee named, and the init inputs it drew (ModelNew gets the same ones); no state where
    it cannot be built here or lacks one of them (the judge then sends the referee's)."""
    try:
        reference, init_inputs = build_seeded(problem.Model, problem, device, request.init_seed,
                                              request.init_inputs_seed, kernelbench=False)
    except Exception:  # noqa: BLE001 - the problem's code: the referee built it, and its state is sent instead
        return None, None
    built = reference.state_dict()
    return ({name: built[name] for name in names} if all(name in built for name in names) else None), init_inputs


def _in_host(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The entries copied into host memory (their device memory let go with `state`), an entry tied to an earlier
    one a copy of the same host tensor (proc/perturb.ties)."""
    copies: dict[tuple, torch.Tensor] = {}
    for t in state.values():
        if tie_key(t) not in copies:
            copies[tie_key(t)] = t.detach().to("cpu", copy=True)
    return {name: copies[tie_key(t)] for name, t in state.items()}


def _load_state(candidate, reference_state: dict) -> Finding | None:
    """Copy the reference's parameters and buffers into the candidate; every reference key must fit."""
    if not isinstance(candidate, torch.nn.Module):
        if not reference_state:
            return None
        return Finding.of("state-dict-mismatch", f"ModelNew is a {type(candidate).__name__}, not an nn.Module, so "
                          "the reference's parameters cannot be loaded into it", stage="check")
    candidate_state = candidate.state_dict()
    missing = [k for k in reference_state if k not in candidate_state]
    wrong = [f"{k} {tuple(candidate_state[k].shape)} (reference {tuple(v.shape)})"
             for k, v in reference_state.items() if k in candidate_state and candidate_state[k].shape != v.shape]
    if missing or wrong:
        parts = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"shape of {'; '.join(wrong)}"] if wrong else [])
        return Finding.of("state-dict-mismatch", f"ModelNew does not hold the reference's parameters: {'; '.join(parts)}"
                          f" (ModelNew has: {', '.join(candidate_state) or 'nothing'})", stage="check",
                          missing=missing)
    candidate.load_state_dict(reference_state, strict=False)
    return None


def _replace_everywhere(module: torch.nn.Module, old: torch.Tensor, new: torch.Tensor) -> None:
    """`new` wherever `module` holds `old` as a parameter or buffer: a tensor it ties under several names
    stays tied, as the reference's does when the referee changes it in place."""
    for owner in _submodules(module):
        for attr, held in [*owner._parameters.items(), *owner._buffers.items()]:
            if held is old:
                setattr(owner, attr, new)


def _submodules(module: torch.nn.Module) -> list[torch.nn.Module]:
    """`module` and every module below it, each once (`_walk`)."""
    return list({id(owner): owner for _, owner, _ in _walk(module)}.values())


def _entries(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Its parameters and persistent buffers under state_dict's names (`_walk`)."""
    found: dict[str, torch.Tensor] = {}
    for prefix, _, records in _walk(module):
        transient = records.get("_non_persistent_buffers_set") or set()
        found.update((prefix + name, t) for name, t in (records.get("_parameters") or {}).items() if t is not None)
        found.update((prefix + name, t) for name, t in (records.get("_buffers") or {}).items()
                     if t is not None and name not in transient)
    return found


def _walk(module: torch.nn.Module, depth: int = 64):
    """(name prefix, module, its records) for `module` and each module below it under each of its names, found
    through torch's own records (`_modules`, `_parameters`, `_buffers` in the instance's dict), not through the
    methods the candidate may override (`modules()`, `state_dict()`: one raised only when the judge's change
    called it, and its stale cache became the judge's error; another dropped its cache only then)."""
    stack = [("", module, 0)]
    while stack:
        prefix, owner, level = stack.pop()
        records = object.__getattribute__(owner, "__dict__")
        yield prefix, owner, records
        if level < depth:
            stack.extend((f"{prefix}{name}.", child, level + 1) for name, child in (records.get("_modules") or {}).items()
                         if child is not None)
