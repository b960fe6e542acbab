"""Calls of a model whose forward may draw random numbers (level3/35_LSTM draws its initial states with
torch.randn): the same in the referee and the worker.

Before every call both processes seed their generators with the same call seed (sent by the judge), so
a reference that draws random numbers gives the candidate's call the very same draws, and its output
depends on the inputs alone. Whether a model did draw is seen from the generators' states around a call
(a few microseconds); a model that did is "stochastic". In timed calls the seeding is done only for a
stochastic model, so a deterministic model's timed call carries no extra host work.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import torch

from kerneljudge.proc.inputs import seed_generators


def _states(device: torch.device) -> tuple:
    """What changes when a random number is drawn: Python's, the CPU's and the device's generator states."""
    states: tuple = (random.getstate(), bytes(torch.default_generator.get_state().numpy()))
    if device.type == "cuda":
        states += (bytes(torch.cuda.default_generators[device.index or 0].get_state().numpy()),)
    return states


@dataclass
class CallSeeding:
    """Seeds the generators with `seed` before each call (None: never, as under KernelBench's protocol,
    whose trials reseed themselves) and notes whether the model drew random numbers."""

    seed: int | None
    device: torch.device
    stochastic: bool = False
    seen: bool = False  # whether a call was watched (`timed` knows `stochastic` only then)

    def call(self, fn: Callable[[], Any]) -> Any:
        if self.seed is None:
            return fn()
        self.seen = True
        seed_generators(self.seed, self.device)
        before = _states(self.device)
        out = fn()
        self.stochastic = self.stochastic or _states(self.device) != before
        return out

    def timed(self, fn: Callable[[list], Any]) -> Callable[[list], Any]:
        """`fn` for timed calls: seeded before each call only when the model was seen to draw."""
        if self.seed is None or not self.stochastic:
            return fn
        seed, device = self.seed, self.device

        def seeded(args: list) -> Any:
            seed_generators(seed, device)
            return fn(args)
        return seeded
