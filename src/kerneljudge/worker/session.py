"""The worker's state between requests: the imported modules, ModelNew, the device, kept buffers.

The worker holds no reference model, no expected output and no tolerance: it runs the candidate on the
inputs the judge relays from the referee and hands back what came out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kerneljudge.proc.inputs import synchronize
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
    seeding: CallSeeding | None = None  # set at construction: the generators' seed before each call
    own_ops: tuple[str, ...] = ()  # operators the candidate registered with torch while it was imported
    # a copy of the reference's state as loaded, which the probes' parameter changes are made on, as the
    # referee makes them on the reference (proc/perturb.py): which entries are parameters, what a range
    # probe moved
    reference_state: dict[str, torch.Tensor] = field(default_factory=dict)
    reference_parameters: set[str] = field(default_factory=set)
    range_originals: dict[str, torch.Tensor] = field(default_factory=dict)

    def call(self, args: list):
        """One candidate call in inference mode (the generators seeded as the referee seeds them before
        the reference's), the device synchronised before returning."""
        with torch.inference_mode():
            out = self.seeding.call(lambda: self.candidate(*args)) if self.seeding else self.candidate(*args)
        synchronize(self.device)
        return out
