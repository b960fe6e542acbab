"""The referee's state for one evaluation: the problem, the reference models, and the expectations kept
between drawing a trial's inputs and comparing the candidate's output for them.

Nothing here ever sees candidate code: the referee imports the problem only, and what it knows of the
candidate is the data the judge relays (output bytes and the facts the worker reported about them).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from kerneljudge.proc import cudadriver, memory
from kerneljudge.proc.inputs import build_seeded, clone_args, make_inputs, owned, seed_generators, synchronize
from kerneljudge.proc.rng import CallSeeding
from kerneljudge.proc.perturb import Originals, Transform, entries, entry_checksum, move, perturb
from kerneljudge.referee import compare
from kerneljudge.referee.plan import Float64Plan, footprint, measure_start
from kerneljudge.referee.precision import Precisions, tensor_attributes

KERNELBENCH_SEED = 42
# The float64 run's freed blocks, and the parameters' blocks freed by a change of precision, go back to the device
# (for the worker, which shares it) only where the device's free memory is under this many times what the problem
# and that run take: emptying the cache after every draw made each later run allocate afresh (level2/51 on an
# H200, with 140 GB free for a 0.4 GB problem).
RELEASE_BELOW_FACTOR = 4
RELEASE_AFTER_RUN_BYTES = 256 << 20  # a float64 run needing more may leave its blocks in the cache: `_release` them
# Inputs this large go to the native reference uncopied, checked by checksum instead (`expect`): below it a copy
# takes less memory than the checksum's blocks (about 100 MB on a GPU).
UNCOPIED_FROM_BYTES = 256 << 20
# A native output kept beside its float64 truth (it misses the truth: TF32 convolutions) this large is kept in host
# memory on a GPU: only a comparison whose candidate misses the truth reads it, a block at a time, where it held a
# third output on the device beside the truth and the worker's output (level1/54's 1 GiB output: 3.15x its footprint)
NATIVE_IN_HOST_FROM_BYTES = 256 << 20
# Parameters this large (their memory), on a device of these types, wait in host memory while the worker replaces
# ModelNew's own (`park`): the worker holds the new copy of an entry beside the old one then, and with the
# referee's, the judge held a single-weight model's parameters three times (level2/56's 4 GiB weight)
PARKED_FROM_BYTES = 16 << 20
PARKED_DEVICES = ("cuda",)


@dataclass
class Expectation:
    """A trial's inputs (as drawn; None once let go: `RefereeSession.draw`) and the reference's outputs for them,
    native and float64 (None where the float64 reference is not used; see `Float64Plan`), with the native one's
    structure (`outline`; the native output itself None where it was let go: `RefereeSession.expect`)."""

    inputs: list | None
    expected: Any
    expected64: Any
    outline: compare.Outline

    @property
    def values(self):
        """What a comparison without the float64 truth, and the count of unwritten elements, take: the native
        output, or the truth where the native one was let go (within the tolerance of it everywhere)."""
        return self.expected if self.expected is not None else self.expected64


@dataclass
class RefereeSession:
    problem: Any  # the imported problem module
    device: torch.device
    reference: Precisions  # `native()` and `float64()` give it at either precision
    kernelbench: bool
    seeding: CallSeeding
    plan: Float64Plan
    kept: dict[int, Expectation] = field(default_factory=dict)
    footprint: dict[str, int] = field(default_factory=dict)  # measured on the first expectation
    range_originals: Originals = field(default_factory=Originals)  # entries a range probe changed
    # the evaluation's (atol, rtol) as options give them (either None: the output dtype's), which every comparison
    # uses: a native output within it of the float64 truth is let go (`expect`); None: native outputs are all kept
    tolerance: tuple[float | None, float | None] | None = None
    parked: list[tuple[torch.nn.Parameter, torch.device, torch.Tensor | None]] = field(default_factory=list)
    # (in host memory now: each with its device, and its host copy where that is registered with CUDA)

    @classmethod
    def build(cls, problem, device: torch.device, init_seed: int, init_inputs_seed: int,
              kernelbench: bool, call_seed: int | None = None,
              float64_budget_bytes: int | None = None,
              tolerance: tuple[float | None, float | None] | None = None) -> "RefereeSession":
        """The reference from `init_seed` (parameters created on the device), at both precisions
        (referee/precision.py). `call_seed`: the generators are seeded with it before every reference call
        (see proc/rng). `tolerance`: the evaluation's (atol, rtol), where native outputs within it of the truth
        may be let go."""
        reference, _ = build_seeded(problem.Model, problem, device, init_seed, init_inputs_seed, kernelbench)
        reference.eval()
        session = cls(problem, device, Precisions(reference, memory.model_bytes(reference), device), kernelbench,
                      CallSeeding(call_seed, device), Float64Plan(device, float64_budget_bytes),
                      tolerance=tolerance)
        if not session.reference.one_at_a_time:
            session.float64()  # the copy made now, before any call changes the model's state (and sized with it)
        return session

    def native(self) -> torch.nn.Module:
        """The reference at its own precision: for its outputs, its timing, and every change of its entries."""
        self._unpark()
        if self.reference.converted:
            self.reference.native()
            self._release()
        return self.reference.model

    def float64(self) -> Callable[..., Any] | None:
        """The reference in float64 (called as a model is), or None where it cannot be (the plan gives up,
        saying why)."""
        self._unpark()
        converted = self.reference.converted
        model64 = self.reference.float64()
        if model64 is None:
            self.plan.give_up(f"the float64 copy of the model failed: {self.reference.failed}")
        elif self.reference.converted and not converted:
            self._release()
        return model64

    def _release(self) -> None:
        """After a change of precision or a large float64 run, the freed blocks back to the device where its free
        memory is short."""
        if self.device.type == "cuda" and self.footprint and torch.cuda.mem_get_info(self.device)[0] < \
                RELEASE_BELOW_FACTOR * (self.footprint["total_bytes"] + self.plan.need):
            torch.cuda.empty_cache()

    def state(self, names: list[str] | None = None) -> tuple[list[str], list[torch.Tensor]]:
        """The reference's state-dict entries (all, or `names`), for the worker to load."""
        state = self.native().state_dict()
        chosen = list(state) if names is None else [n for n in names if n in state]
        return chosen, [state[n] for n in chosen]

    def run(self, model: Callable[..., Any], args: list):
        with torch.inference_mode():
            out = self.seeding.call(lambda: model(*args))
        synchronize(self.device)
        return out

    def draw(self, seed: int, *, kernelbench: bool = False, expect: bool = True, float64: bool = True,
             transform: Transform | None = None, keep_inputs: bool = False) -> list:
        """Inputs from `seed` (moved by a range probe's `transform`), with the expectation kept under the
        seed (and the inputs with it where `keep_inputs`, for a comparison of the candidate's inputs after its
        call); returns what the candidate gets. Under KernelBench's protocol the reference runs first on the
        very tensors the candidate gets."""
        if kernelbench:
            seed_generators(seed, self.device)
            inputs = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in self.problem.get_inputs()]
            seed_generators(seed, self.device)
            with torch.no_grad():
                expected = self.native()(*inputs)
            synchronize(self.device)
            self.kept[seed] = Expectation(clone_args(inputs) if keep_inputs else None, expected, None,
                                          compare.Outline.of(expected))
            return inputs

        def drawn() -> list:
            inputs = make_inputs(self.problem, seed, self.device)
            return transform.inputs(inputs) if transform is not None else inputs

        if not expect:
            return drawn()
        expectation = self.expect(drawn, float64)
        self.kept[seed] = expectation if keep_inputs else dataclasses.replace(expectation, inputs=None)
        return expectation.inputs

    def expect(self, draw: Callable[[], list], float64: bool = True) -> Expectation:
        """The inputs `draw` gives and the reference's outputs for them: native, then float64 as the plan allows
        (whole, in chunks along a dimension of its inputs, or not at all: a stochastic reference's float64 draws
        differ from its own, and a reference that builds tensors in the default dtype cannot run in float64).
        Inputs of UNCOPIED_FROM_BYTES or more go to the native reference as they are where nothing else holds
        them (proc/inputs.owned), not as copies (a second footprint of a large input beside them: level1/47's
        8 GiB); where it changed them (their checksums before and after differ) they are drawn again, so the
        kept inputs are always what the candidate gets. A native output within the evaluation's tolerance of the
        float64 truth everywhere is let go (its outline kept): a comparison with the truth never falls back to it
        then, and the referee held it beside the truth while the candidate's output was made and compared
        (level1/7 on an H100: three 4 GiB outputs in the two processes, 3.1 times the footprint)."""
        first = not self.footprint
        inputs = draw()
        large = memory.tensor_bytes(inputs) >= UNCOPIED_FROM_BYTES
        uncopied = [large and owned(inputs, i) for i in range(len(inputs))]
        before = _checksums([a for a, alone in zip(inputs, uncopied) if alone])
        args = [inputs[i] if uncopied[i] else clone_args(inputs[i:i + 1])[0] for i in range(len(inputs))]
        if first:  # (after the copies: they are not the reference's activations)
            start = measure_start(self.device)
        expected = self.run(self.native(), args)
        del args
        if first:
            self.footprint = footprint(self.device, start, self.native(), inputs, expected)
            self.plan.size(self.footprint, self.device, self.reference.upcast_bytes())
        if _checksums([a for a, alone in zip(inputs, uncopied) if alone]) != before:
            inputs = draw()
        if self.seeding.stochastic:
            self.plan.give_up("the reference draws random numbers in forward (its float64 draws would differ)")
        expected64 = None
        if float64 and self.plan.usable and self.float64() is not None:
            expected64 = self.plan.run(lambda args: self.run(self.float64(), args),
                                       lambda args: self.run(self.native(), args), inputs, expected,
                                       checks_aside=self._state_kept)
            if self.plan.need > RELEASE_AFTER_RUN_BYTES:
                self._release()
        outline = compare.Outline.of(expected)
        if expected64 is not None and self.tolerance is not None and \
                compare.within(expected, expected64, *compare.tolerance(outline.dtype, *self.tolerance)):
            expected = None  # the truth alone decides every comparison: one output less held until then
        elif expected64 is not None and self.device.type == "cuda" and \
                memory.tensor_bytes(expected) >= NATIVE_IN_HOST_FROM_BYTES:
            expected = _in_host(expected)
        return Expectation(inputs, expected, expected64, outline)

    @contextmanager
    def _state_kept(self) -> Iterator[None]:
        """The reference at its own precision, its state put back after the block (precision.state_kept)."""
        self.native()
        with self.reference.state_kept():
            yield

    def set_range(self, transform: Transform | None) -> list[str]:
        """Put back the entry the previous range probe changed, then change `transform`'s (if it is a state
        entry): the names of the entries that changed (the worker makes the same move: proc/perturb.py)."""
        names = move(self.native().state_dict(keep_vars=True), self.range_originals, transform)
        self.reference.changed(names)
        return names

    def park(self, parked: bool, names: list[str] | None = None) -> None:
        """The reference's parameters of PARKED_FROM_BYTES or more on a PARKED_DEVICES device into host memory
        (`parked`), each object keeping its identity and values, their device memory given back to the device (the
        worker's to use, not this process's cache), or back where they were (as any use of the model does first:
        `native`, `float64`). With `names` (the entries the worker is about to hold twice), only as many as their
        bytes (`_covering`; none for a change under PARKED_FROM_BYTES; no margin beyond them): parking all of a
        model's 8.6 GB around the change of one bias moved 17 GB through host memory for nothing. Not moved: a
        parameter whose memory another entry or attribute shares (moved apart, they would no longer be tied);
        where host memory runs short, the rest (pageable memory: pinned blocks are kept by torch for the process's
        life, rounded up to a power of two)."""
        if not parked:
            self._unpark()
            return
        model = self.native()
        state = model.state_dict(keep_vars=True)
        held = {id(t): t for t in (*state.values(), *(v for _, _, v in tensor_attributes(model)))}  # (a tied one once)
        shared = Counter(t.untyped_storage().data_ptr() for t in held.values())
        movable = [p for p in model.parameters() if p.device.type in PARKED_DEVICES
                   and shared[p.untyped_storage().data_ptr()] == 1 and p.untyped_storage().nbytes() >= PARKED_FROM_BYTES]
        if names is not None:
            changed = {id(state[n]): state[n] for n in names if n in state}  # (a tied entry once)
            movable = _covering(movable, memory.tensor_bytes(list(changed.values())))
        try:
            for parameter in movable:
                host, registered = _registered_copy(parameter.data)
                self.parked.append((parameter, parameter.device, host if registered else None))
                parameter.data = host
        except RuntimeError:  # (torch's error for a failed host allocation: the rest stay where they are)
            pass
        if self.parked and self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _unpark(self) -> None:
        while self.parked:  # (each let go once back: a copy that runs out of memory leaves the rest parked)
            parameter, device, registered = self.parked[0]
            parameter.data = parameter.data.to(device, copy=True)  # (synchronous: the host copy is read on return)
            self.parked.pop(0)
            if registered is not None:
                cudadriver.unregister_host(registered.untyped_storage().data_ptr())

    def perturb(self, seed: int, names: list[str] | None, replace: bool) -> list[str]:
        """The probes' change of the reference's entries (proc/perturb.py; the worker makes the same)."""
        changed = perturb(*entries(self.native()), seed, names, replace=replace, device=self.device)
        self.reference.changed(changed)
        return changed


