"""The probes' parameter changes, made alike in the referee and in the worker from the judge's seed.

A probe changes the reference's parameters and buffers (from a secret seed, or one state entry moved by a
range probe) and the candidate must follow. The referee makes the change on the reference; the worker makes
the same change on ModelNew's own entries, which hold the reference's state as loaded at construction (built
alike there, or sent where it came out otherwise: `digest`), and writes it into ModelNew as the probe says: the
same draws from the same seed on the same device give the same values, so no state crosses between the
processes per change (each change of level2/51's 256 MiB weight crossed the host twice), and the worker holds
no second copy of the parameters beside ModelNew's (worker/session.py).
A worker that changes the values otherwise only makes its own outputs wrong: the referee's expectation is
computed from its own change, and the two fingerprints of a change tell the judge to send the referee's values.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import asdict, dataclass, field
from typing import Iterator

import torch

from kerneljudge.proc import tensorwire
from kerneljudge.proc.memory import tensor_bytes
from kerneljudge.proc.inputs import owned

INPUTS = "inputs"  # a range probe's target: every floating input
PERTURB_BLOCK = 1 << 22  # elements of an entry changed at once (16 MiB of float32 draws)
DIGEST_MULTIPLIER = 0x9E3779B97F4A7C15 - (1 << 64)  # an odd 64-bit constant (2^64 / golden ratio), as int64
LOW_32 = 0xFFFFFFFF
_WORDS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}  # an element's bits as an integer


@dataclass(frozen=True)
class Transform:
    """A range probe's move: `target` (INPUTS, "input:N" or a state-dict entry) becomes target * scale + shift; with
    `rows` (a secret seed), an input's rows along its first dimension only (`moved_rows`): its first, its last and
    a few drawn from the seed, so that a model reducing over the batch no longer sees alike rows (a loss computed
    without the last row, or on 7 rows in 8, stayed within the tolerance on inputs whose rows were drawn alike)."""

    target: str
    scale: float = 1.0
    shift: float = 0.0
    rows: int = 0

    @property
    def label(self) -> str:
        move = f"x{self.scale:g}" if self.shift == 0 else f"{self.shift:+g}"
        return f"{self.target} {'rows ' if self.rows else ''}{move}"

    def to_json(self) -> dict:
        return {**asdict(self), "label": self.label}

    @classmethod
    def from_json(cls, data: dict) -> "Transform":
        return cls(str(data["target"]), float(data["scale"]), float(data["shift"]), int(data.get("rows") or 0))

    def applies_to_input(self, index: int) -> bool:
        return self.target in (INPUTS, f"input:{index}")

    def inputs(self, args: list) -> list:
        """`args` moved: each floating input it applies to becomes input * scale + shift; in place where the
        input is the caller's own (proc/inputs.owned: out of place, a range probe on level1/47's 8 GiB input
        held three of it at once). The same two roundings either way (the product, then the sum)."""
        return [self._moved(args, i) if isinstance(args[i], torch.Tensor) and args[i].is_floating_point()
                and self.applies_to_input(i) else args[i] for i in range(len(args))]

    def _moved(self, args: list, i: int) -> torch.Tensor:
        if not self.rows or args[i].dim() == 0:
            return args[i].mul_(self.scale).add_(self.shift) if owned(args, i) else args[i] * self.scale + self.shift
        out = args[i] if owned(args, i) else args[i].clone()
        index = torch.tensor(moved_rows(out.shape[0], self.rows), device=out.device)
        out.index_copy_(0, index, out.index_select(0, index) * self.scale + self.shift)
        return out


#: Of an input's rows, the share a rows move draws beside its first and its last
MOVED_ROWS_SHARE = 1 / 16


def moved_rows(count: int, seed: int) -> list[int]:
    """The rows a rows move changes among `count`: the first, the last, and MOVED_ROWS_SHARE of the others drawn
    from `seed` (the same in both processes)."""
    drawn = random.Random(seed).sample(range(1, max(1, count - 1)), int((count - 2) * MOVED_ROWS_SHARE)) \
        if count > 2 else []
    return sorted({0, count - 1, *drawn})


def entries(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], set[str]]:
    """A model's state entries (the tensors themselves, changed in place by `perturb` and `move`) and which
    of them are parameters."""
    return model.state_dict(keep_vars=True), {n for n, _ in model.named_parameters()}


def tie_key(t: torch.Tensor) -> tuple:
    """What two entries share when they are the very same tensor (its memory, offset, shape, strides, dtype)."""
    return t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype


def ties(names: list[str], tensors: list[torch.Tensor]) -> dict[str, str]:
    """Entries that are the very tensor of an earlier entry (tied weights): name -> that entry's name (the
    worker counts such a tensor once among a model's bytes)."""
    first: dict[tuple, str] = {}
    tied: dict[str, str] = {}
    for name, t in zip(names, tensors):
        key = tie_key(t)
        if key in first:
            tied[name] = first[key]
        else:
            first[key] = name
    return tied


