"""The typed boundary between the judge and its two torch processes: one frozen dataclass per request.

The judge sends requests; the referee (the reference, the inputs, the comparison, the baselines: never
candidate code) and the candidate's worker (build, construct, forward, observe, time) answer. Each
process has one dispatch table from request type to handler (`referee/server.py`, `worker/server.py`).
Tensors travel beside a request or a reply as blobs (`channel`), described by `proc/tensorwire`.

Replies are JSON objects. A referee reply is trusted data; a worker reply is a claim, read through the
checks in `untrusted` below (plain numbers of the right type and range, nothing else).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass(frozen=True)
class Request:
    op: ClassVar[str] = ""

    def to_wire(self) -> dict[str, Any]:
        return {"op": self.op, **dataclasses.asdict(self)}


REQUESTS: dict[str, type[Request]] = {}


def request(cls):
    """Register a request type under its `op` name."""
    REQUESTS[cls.op] = cls
    return cls


def from_wire(message: dict[str, Any]) -> Request:
    """The request a message carries; ValueError for an unknown op or unexpected fields."""
    cls = REQUESTS.get(message.get("op"))
    if cls is None:
        raise ValueError(f"unknown request {message.get('op')!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in message.items() if k in names})


# ---- both processes ----------------------------------------------------------------------------------

@request
@dataclass(frozen=True)
class Ping(Request):
    """Confirm the device; CPU runs limit their own memory, the worker on a GPU its share of the GPU's memory
    (the referee's ping gives none). Reply: device, versions; from the worker on a GPU `share_probe` (a
    small tensor exported as a CUDA IPC handle: proc/deviceshare), from the referee given that probe
    `share_refused` (None when it opened, else why not)."""
    op: ClassVar[str] = "ping"
    device: str
    memory_limit_mb: int | None = None
    gpu_memory_share: float | None = None
    share_probe: dict[str, Any] | None = None


@request
@dataclass(frozen=True)
class Prepare(Request):
    """What taking the GPU `device` costs on the host alone, done ahead of the first Ping (proc/machine.
    prepare_device): a batch lane's warm-up (batch/local.py) sends it to its spares before it shares the device's
    gate for their pings, so no other lane's timing waits for it (the lane's own wait for it as for the spares'
    imports). On an H100 it was about half of a fresh process's 1 s start of its GPU: the CUDA driver's
    initialisation, which makes no context, cuda-python's bindings and, in the worker, torch's JIT build module.
    Touches no device. Reply: nothing."""
    op: ClassVar[str] = "prepare"
    device: str


@request
@dataclass(frozen=True)
class Ready(Request):
    """Answered as soon as the process serves requests (its start-up imports done); touches no device, so a
    pool can wait for a spare's start to end before something is measured (isolation.WorkerPool.settle).
    Like any request, it makes a worker let go of the tensors its last reply shared in its own device memory:
    the judge sends it once nothing reads them any more (stages/context.Judging.let_go). Reply: nothing."""
    op: ClassVar[str] = "ready"


@request
@dataclass(frozen=True)
class ShareOutputs(Request):
    """Worker: from now on hand large CUDA outputs back as CUDA IPC handles of snapshots held until the next
    request (the referee opened the ping's probe). Reply: sharing."""
    op: ClassVar[str] = "share-outputs"


@request
@dataclass(frozen=True)
class TimeSetup(Request):
    """Prepare timing of `model` ("candidate", "eager" or "compile") over input sets drawn from
    `set_seeds`. Reply: input_sets; with `describe` (the referee: one untimed call, where torch.compile
    compiles) input_bytes and output_bytes too. The candidate is not called here: its first call sees
    input sets whose values no call has seen."""
    op: ClassVar[str] = "time-setup"
    model: str
    set_seeds: list[int]
    method: str  # "cuda-events", "cuda-graph" or "host-clock"
    describe: bool = False


@request
@dataclass(frozen=True)
class TimeBatch(Request):
    """Time calls first..first+count-1 (call i uses input set i % sets), back to back with a cache flush
    before each; `refills` maps a call index to a seed whose inputs go into that set before the call.
    The reply is sent after a device-wide synchronisation. Reply: samples_ms; from the worker also threads
    (left running after a timed call) and unjoined (of the `watch` calls, those whose output changed after
    the call returned: worker/watch.py). A `watch` call's refill is written in the caller's stream order
    right before it, after the device waited `watch_delay_ms` (proc/timed.py)."""
    op: ClassVar[str] = "time-batch"
    first: int
    count: int
    refills: dict[str, int] = field(default_factory=dict)
    watch: list[int] = field(default_factory=list)
    watch_delay_ms: float = 0.0


@request
@dataclass(frozen=True)
class ExportOutput(Request):
    """The output of call `index` of the last batch, as blobs (taken when its batch finished); `inputs`: its
    input set too, as the call left it (inputs_after), for a check that the timed call did not change them."""
    op: ClassVar[str] = "export-output"
    index: int
    inputs: bool = False


@request
@dataclass(frozen=True)
class MemoryReport(Request):
    """This process's memory peaks (resident set, and the GPU allocator's), the device's total; the
    referee adds the problem's footprint and how its float64 reference was computed. With `stage`: only
    the peak in the stage just ended (proc/memory.stage_peak_bytes), as stage_peak_bytes."""
    op: ClassVar[str] = "memory"
    stage: str | None = None


# ---- the referee -------------------------------------------------------------------------------------

@request
@dataclass(frozen=True)
class Estimate(Request):
    """Import the problem and estimate its parameters, inputs and outputs in bytes on the meta device
    (nothing allocated), with the device's total memory: whether it can fit at all, before any work."""
    op: ClassVar[str] = "estimate"
    problem: dict[str, Any]
    init_inputs_seed: int


@request
@dataclass(frozen=True)
class Setup(Request):
    """Import the problem (never the candidate), build the reference from `init_seed` (KernelBench's seed
    42 under its protocol), at both precisions (referee/precision.py). Reply: its state's entry names, their
    digest, which are parameters (the state itself only on request: StateOf)."""
    op: ClassVar[str] = "setup"
    problem: dict[str, Any]
    init_seed: int
    init_inputs_seed: int
    kernelbench: bool = False
    call_seed: int | None = None  # the generators are seeded with it before every reference call (proc/rng)
    float64_budget_mb: int | None = None  # None: a share of the free memory (referee/plan)
    atol: float | None = None  # the evaluation's tolerance, every Compare's (None: the output dtype's)
    rtol: float | None = None


@request
@dataclass(frozen=True)
class MakeInputs(Request):
    """Inputs from `seed` (blobs); the reference's outputs for them are kept until `Compare` with the
    same seed. `kernelbench`: seeded as KernelBench's eval seeds each trial."""
    op: ClassVar[str] = "make-inputs"
    seed: int
    kernelbench: bool = False
    expect: bool = True  # False: inputs only (a call whose output is not compared)
    float64: bool = True  # False: the native reference only (a timed output's check)
    send: bool = True  # False: keep the inputs here (the worker drew the same ones from the seed)
    transform: dict[str, Any] | None = None  # a range probe's transform of the inputs (referee/ranges.py)
    # the inputs kept beside the outputs too, for `Compare`'s `inputs_after` (a check's trials); otherwise let go
    # once the outputs are made (a footprint held by the referee while the worker calls: level1/47's refill probe)
    keep_inputs: bool = False


@request
@dataclass(frozen=True)
class Compare(Request):
    """Compare a candidate output (blobs) with the kept reference outputs of `seed`; `inputs_after`
    (blobs) are the candidate's inputs after its call, checked bit for bit. `rule`: "strict" (float64
    truth, tolerance), "kernelbench" (allclose on the native reference), "timed" (strict, no float64),
    "range" (float64 truth, atol relative to the output's magnitude; instead of a trial, `skipped` with
    the reason where the reference overflows or is ill-conditioned there: referee/ranges.py).
    `verdict_only`: a passing output's trial without its figures, and no unwritten count (compare.compare).
    Reply: trial, findings, unwritten (outputs NaN where the reference is not)."""
    op: ClassVar[str] = "compare"
    seed: int
    index: int
    output: dict[str, Any]
    inputs_after: list[dict[str, Any]] | None = None
    atol: float | None = None
    rtol: float | None = None
    rule: str = "strict"
    keep: bool = False  # keep the expectation for another Compare of the same seed
    verdict_only: bool = False
    held: bool = False  # the output HoldOutput kept for `index` (then `output` is empty), with its inputs if held


@request
@dataclass(frozen=True)
class TimeDone(Request):
    """The referee's timing state dropped (the timed model's input sets and outputs, the timed outputs still
    held): not kept through the stages that follow. Reply: nothing."""
    op: ClassVar[str] = "time-done"


@request
@dataclass(frozen=True)
class HoldOutput(Request):
    """Copy a timed call's output (blobs) now and keep it for a later Compare of it (`held`): the comparison,
    and drawing the reference's output it needs, then run after the timing, outside its time alone on the
    device. Nothing is copied where the outputs held would pass `budget_bytes` in all, or a quarter of the
    device's free memory. Reply: held (bool), or findings (a malformed output). `inputs_after`: the call's
    inputs as it left them, held with it (copied too) for the Compare to check."""
    op: ClassVar[str] = "hold-output"
    index: int
    output: dict[str, Any]
    budget_bytes: int
    inputs_after: list | None = None


@request
@dataclass(frozen=True)
class ComparePair(Request):
    """Two outputs of the candidate for the same inputs (blobs a then b) must agree within tolerance."""
    op: ClassVar[str] = "compare-pair"
    first: dict[str, Any]
    second: dict[str, Any]
    atol: float | None = None
    rtol: float | None = None


@request
@dataclass(frozen=True)
class Perturb(Request):
    """Change the parameters and buffers from `seed` (`names`: only those; None: all floating entries), the
    same way in both processes (proc/perturb.py): the referee changes the reference's, the worker ModelNew's
    (as loaded from the reference's state) and writes the change into ModelNew `how`: "in-place" (made in the
    tensors it holds), "replace" (new Parameter or buffer objects; parameters get new values, as new objects would
    bring), "data" (new tensors swapped in under the same objects, `entry.data = new`: neither the object nor
    its version counter changes) or "state-dict" (its own state_dict, with these entries changed, loaded back).
    Reply: the names
    of the entries changed (the referee's) and their fingerprint (proc/perturb.fingerprint; both)."""
    op: ClassVar[str] = "perturb"
    seed: int
    names: list[str] | None = None
    how: str = "in-place"


@request
@dataclass(frozen=True)
class StateOf(Request):
    """The reference's state-dict entries `names` as they are now (blobs): for a worker whose entries no
    longer follow the reference's (SyncState)."""
    op: ClassVar[str] = "state-of"
    names: list[str]


@request
@dataclass(frozen=True)
class SyncState(Request):
    """The reference's entries (blobs, from StateOf) into ModelNew `how` (as Perturb says), and into the
    worker's own copy of an entry it keeps (worker/session.py). Reply: the entries' fingerprint."""
    op: ClassVar[str] = "sync-state"
    names: list[str]
    state: list[dict[str, Any]]
    how: str = "in-place"


@request
@dataclass(frozen=True)
class Park(Request):
    """Referee: its large parameters into host memory (`parked`), or back, around a change the worker makes by new
    objects (replaced, or loaded back through a state dict: a new copy of an entry beside ModelNew's old one), so
    the judge does not hold them three times then (referee/session.RefereeSession.park): as many as the entries
    `names` (the change's; None: all) take, the worker's new copies of them. Reply: nothing."""
    op: ClassVar[str] = "park"
    parked: bool
    names: list[str] | None = None


@request
@dataclass(frozen=True)
class StateEntries(Request):
    """The reference's floating state-dict entries (parameters and buffers) a probe may change, in order."""
    op: ClassVar[str] = "state-entries"


@request
@dataclass(frozen=True)
class RangePlan(Request):
    """The range probes for this problem (referee/ranges.py), chosen on inputs from `seed`, or `kept` (a plan made
    on another draw) where its moves cover here every bin of the curved ranges they covered there. Reply: probes
    (transforms), skipped (reasons), sites (the curved ranges covered, by default and with the probes), plan
    ("made", "kept", or "remade" where the kept plan fell short: `short` says why), and for a plan made, bins (what
    `sites` counts, for a later `kept`) and reusable (whether it may be offered to other draws)."""
    op: ClassVar[str] = "range-plan"
    seed: int
    kept: dict | None = None


@request
@dataclass(frozen=True)
class RangeSet(Request):
    """Undo the previous range probe's change of a state entry and apply `transform`'s (None: undo only), the
    same way in both processes (proc/perturb.py; the worker writes it into ModelNew in place). Reply: the
    names of the entries that changed."""
    op: ClassVar[str] = "range-set"
    transform: dict[str, Any] | None = None


@request
@dataclass(frozen=True)
class ProfileReference(Request):
    """The reference's heavy ops (share of its profiled time) and whether its output aliases its inputs,
    parameters or buffers, on inputs from `seed`."""
    op: ClassVar[str] = "profile-reference"
    seed: int


@request
@dataclass(frozen=True)
class CopyBandwidth(Request):
    """The device's copy bandwidth in GB/s, measured here (the roofline floor's denominator); `quick`: a short
    measurement, to check a cached figure against."""
    op: ClassVar[str] = "copy-bandwidth"
    quick: bool = False


# issue 19: problem lint
@request
@dataclass(frozen=True)
class LintProblem(Request):
    """Lint the problem (problemlint/analysis.py) at its given sizes, or lowered to a budget (`shrink`);
    `timed`: also time the reference; `bounded`: run nothing where the sizes stay large (an evaluation's
    notice). Reply: findings (as data: code, message, details) and facts, or "skipped" with why."""
    op: ClassVar[str] = "lint-problem"
    problem: dict[str, Any]
    shrink: bool = False
    timed: bool = False
    bounded: bool = False


# ---- the candidate's worker --------------------------------------------------------------------------

@request
@dataclass(frozen=True)
class Build(Request):
    """Import the problem and the candidate (compiling on the way) and find ModelNew."""
    op: ClassVar[str] = "build"
    device: str
    problem: dict[str, Any]
    candidate: dict[str, Any]
    arch: str | None = None


@request
@dataclass(frozen=True)
class CompileOnly(Request):
    """`kerneljudge build`: import (so compile, the judge building: extensions.py) a candidate, nothing else."""
    op: ClassVar[str] = "compile"
    device: str
    candidate: dict[str, Any]
    arch: str | None = None


@request
@dataclass(frozen=True)
class Construct(Request):
    """ModelNew(*get_init_inputs()) with the generators seeded by `init_seed`, and the reference's state
    loaded into it: the one sent (blobs, `state`), or with `derive` the worker's own build of the reference
    from the same seeds (proc/inputs.build_seeded; reply: its digest, proc/perturb.digest, or none where it
    could not be built), or none at all (KernelBench's protocol)."""
    op: ClassVar[str] = "construct"
    init_seed: int
    init_inputs_seed: int
    state: list[dict[str, Any]] | None
    names: list[str] | None = None
    call_seed: int | None = None  # the generators are seeded with it before every candidate call (proc/rng)
    parameters: list[str] | None = None  # which of `names` are parameters (the probes change them: proc/perturb)
    derive: bool = False


@request
@dataclass(frozen=True)
class Forward(Request):
    """Call ModelNew on the inputs (blobs; or, with `draw`, the inputs drawn here from that seed, as the
    referee drew them, and moved by a range probe's `transform` as the referee moved them) and hand back
    the output at once. `poison`: fill freed memory
    with NaN bytes first, in blocks of the sizes of the candidate's last output and its last call's scratch, or
    before its first call of `output_bytes` and `scratch_bytes` (the reference's); `return_inputs`: the inputs after the call too; `keep`/`reuse`: keep the argument
    buffers under a name, or copy these inputs into buffers kept before and call on those; `reseed`:
    seed the generators before the call (KernelBench); `alias`: report output storage shared with an
    input, parameter or buffer."""
    op: ClassVar[str] = "forward"
    inputs: list[dict[str, Any]]
    draw: int | None = None
    transform: dict[str, Any] | None = None
    poison: bool = False
    output_bytes: list[int] | None = None
    scratch_bytes: int = 0
    return_inputs: bool = False
    keep: str | None = None
    reuse: str | None = None
    reseed: int | None = None
    alias: bool = False


@request
@dataclass(frozen=True)
class Observe(Request):
    """Watch one call on the inputs (blobs, or drawn from `draw` as in Forward): "threads" (threads or
    processes left running), "repeat" (two
    calls on copies; both outputs as blobs, and whether they share memory), "trace" (own kernels counted,
    ops profiled, GPU kernels with streams), "streams" (the output read in stream order right after the
    call against after a device-wide synchronisation)."""
    op: ClassVar[str] = "observe"
    what: str
    inputs: list[dict[str, Any]]
    draw: int | None = None
    transform: dict[str, Any] | None = None


# ---- reading the worker's claims ---------------------------------------------------------------------

class Untrusted(ValueError):
    """A worker reply that is not what the protocol allows (forged or corrupted by candidate code)."""


def number(value: Any, name: str, *, low: float = -math.inf, high: float = math.inf) -> float:
    """A plain finite int or float in [low, high] (a float subclass or a bool is refused)."""
    if type(value) not in (int, float) or not math.isfinite(value) or not low <= value <= high:
        raise Untrusted(f"{name}: expected a number in [{low}, {high}], got {type(value).__name__} {value!r:.60}")
    return float(value)


def numbers(values: Any, name: str, *, count: int | None = None, low: float = -math.inf,
            high: float = math.inf) -> list[float]:
    if type(values) is not list or (count is not None and len(values) != count):
        raise Untrusted(f"{name}: expected a list of {count if count is not None else 'some'} numbers")
    return [number(v, name, low=low, high=high) for v in values]


def strings(values: Any, name: str, limit: int = 10_000) -> list[str]:
    if type(values) is not list or len(values) > limit or not all(type(v) is str for v in values):
        raise Untrusted(f"{name}: expected a list of strings")
    return [v[:500] for v in values]


def flag(value: Any, name: str) -> bool:
    if type(value) is not bool:
        raise Untrusted(f"{name}: expected true or false")
    return value


def build_info(value: Any) -> dict[str, Any]:
    """The worker's account of its build (records.Build's fields): a forged one had ended the judge."""
    if type(value) is not dict or value.get("cache") not in ("hit", "miss", "none") or \
            type(value.get("cache_key")) not in (str, type(None)):
        raise Untrusted("build: expected build_ms, cache (hit, miss or none), cache_key and extensions")
    return {"build_ms": number(value.get("build_ms"), "build_ms", low=0.0), "cache": value["cache"],
            "cache_key": value["cache_key"] and value["cache_key"][:200],
            "extensions": tuple(strings(value.get("extensions"), "extensions", limit=1000))}
