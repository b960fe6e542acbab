"""The referee's state for one evaluation: the problem, the reference models, and the expectations kept
between drawing a trial's inputs and comparing the candidate's output for them.

Nothing here ever sees candidate code: the referee imports the problem only, and what it knows of the
candidate is the data the judge relays (output bytes and the facts the worker reported about them).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch

from kerneljudge.proc.inputs import build_seeded, clone_args, make_inputs, seed_generators, synchronize
from kerneljudge.proc.rng import CallSeeding
from kerneljudge.referee.plan import CHUNK_FLOOR_BYTES, Float64Plan, footprint, measure_start
from kerneljudge.proc.perturb import Transform, entries, move, perturb

KERNELBENCH_SEED = 42
# The float64 run's freed blocks go back to the device (for the worker, which shares it) only where the device's
# free memory is under this many times what the problem and that run take: emptying the cache after every draw
# made each later run allocate afresh (level2/51 on an H200, with 140 GB free for a 0.4 GB problem).
RELEASE_BELOW_FACTOR = 4


@dataclass
class Expectation:
    """A trial's inputs (as drawn) and the reference's outputs for them, native and float64 (None where
    the float64 reference is not used; see `Float64Plan`)."""

    inputs: list
    expected: Any
    expected64: Any


@dataclass
class RefereeSession:
    problem: Any  # the imported problem module
    device: torch.device
    reference: torch.nn.Module
    reference64: torch.nn.Module | None
    kernelbench: bool
    seeding: CallSeeding
    plan: Float64Plan
    kept: dict[int, Expectation] = field(default_factory=dict)
    footprint: dict[str, int] = field(default_factory=dict)  # measured on the first expectation
    range_originals: dict[str, torch.Tensor] = field(default_factory=dict)  # entries a range probe changed

    @classmethod
    def build(cls, problem, device: torch.device, init_seed: int, init_inputs_seed: int,
              kernelbench: bool, call_seed: int | None = None,
              float64_budget_bytes: int | None = None) -> "RefereeSession":
        """The reference from `init_seed` (parameters created on the device), and its float64 copy.
        `call_seed`: the generators are seeded with it before every reference call (see proc/rng)."""
        reference, _ = build_seeded(problem.Model, problem, device, init_seed, init_inputs_seed, kernelbench)
        reference.eval()
        plan = Float64Plan(device, float64_budget_bytes)
        try:
            reference64 = copy.deepcopy(reference).to(torch.float64)
        except Exception as exc:  # noqa: BLE001 - the reference may not support float64; the trials say so
            reference64 = None
            plan.give_up(f"the float64 copy of the model failed: {type(exc).__name__}")
        return cls(problem, device, reference, reference64, kernelbench, CallSeeding(call_seed, device), plan)

    def state(self, names: list[str] | None = None) -> tuple[list[str], list[torch.Tensor]]:
        """The reference's state-dict entries (all, or `names`), for the worker to load."""
        state = self.reference.state_dict()
        chosen = list(state) if names is None else [n for n in names if n in state]
        return chosen, [state[n] for n in chosen]

    def run(self, model: torch.nn.Module, args: list):
        with torch.inference_mode():
            out = self.seeding.call(lambda: model(*args))
        synchronize(self.device)
        return out

    def draw(self, seed: int, *, kernelbench: bool = False, expect: bool = True, float64: bool = True,
             transform: Transform | None = None) -> list:
        """Inputs from `seed` (moved by a range probe's `transform`), with the expectation kept under the
        seed; returns what the candidate gets. Under KernelBench's protocol the reference runs first on the
        very tensors the candidate gets."""
        if kernelbench:
            seed_generators(seed, self.device)
            inputs = [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in self.problem.get_inputs()]
            seed_generators(seed, self.device)
            with torch.no_grad():
                expected = self.reference(*inputs)
            synchronize(self.device)
            self.kept[seed] = Expectation(clone_args(inputs), expected, None)
            return inputs
        inputs = make_inputs(self.problem, seed, self.device)
        if transform is not None:
            inputs = transform.inputs(inputs)
        if expect:
            self.kept[seed] = self.expect(inputs, float64)
        return inputs

    def expect(self, inputs: list, float64: bool = True) -> Expectation:
        """The reference's outputs for `inputs`: native, then float64 as the plan allows (whole, in chunks
        along the batch dimension, or not at all: a stochastic reference's float64 draws differ from its
        own, and a reference that builds tensors in the default dtype cannot run in float64)."""
        first = not self.footprint
        args = clone_args(inputs)  # the reference may change its inputs; the kept ones are the candidate's
        if first:
            start = measure_start(self.device)
        expected = self.run(self.reference, args)
        del args
        if first:
            self.footprint = footprint(self.device, start, self.reference, inputs, expected)
            self.plan.size(self.footprint, self.device)
        if self.seeding.stochastic:
            self.plan.give_up("the reference draws random numbers in forward (its float64 draws would differ)")
        expected64 = None
        if float64 and self.reference64 is not None and self.plan.usable:
            expected64 = self.plan.run(lambda args: self.run(self.reference64, args),
                                       lambda args: self.run(self.reference, args), inputs, expected)
            if self.device.type == "cuda" and self.plan.need > CHUNK_FLOOR_BYTES and \
                    torch.cuda.mem_get_info(self.device)[0] < RELEASE_BELOW_FACTOR * (
                        self.footprint["total_bytes"] + self.plan.need):
                torch.cuda.empty_cache()
        return Expectation(inputs, expected, expected64)

    def set_range(self, transform: Transform | None) -> list[str]:
        """Put back the entry the previous range probe changed, then change `transform`'s (if it is a state
        entry): the names of the entries that changed (the worker makes the same move: proc/perturb.py)."""
        names = move(self.reference.state_dict(keep_vars=True), self.range_originals, transform)
        self.refresh64(names)
        return names

    def perturb(self, seed: int, names: list[str] | None, replace: bool) -> list[str]:
        """The probes' change of the reference's entries (proc/perturb.py; the worker makes the same)."""
        changed = perturb(*entries(self.reference), seed, names, replace=replace, device=self.device)
        self.refresh64(changed)
        return changed

    def refresh64(self, names: list[str]) -> None:
        """The float64 copy takes the changed state entries `names` (upcast in place: a new float64 copy of
        the whole model per change took seconds per probe for a 1.6 GB model on a CPU)."""
        if self.reference64 is None:
            return
        state, state64 = self.reference.state_dict(), self.reference64.state_dict(keep_vars=True)
        with torch.no_grad():
            for name in names:
                state64[name].copy_(state[name])