def perturb(state: dict[str, torch.Tensor], parameters: set[str], seed: int, names: list[str] | None, *,
            replace: bool, device: torch.device) -> list[str]:
    """Change the floating entries of `state` (`names`, or all) in place from `seed` (`perturbation`).
    Returns the names changed."""
    return [name for name, _ in perturbation(state, parameters, seed, names, replace=replace, device=device)]


@torch.no_grad()
def perturbation(state: dict[str, torch.Tensor], parameters: set[str], seed: int, names: list[str] | None, *,
                 replace: bool, device: torch.device, copy: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """The change of the floating entries of `state` (`names`, or all) from `seed`, entry after entry in
    `state`'s order, each yielded (name, changed tensor) once changed: values scaled by 0.5..1.5
    elementwise (signs kept, so variances stay positive) and parameters shifted a little (so
    zero-initialised biases change too); with `replace`, parameters get new values in [-0.5, 0.5), as
    new parameter objects would bring (buffers are scaled either way). In place, or with `copy` on new
    tensors made like the entries (the entries untouched; a tensor under two names, changed twice, is one
    new tensor), each entry taken out of `state` (the caller's dict) when reached, so a consumer that swaps
    each copy in before the next is made holds one entry's copy beside the parameters at a time.
    Each entry changes a block of about PERTURB_BLOCK elements at a time, so a change needs one block's draws
    beside the state, not three copies of its largest entry (a 256 MiB weight's change took 768 MiB more
    on the H200: the judge's peak for the Gemm problems of KernelBench's level 2)."""
    generator = torch.Generator(device).manual_seed(seed)
    copies: dict[int, torch.Tensor] = {}  # by the entry's id: every entry was alive at the start, ids distinct
    for name in list(state):
        t = state.pop(name) if copy else state[name]
        if (names is not None and name not in names) or not t.is_floating_point():
            continue
        fresh = replace and name in parameters
        if copy:
            if id(t) not in copies:
                copies[id(t)] = torch.empty_like(t.detach()) if fresh else t.detach().clone()
            t = copies[id(t)]
        for block in _blocks(t):
            if fresh:
                block.copy_(_uniform(block, generator, -0.5, 0.5))
            else:
                block.mul_(_uniform(block, generator, 0.5, 1.5))
                if name in parameters:
                    block.add_(_uniform(block, generator, -0.1, 0.1))
        yield name, t


#: The most host memory a process's kept originals take (`Originals`); past it, the ones not moved now are let go.
KEPT_ORIGINALS_BYTES = 4 << 30
#: Entries on these devices keep their copies between moves (a CPU entry's copy is a plain memory copy: nothing to
#: save by keeping it, and host memory to spend)
KEPT_ORIGINALS_DEVICES = ("cuda",)


@dataclass
class Originals:
    """The state entries range moves changed, each copied into host memory (a copy held on the device took a second
    footprint of level2/64's weight in both processes) and kept until the moves end: an entry moved again, unchanged
    since it was put back (the same tensor, memory and version), takes no second copy (the round robin over the
    targets moves level2/51's 256 MiB weight at four scales, and each copy out of a GPU went through pageable memory,
    in both processes: the range probes were 2.9-3.2 s of a served evaluation on an H100). `moved`: the entries
    changed now."""

    kept: dict[str, tuple[torch.Tensor, tuple | None]] = field(default_factory=dict)  # name -> (copy, stamp)
    moved: list[str] = field(default_factory=list)


def _stamp(t: torch.Tensor) -> tuple | None:
    """What tells an entry unchanged since it was put back (None: it cannot be told, an inference tensor without
    a version counter)."""
    try:
        return id(t), t.data_ptr(), t._version
    except RuntimeError:
        return None


def put_back(state: dict[str, torch.Tensor], originals: Originals) -> list[str]:
    """Put back the entries moved now from their copies (kept, stamped as put back; one no longer in `state`, as a
    ModelNew that dropped it, is let go of): their names."""
    moved, originals.moved = originals.moved, []  # (a put-back that fails is not tried again with a copy let go)
    names = [name for name in moved if name in state]
    with torch.no_grad():
        for name in moved:
            copy, _ = originals.kept.pop(name, (None, None))
            if copy is not None and name in state:
                state[name].copy_(copy)
                if state[name].device.type in KEPT_ORIGINALS_DEVICES:
                    originals.kept[name] = (copy, _stamp(state[name]))
    return names


def move(state: dict[str, torch.Tensor], originals: Originals, transform: Transform | None) -> list[str]:
    """Put back the entries the previous range probe moved, then move `transform`'s target if it is a state entry
    (from a copy kept since an earlier move where the entry is unchanged since); no transform: the moves end, the
    copies are let go. The names of the entries that changed."""
    names = put_back(state, originals)
    if transform is None:
        originals.kept.clear()
        return names
    if transform.target in state:
        entry = state[transform.target]
        copy, stamp = originals.kept.pop(transform.target, (None, None))
        if copy is None or stamp is None or stamp != _stamp(entry):
            copy = entry.detach().to("cpu", copy=True)
        _within(originals, KEPT_ORIGINALS_BYTES - tensor_bytes(copy))
        originals.kept[transform.target] = (copy, None)
        with torch.no_grad():
            entry.mul_(transform.scale).add_(transform.shift)
        originals.moved.append(transform.target)  # (once changed: a change that raised has nothing to put back)
        names.append(transform.target)
    return names


def _within(originals: Originals, budget_bytes: int) -> None:
    """Let go of the oldest kept copies until the rest take at most `budget_bytes`."""
    while originals.kept and sum(tensor_bytes(copy) for copy, _ in originals.kept.values()) > budget_bytes:
        originals.kept.pop(next(iter(originals.kept)))


def fingerprint(state: dict[str, torch.Tensor], names: list[str]) -> list[float]:
    """Each entry's sum in float64, in `names`' order: both processes send theirs after a change, so a
    worker whose entries no longer follow the reference (a reference that changes its own state in forward,
    ModelNew's entries not tied as the reference's are) is told apart from a candidate's stale cache."""
    return [_sum64(state[name].detach()) for name in names]


def digest(state: dict[str, torch.Tensor], names: list[str]) -> list[int]:
    """Each entry's checksum, in `names`' order, over its dtype, its shape and its bits in logical order, block by
    block (`_blocks`: rows at a time): on the CPU a CRC-32 of the bytes, chained over the blocks; on a GPU, where
    the bytes are not in host memory, each element's bits as unsigned 32-bit halves times odd weights that depend
    on the position, summed in 64 bits, the blocks' sums chained with wraparound (on the CPU that took seven times
    the CRC's 0.12 s for a 256 MiB weight). Both processes are on the same device, so they compute it alike. It
    tells apart what the probes' sums (`fingerprint`) would not: a permutation, signs flipped in pairs, a
    conjugate, another shape of the same bytes, a non-finite entry. Two builds of the reference (the referee's
    and the worker's, from the same seeds) are taken as the same state only when every entry's checksum agrees."""
    weights: dict[tuple, torch.Tensor] = {}
    sums = [entry_checksum(state[name], weights) for name in names]
    return [int(v) for v in torch.stack([v.cpu() for v in sums]).tolist()] if sums else []


def entry_checksum(t: torch.Tensor, weights: dict[tuple, torch.Tensor], *, in_host: bool | None = None) -> torch.Tensor:
    """One entry's checksum as a 0-d int64 tensor: the CRC where its bytes are in host memory (`in_host`, by
    default where it is on the CPU), else the weighted halves (`weights`: their cache for this digest)."""
    t = t.detach().resolve_conj().resolve_neg()  # a lazy conjugate or negation, as its values
    start = zlib.crc32(f"{t.dtype} {tuple(t.shape)}".encode())
    if t.device.type == "cpu" if in_host is None else in_host:
        return torch.tensor(_crc(t, start), dtype=torch.int64)
    return _weighted_words(t, start, weights)


def _crc(t: torch.Tensor, start: int) -> int:
    """CRC-32 of a CPU tensor's bytes in its logical order, chained over its blocks from `start`."""
    crc = start
    for block in _blocks(t):
        flat = block.contiguous().reshape(-1)
        if flat.numel():
            crc = zlib.crc32(tensorwire.host_bytes(flat), crc)
    return crc


def _weighted_words(t: torch.Tensor, start: int, weights: dict[tuple, torch.Tensor]) -> torch.Tensor:
    """A tensor's elements' bits as unsigned 32-bit halves (the high half only for 8-byte words) times odd
    positional weights, each half its own, summed per block in 64 bits, the blocks' sums chained with
    wraparound from `start`: a 0-d int64 tensor on its device. (Whole words times weights lost a sign bit
    flipped in two places: each flip added the same 2^63.)"""
    total = torch.full((), start, dtype=torch.int64, device=t.device)
    for block in _blocks(t):
        size = block.element_size()
        words = block.contiguous().reshape(-1).view(_WORDS.get(size, torch.int64)).to(torch.int64)
        block_sum = ((words & LOW_32) * _weights(weights, words.numel(), words.device, 0)).sum()
        if size >= 8:  # complex128's 16-byte elements are two 8-byte words each
            block_sum += (((words >> 32) & LOW_32) * _weights(weights, words.numel(), words.device, 1)).sum()
        total = total * DIGEST_MULTIPLIER + block_sum
    return total


def _weights(cache: dict[tuple, torch.Tensor], count: int, device: torch.device, half: int) -> torch.Tensor:
    """Odd 64-bit weights for `count` positions of one half of the words (kept per device and half for the next
    blocks, grown when a longer block comes; position i's weight never depends on the length)."""
    key = (device, half)
    held = cache.get(key)
    if held is None or held.numel() < count:
        positions = torch.arange(count, dtype=torch.int64, device=device) + (half << 40)
        held = cache[key] = (positions * DIGEST_MULTIPLIER) | 1
    return held[:count]


def _sum64(t: torch.Tensor) -> float:
    """`t`'s sum in float64, a block at a time: summed whole with dtype=float64, a 256 MiB float32 weight
    took a 512 MiB float64 copy on the H200 (each change's peak in both processes, ninth session)."""
    total = torch.zeros((), dtype=torch.float64, device=t.device)
    for block in _blocks(t):
        total += block.sum(dtype=torch.float64)
    return float(total)


def _blocks(t: torch.Tensor):
    """Views of `t`, rows of its first dimension at a time, about PERTURB_BLOCK elements each (the whole of
    it when it is small, has no dimensions, or one row is larger). Shape alone decides, never strides: the
    referee's entry may be a transposed view where ModelNew's is contiguous, and both must draw alike."""
    row = t[0].numel() if t.dim() and t.shape[0] else 0
    if t.numel() <= PERTURB_BLOCK or not row or row > PERTURB_BLOCK:
        yield t
        return
    step = PERTURB_BLOCK // row
    for start in range(0, t.shape[0], step):
        yield t[start:start + step]


def _uniform(like: torch.Tensor, generator: torch.Generator, low: float, high: float) -> torch.Tensor:
    """Uniform values in [low, high) shaped and typed like `like`, drawn on its device (a 256 MB weight's
    worth of float64 draws on the CPU takes seconds), scaled in place (one block of draws in memory)."""
    values = torch.rand(like.shape, generator=generator, device=like.device, dtype=torch.float32)
    return values.mul_(high - low).add_(low).to(like.dtype)
