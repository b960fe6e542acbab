"""Seeds: every trial, probe and input set has its own, derived from the run's seed by label and index.

Torch-free, so the judge derives them itself and sends explicit seeds to the referee and the worker: the
candidate's process sees the seed of each call it makes, never the run's seed, so it cannot compute the
inputs of calls still to come.
"""

from __future__ import annotations

import hashlib
import random
import secrets


def derive_seed(seed: int, label: str, index: int = 0) -> int:
    digest = hashlib.sha256(f"{seed}:{label}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def fresh_seed() -> int:
    """A seed from the operating system's random source: not derived from anything a process could know."""
    return secrets.randbits(63)


def rows_seed(plan_seed: int) -> int:
    """The seed of a range probe's rows move (which rows it shifts: proc/perturb.moved_rows), from its plan's seed:
    the referee draws it when it makes the plan and again when it checks a plan a batch kept (referee/ranges.py
    `plan`, `kept`), so each candidate's rows are its own seed's."""
    return random.Random(plan_seed).randrange(1, 1 << 31)
