"""The worker's state between requests: the imported modules, ModelNew, the device, kept buffers.

The worker holds no reference model, no expected output and no tolerance: it runs the candidate on the
inputs the judge relays from the referee and hands back what came out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kerneljudge.proc.inputs import synchronize
from kerneljudge.proc.perturb import Originals
from kerneljudge.proc.rng import CallSeeding
from kerneljudge.worker.build import Loaded
from kerneljudge.worker.guard import Guard


@dataclass
class Session:
    """One candidate's evaluation inside a worker."""

    guard: Guard
    device: torch.device
    loaded: Loaded
    candidate: Any = None  # the ModelNew instance once constructed
    kept: dict[str, list] = field(default_factory=dict)  # argument buffers kept for a later call (probes)
    output_sizes: list[int] = field(default_factory=list)  # byte sizes of the last outputs (for poisoning)
    scratch_bytes: int = 0  # GPU: what the last call allocated beyond its outputs at its peak (for poisoning)
    seeding: CallSeeding | None = None  # set at construction: the generators' seed before each call
    own_ops: tuple[str, ...] = ()  # operators the candidate registered with torch while it was imported
    # what the probes' parameter changes are made on, as the referee makes them on the reference
    # (proc/perturb.py): the reference's entry names in its order, which are parameters, what a range probe
    # moved. ModelNew's own entries hold the values (loaded from the reference's state: no second copy of a
    # 4 GB weight beside ModelNew's); the worker keeps its own copy of an entry only where ModelNew holds it
    # in another dtype or on another device (its rounding would make the next change differ), from the
    # construction or from the first values sent for it after ModelNew changed it so
    reference_names: list[str] = field(default_factory=list)
    # ModelNew's entries as its state_dict gave them at its construction: what the probes change, with none of its
    # code called again (a candidate dropped its stale cache only when its state_dict was called: the probe's sign)
    held: dict[str, Any] = field(default_factory=dict)
    reference_parameters: set[str] = field(default_factory=set)
    own_copies: dict[str, torch.Tensor] = field(default_factory=dict)
    reference_bytes: int = 0  # the reference's state's bytes, a tied tensor once
    range_originals: Originals = field(default_factory=Originals)

    def held_entries(self) -> dict[str, torch.Tensor]:
        """ModelNew's parameters and buffers by name (the objects themselves), none if it is not a Module."""
        return self.candidate.state_dict(keep_vars=True) if isinstance(self.candidate, torch.nn.Module) else {}

    def reference_values(self, held: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The reference's entries as this process follows them, in the reference's order: its own copy of an
        entry, else ModelNew's (`held`; one tensor under two names where ModelNew ties them, as the reference
        would), brought to this process's device where ModelNew keeps it elsewhere (the changes are drawn on
        the device)."""
        values = {}
        for name in self.reference_names:
            value = self.own_copies.get(name, held.get(name))
            if value is not None:
                here = value.device.type == self.device.type and self.device.index in (None, value.device.index)
                values[name] = value if here else value.detach().to(self.device)  # ("cuda" is the current one)
        return values

    def call(self, args: list):
        """One candidate call in inference mode (the generators seeded as the referee seeds them before
        the reference's), the device synchronised before returning."""
        with torch.inference_mode():
            out = self.seeding.call(lambda: self.candidate(*args)) if self.seeding else self.candidate(*args)
        synchronize(self.device)
        return out
