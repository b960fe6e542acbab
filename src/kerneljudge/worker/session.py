"""The worker's state between requests: the imported modules, the models, the device, the seeds.

Seeds are derived from the run's seed by label and index (sha256), so every trial, probe and timed
input set has its own reproducible seed, none of which the candidate can predict without the run seed.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
import torch

from kerneljudge.worker.build import Loaded
from kerneljudge.worker.guard import Guard


def derive_seed(seed: int, label: str, index: int = 0) -> int:
    digest = hashlib.sha256(f"{seed}:{label}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def clone_args(args: list) -> list:
    """Deep copies of tensors (same strides and storage offset kept simple: clone), other values as is."""
    return [a.clone() if isinstance(a, torch.Tensor) else copy.deepcopy(a) for a in args]


def upcast(args: list) -> list:
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def seed_generators(seed: int, device: torch.device) -> None:
    """Seed the CPU generator and the device's, as torch.manual_seed does for these two, without its
    per-call cost of visiting every other accelerator type (about 1 ms a call)."""
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.default_generators[device.index or 0].manual_seed(seed)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Session:
    """One candidate's evaluation inside a worker: the modules, the three models (reference, candidate,
    reference in float64) once check has built them, the device and the run's seed."""

    guard: Guard
    device: torch.device
    seed: int
    loaded: Loaded | None = None
    reference: torch.nn.Module | None = None
    candidate: torch.nn.Module | None = None
    reference64: torch.nn.Module | None = None
    output_sizes: list[int] = field(default_factory=list)  # byte sizes of the reference's outputs
    spin_cycles_per_ms: float | None = None  # GPU spin rate, measured once for the timing hold

    def make_inputs(self, seed: int) -> list:
        """get_inputs() under `seed`, drawn on the device (torch.device as the default device: drawing
        256 MB of inputs on the CPU and copying them costs more than the whole check on a GPU)."""
        seed_generators(seed, self.device)
        with torch.device(self.device):
            args = list(self.loaded.problem.get_inputs())
        return [a.to(self.device) if isinstance(a, torch.Tensor) else a for a in args]

    def init_inputs(self) -> list:
        torch.manual_seed(derive_seed(self.seed, "init-inputs"))
        return list(self.loaded.problem.get_init_inputs())

    def run(self, model: torch.nn.Module, args: list):
        with torch.inference_mode():
            return model(*args)