def _covering(parameters: list[torch.Tensor], need_bytes: int) -> list[torch.Tensor]:
    """The parameters to park for `need_bytes`: none under PARKED_FROM_BYTES; else the smallest one that covers
    them alone, or the largest first until they are covered."""
    if need_bytes < PARKED_FROM_BYTES:
        return []
    size = {id(p): p.untyped_storage().nbytes() for p in parameters}
    alone = [p for p in parameters if size[id(p)] >= need_bytes]
    if alone:
        return [min(alone, key=lambda p: size[id(p)])]
    chosen, covered = [], 0
    for parameter in sorted(parameters, key=lambda p: -size[id(p)]):
        if covered >= need_bytes:
            break
        chosen.append(parameter)
        covered += size[id(parameter)]
    return chosen


def _in_host(out):
    """A reference output's tensors copied into pinned host memory (the device's let go), its structure kept; as it
    is where pinned memory cannot be had."""
    try:
        if isinstance(out, torch.Tensor):
            return _pinned_copy(out)
        return (tuple if isinstance(out, tuple) else list)(_pinned_copy(t) for t in out)  # (its type: its outline)
    except RuntimeError:  # (torch's error for a failed host allocation)
        return out


def _registered_copy(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """`t` copied into host memory, laid out as it is, and whether that memory is registered with CUDA (`t` on a
    GPU): registered pageable memory copies faster both ways than plain pageable memory, which goes through the
    driver's staging buffers (on an H100, 1 GiB out in 0.36 s against 0.80 s with its registration, back in 0.075 s
    against 0.18 s; level3/2's 8.6 GB of parameters parked and brought back 18 times: its evaluation 33.4 s against
    40.9 s, benchmarks/park_copies.py), and once unregistered it is given back like any other, where torch keeps its
    pinned blocks for the process's life. Plain pageable where registration fails."""
    host = torch.empty_like(t, device="cpu")  # (its layout where dense, else contiguous)
    storage = host.untyped_storage()
    registered = t.device.type == "cuda" and storage.nbytes() > 0 and \
        cudadriver.register_host(storage.data_ptr(), storage.nbytes())
    try:
        host.copy_(t)
    except BaseException:
        if registered:  # (never freed while registered)
            cudadriver.unregister_host(storage.data_ptr())
        raise
    return host, registered


def _pinned_copy(t: torch.Tensor) -> torch.Tensor:
    """`t` copied into host memory, laid out as it is, pinned where it is on a GPU (copies at the bus's speed)."""
    return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, pin_memory=t.device.type == "cuda").copy_(t)


def _checksums(inputs: list) -> list[int]:
    """Each tensor input's checksum over its bits (proc/perturb.entry_checksum; a contiguous one taken flat, in
    blocks of bounded size whatever its shape)."""
    weights: dict[tuple, torch.Tensor] = {}
    return [int(entry_checksum(a.view(-1) if a.is_contiguous() else a, weights))
            for a in inputs if isinstance(a, torch.Tensor)]
