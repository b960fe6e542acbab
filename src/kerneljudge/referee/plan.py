"""The referee's memory plan for the float64 reference: whole, in chunks, or not at all (the reference at its
own precision is the truth then, and the report says why).

The float64 run needs about twice the memory of the native one (inputs upcast, activations and outputs
in float64). Where that exceeds the budget (`--float64-budget-mb`; by default an eighth of the native run's
memory, so checking in float64 adds little to the judge's peak, or a quarter of the free memory if less, but never
under its floor: 256 MiB on a CPU, on a GPU half the footprint within 64-256 MiB; or for a reference whose float64
parameters take most of the room, an eighth of the run), the inputs
are cut into chunks (`Split`: along the batch dimension, or a matrix product's right
operand by its columns) and the float64 reference runs chunk by chunk. That is only right for a separable model
(row i of the output depends on row i of the inputs alone, or column j on column j), which is verified first on a
secret sample of positions: the native reference on those alone must give the same positions of its full output.
A model whose outputs are scalars (a loss over the batch) is cut along the batch when its output is the mean of
the chunks' (weighted by their lengths) or their sum, verified on a secret sample's two halves.
The truth is kept in float32 where the output is not float64 (its rounding, 6e-8 relative, is under a thousandth
of the float32 tolerance), so it is no larger than the output. The chosen cut is then checked whole: the native
reference run over the very chunks must give its full output (`_chunks_agree`).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable, ContextManager

import torch

from kerneljudge.proc import memory
from kerneljudge.proc.failures import exception_line
from kerneljudge.proc.inputs import clone_args
from kerneljudge.referee.compare import float64_blocks

BUDGET_SHARE = 0.25  # of the memory free after the native reference ran: the rest is the worker's and the comparison's
# The float64 run's default budget, as a share of the native run's memory: a whole elementwise problem's
# float64 run (its inputs and outputs upcast) took 2 of the referee's 6 footprint halves on the H200 at the
# native share 1; chunks of an eighth of it keep that to a quarter of a footprint, for a few more calls.
NATIVE_SHARE = 1 / 8
SEPARABLE_TOLERANCE = 1e-5  # rows computed alone must match the full run's to this (relative and absolute)
SEPARABLE_SAMPLE_ROWS = 32  # positions in that secret sample (at most a chunk's): ones that depend on others show in a few
MAX_CHUNKS = 1 << 12
# A float64 run needing less than its floor is never chunked (the calls, and the separability checks, cost time): on
# a CPU this, on a GPU half the problem's footprint within these bounds (a whole 3-D convolution of 122 MiB, level1/72,
# held its float64 output, cuDNN's float64 workspace and the truth at once: 3.7 footprints in the referee alone) ...
CHUNK_FLOOR_BYTES = 256 << 20
CHUNK_FLOOR_LEAST_BYTES = 64 << 20
FLOOR_FOOTPRINT_SHARE = 0.5
# ... but where the float64 run upcasts a parameter to PARAMETER_HEAVY_FROM_BYTES or more on use (referee/precision.py:
# the referee and the worker each hold the native parameters, most of the judge's peak), a run of at least an eighth
# of the footprint is cut into this many chunks where no larger floor applies (level2's Gemm rows, 256 MiB weights, on
# an H100, then converted to float64 whole: 3.28x -> 3.16x; smaller models keep their floor)
PARAMETER_HEAVY_CHUNKS = 8
PARAMETER_HEAVY_FROM_BYTES = 256 << 20
SAMPLE_SHARE = 4  # a value-only float64 pass runs on this fraction of a chunk (`Float64Plan.sample`)
# A reduced truth (a loss over the batch cut into chunks) must be this near the native output of its draw (relative):
# far above float32's rounding of a large mean, far below a wrong choice of mean or sum
REDUCED_NEAR = 1e-3


def measure_start(device: torch.device) -> int:
    """Bytes allocated before the first reference call (GPU), whose peak then gives the activations; the process's
    cuBLAS workspaces are made first, or the first matrix product's would be taken for the problem's (level3/32 on an
    H100: 33 MiB of a 45 MB footprint)."""
    if device.type != "cuda":
        return 0
    memory.make_cublas_workspaces(device)
    return memory.cuda_call_start(device)


def footprint(device: torch.device, start: int, model, inputs: list, outputs) -> dict[str, int]:
    """The problem's own memory: parameters, inputs, outputs and (GPU) the reference call's activations
    (its peak beyond what it started with and what it returned; not measured on the CPU)."""
    data = {"parameters_bytes": memory.model_bytes(model), "inputs_bytes": memory.tensor_bytes(inputs),
            "outputs_bytes": memory.tensor_bytes(outputs)}
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
        data["activations_bytes"] = max(0, peak - start - data["outputs_bytes"])
    data["total_bytes"] = sum(data.values())
    return data


def chunk_floor_bytes(footprint_bytes: int, device: torch.device) -> int:
    """The float64 run's size under which it stays whole: CHUNK_FLOOR_BYTES on a CPU (where more calls cost time
    and memory is seldom this tight), on a GPU FLOOR_FOOTPRINT_SHARE of the footprint within CHUNK_FLOOR_LEAST_BYTES
    and CHUNK_FLOOR_BYTES."""
    if device.type != "cuda":
        return CHUNK_FLOOR_BYTES
    return max(CHUNK_FLOOR_LEAST_BYTES, min(CHUNK_FLOOR_BYTES, int(footprint_bytes * FLOOR_FOOTPRINT_SHARE)))


class Float64Plan:
    """How the float64 reference is computed; `describe()` says which way, for the result's memory block."""

    def __init__(self, device: torch.device, budget_bytes: int | None):
        self.device, self.budget_bytes = device, budget_bytes
        self.chunks = 1  # the float64 run's calls (once cut: the product of the cuts' counts)
        self.need = self.whole_limit = 0  # bytes: the whole float64 run's need; the most a whole run may take
        self.chunk_bytes = 0  # the most a chunk's float64 inputs, outputs and activations should take (`size`)
        self.activation_bytes = 0  # the whole float64 run's activations (twice the native run's, as `need` counts)
        self.reason: str | None = None  # why the float64 reference is not used
        self.separable: bool | None = None
        self.cuts: Cuts = ()  # how the chunks are cut, once found separable: one split, or two crossing

    @property
    def usable(self) -> bool:
        return self.reason is None

    def give_up(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def describe(self) -> dict[str, Any]:
        if self.reason is not None:
            return {"float64": "native", "why": self.reason}
        if self.chunks > 1:
            along = " crossed with ".join(f"{split.describe()} ({count})" for split, count in self.cuts)
            return {"float64": "chunked", "chunks": self.chunks, "along": f"{along} (verified on a secret sample, "
                    "then over the chunks)" if self.cuts else "not chosen yet"}
        return {"float64": "full"}

    def size(self, footprint: dict[str, int], device: torch.device, reserved_bytes: int = 0) -> None:
        """Chunks enough for the float64 run (the native run's memory, doubled) to fit the budget: the given
        one, else NATIVE_SHARE of the native run's memory within BUDGET_SHARE of the free memory, but at
        least `chunk_floor_bytes` (a run upcasting a parameter to PARAMETER_HEAVY_FROM_BYTES or more on use:
        PARAMETER_HEAVY_CHUNKS chunks, where that floor is lower);
        a model found not separable runs whole if that fits BUDGET_SHARE of the free memory. `reserved_bytes`:
        memory the float64 run will take beyond what is allocated now (a parameter's float64 copy, where they are
        upcast on use: referee/precision.py)."""
        native = footprint["inputs_bytes"] + footprint["outputs_bytes"] + footprint.get("activations_bytes", 0)
        need = 2 * native
        free_share = int(max(0, memory.device_free_bytes(device) - reserved_bytes) * BUDGET_SHARE)
        if self.budget_bytes is not None:
            budget = self.whole_limit = self.budget_bytes
        else:
            total = footprint["total_bytes"]
            floor = chunk_floor_bytes(total, device)
            if reserved_bytes >= PARAMETER_HEAVY_FROM_BYTES and need * PARAMETER_HEAVY_CHUNKS >= total:
                floor = min(floor, max(1, -(-need // PARAMETER_HEAVY_CHUNKS)))
            budget, self.whole_limit = max(min(free_share, int(native * NATIVE_SHARE)), floor), free_share
        self.need, self.chunk_bytes = need, budget
        self.activation_bytes = 2 * footprint.get("activations_bytes", 0)
        self.chunks = min(MAX_CHUNKS, max(1, math.ceil(need / max(budget, 1))))

    def run(self, run64: Callable[[list], Any], native: Callable[[list], Any], inputs: list, expected,
            checks_aside: Callable[[], ContextManager] = contextlib.nullcontext) -> Any:
        """The float64 truth for `inputs` (None when the plan gives up on it: the reason is kept). The separability
        checks' native calls run inside `checks_aside()`, which puts back the reference's state after them (the
        calls follow each other as the float64 chunks do, so a model whose state moves between them is seen)."""
        if self.chunks == 1:
            try:
                return _kept(run64(_upcast_copy(inputs)), expected)
            except torch.OutOfMemoryError:
                self.chunks = 2
            except Exception as exc:  # noqa: BLE001 - a reference that builds float32 tensors in forward
                self.give_up(f"the reference fails in float64 ({exception_line(exc, 160)})")
                return None
        if self.separable is None:
            with checks_aside():
                self.cuts = _separable_cuts(native, inputs, expected, self.chunks, self.chunk_bytes,
                                            self.activation_bytes)
            self.separable = bool(self.cuts)
            if self.separable:
                self.chunks = math.prod(count for _, count in self.cuts)
            if not self.separable and self.need <= self.whole_limit:
                self.chunks = 1  # positions depend on each other, but the whole run fits (else it gives up below)
                return self.run(run64, native, inputs, expected)
        if not self.separable:
            self.give_up("the float64 reference does not fit in memory and the model is not separable "
                         "along a dimension of its inputs")
            return None
        try:
            return _chunked(run64, inputs, expected, self.cuts)
        except Exception as exc:  # noqa: BLE001
            self.give_up(f"the chunked float64 reference failed ({type(exc).__name__})")
            return None

    def sample(self, inputs: list) -> list:
        """`inputs`, or where the float64 reference runs in chunks (verified separable) their first chunk, a quarter
        of it along the first cut: for a pass that only looks at values (the range probes' plan), which
        holds about four copies of its inputs at once (the call's own copy, a transform's two temporaries, its
        outputs) and would otherwise take more than the budget the chunks keep to."""
        if self.chunks == 1 or not self.cuts:
            return inputs
        sampled = list(inputs)  # (the pass copies what it calls the reference on: `ranges.plan`)
        for number, (split, count) in enumerate(self.cuts):
            index = torch.arange(max(1, math.ceil(split.size / (count * (SAMPLE_SHARE if number == 0 else 1)))))
            sampled = [a.index_select(d, index.to(a.device)) if d is not None else a
                       for a, d in zip(sampled, split.dims)]
        return sampled


def _upcast_copy(inputs: list) -> list:
    """Float64 copies of the inputs, made in one step (not a copy then an upcast: a third of the memory)."""
    return [a.to(torch.float64, copy=True) if isinstance(a, torch.Tensor) and a.is_floating_point()
            else clone_args([a])[0] for a in inputs]


def _kept(out64, expected):
    """The float64 truth as kept: in float32 where the native output is not float64 (rounding of 6e-8
    relative, under a thousandth of the float32 tolerance), so it takes no more memory than the output."""
    if isinstance(out64, torch.Tensor) and isinstance(expected, torch.Tensor):
        return out64 if expected.dtype == torch.float64 else out64.to(torch.float32)
    if isinstance(out64, (tuple, list)) and isinstance(expected, (tuple, list)) and len(out64) == len(expected):
        return type(out64)(_kept(o, e) for o, e in zip(out64, expected))
    return out64


@dataclass(frozen=True)
class Split:
    """How the float64 run is cut into chunks: each input along its dimension in `dims` (None: whole to every
    chunk), the outputs along `out_dim`, which is `size` long; or, for a model whose outputs are scalars (a loss over
    the batch), `reduce`: each output the mean of the chunks' own (weighted by their lengths) or their sum."""

    dims: tuple[int | None, ...]
    out_dim: int
    size: int
    reduce: str | None = None  # "mean" or "sum"; `out_dim` is then unused

    def describe(self) -> str:
        cut = ", ".join(f"input {i} dim {d}" for i, d in enumerate(self.dims) if d is not None)
        return f"{cut}; outputs the {self.reduce} of the chunks'" if self.reduce else \
            f"{cut}; outputs' dim {self.out_dim}"

    def crosses(self, other: "Split") -> bool:
        """Whether chunks of this split and of `other` can be crossed in a grid: they cut different inputs
        and different dimensions of the outputs (a matrix product's left operand by rows, its right by columns)."""
        return (self.reduce is None and other.reduce is None and self.out_dim != other.out_dim
                and all(d is None or e is None for d, e in zip(self.dims, other.dims)))


Cuts = tuple[tuple[Split, int], ...]  # the splits a float64 run is cut along, with their counts of chunks


def _rows(inputs: list, index: torch.Tensor, split: Split) -> list:
    """Copies of the inputs, restricted to the positions `index` along their split dimension (the others
    whole): the reference may change its arguments, and the kept inputs are the candidate's."""
    return [a.index_select(d, index.to(a.device)) if d is not None else clone_args([a])[0]
            for a, d in zip(inputs, split.dims)]


def _outputs(out, *, scalars: bool = False) -> list | None:
    """The output tensors, each with a dimension to cut along (`scalars`: each a floating-point scalar instead);
    None when they are not all so."""
    tensors = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
    wanted = (lambda t: t.dim() == 0 and t.is_floating_point()) if scalars else (lambda t: t.dim() > 0)
    return tensors if tensors and all(isinstance(t, torch.Tensor) and wanted(t) for t in tensors) else None


def _splits(inputs: list, expected) -> list[Split]:
    """The ways to cut the float64 run, cheapest first (by the bytes each chunk gets whole, upcast): every tensor
    whose dimension 0 is the first one's (x and its mask), the first alone (a matrix product's left operand by
    rows), and any one input along its first or last dimension with the outputs along theirs of that length (a
    matrix product's right operand by columns, as the output's: A @ B cut by A's rows upcasts all of B for each
    chunk, by B's columns all of A). Ties keep that order. Outputs that are scalars (a loss over the batch) are the
    mean of the chunks' (cut the first way) or their sum."""
    outs = _outputs(expected)
    tensors = [i for i, a in enumerate(inputs) if isinstance(a, torch.Tensor) and a.dim() > 0]
    if not tensors or (outs is None and _outputs(expected, scalars=True) is None):
        return []
    batch = inputs[tensors[0]].shape[0]
    along_batch = tuple(0 if i in tensors and inputs[i].shape[0] == batch else None for i in range(len(inputs)))
    if outs is None:  # (not where an integer input is left whole: indices into a cut input run past its chunk)
        if any(along_batch[j] is None and not inputs[j].is_floating_point() for j in tensors):
            return []
        return [Split(along_batch, 0, batch, reduce) for reduce in ("mean", "sum") if batch > 1]
    found = [Split(along_batch, 0, batch),
             Split(tuple(0 if i == tensors[0] else None for i in range(len(inputs))), 0, batch)]
    integer_inputs = [j for j in tensors if not inputs[j].is_floating_point()]
    for i in tensors:
        if integer_inputs and integer_inputs != [i]:  # an index input left whole beside a cut one: on a GPU, a
            continue  # sample it indexes past is a device-side assert, poisoning the process
        for d in dict.fromkeys((0, inputs[i].dim() - 1)):
            for e in dict.fromkeys((0, outs[0].dim() - 1)):
                found.append(Split(tuple(d if j == i else None for j in range(len(inputs))), e, inputs[i].shape[d]))
    usable = [s for s in dict.fromkeys(found)
              if s.size > 1 and all(t.dim() > s.out_dim and t.shape[s.out_dim] == s.size for t in outs)]
    return sorted(usable, key=lambda s: sum(memory.tensor_bytes([a]) for a, d in zip(inputs, s.dims) if d is None))


def _separable_cuts(native: Callable[[list], Any], inputs: list, expected, chunks: int, chunk_bytes: int,
                    activations: float) -> Cuts:
    """How to cut the float64 run into about `chunks` chunks, each checked separable (`_separable_split`) and the
    whole cut checked over its very chunks (`_chunks_agree`); () when none is. Where an input the first split leaves
    whole would make each chunk take more than `chunk_bytes` (a matrix product's right operand, cut by the left
    one's rows: level1/1's 128 MiB upcast for each chunk), a second split crossing the first (that input's columns)
    makes a grid whose chunks each upcast a block of both (`_grid`). Each chunk takes its share of the run's
    `activations`."""
    splits = _splits(inputs, expected)
    first = _separable_split(native, inputs, expected, chunks, splits)
    if first is None:
        return ()
    options: list[Cuts] = [((first, _runs(first.size, chunks)),)]
    along_first = _chunk_bytes(inputs, expected, options[0], activations)
    if along_first > chunk_bytes:
        second = _separable_split(native, inputs, expected, chunks, [s for s in splits if s.crosses(first)])
        grid = _grid(inputs, expected, first, second, chunk_bytes, activations) if second is not None else None
        if grid is not None and _chunk_bytes(inputs, expected, grid, activations) < along_first:
            options.insert(0, grid)
    return next((cuts for cuts in options if _chunks_agree(native, inputs, expected, cuts)), ())


def _runs(size: int, count: int) -> int:
    """How many chunks of ceil(size / count) positions cover `size`: the count that runs (`count` at most)."""
    return math.ceil(size / math.ceil(size / count))


def _grid(inputs: list, expected, first: Split, second: Split, chunk_bytes: int, activations: float) -> Cuts:
    """`first` crossed with `second`: the fewest chunks that each fit `chunk_bytes` (`_chunk_bytes`; the more square
    of equals), MAX_CHUNKS at most, or where none fits the grid whose chunks take least; a cut left in one chunk is
    left out. For each count of rows, the fewest columns that fit are found by bisection (a chunk's bytes only fall
    as the columns grow)."""
    def size(rows: int, columns: int) -> float:
        return _chunk_bytes(inputs, expected, ((first, rows), (second, columns)), activations)

    best: tuple[int, int, int, int] | None = None
    least: tuple[float, int, int] | None = None  # the smallest chunks, where none fits
    for rows in range(1, min(first.size, MAX_CHUNKS) + 1):
        if best is not None and rows > best[0]:
            break  # every grid from here has more chunks
        low, high = 1, min(second.size, MAX_CHUNKS // rows)
        if size(rows, high) > chunk_bytes:
            least = min(least or (math.inf, 0, 0), (size(rows, high), rows, high))
            continue
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if size(rows, middle) <= chunk_bytes else (middle + 1, high)
        key = (rows * low, abs(rows - low), rows, low)
        best = key if best is None or key[:2] < best[:2] else best
    rows, columns = best[2:] if best is not None else least[1:]
    counts = ((first, _runs(first.size, rows)), (second, _runs(second.size, columns)))  # (the least's need not run)
    return tuple((split, count) for split, count in counts if count > 1)


def _chunk_bytes(inputs: list, expected, cuts: Cuts, activations: float = 0.0) -> float:
    """The bytes of the largest chunk's float64 inputs, outputs and share of the run's `activations` under `cuts`
    (ceil(size / count) positions of each): each input's upcast over the cuts that cut it, the rest over all."""
    def share(split: Split, count: int) -> float:
        return math.ceil(split.size / count) / split.size

    total = 0.0
    for i, a in enumerate(inputs):
        if isinstance(a, torch.Tensor):
            total += a.numel() * (8 if a.is_floating_point() else a.element_size()) * math.prod(
                share(split, count) for split, count in cuts if split.dims[i] is not None)
    outputs = sum(t.numel() * 8 for t in _outputs(expected) or [])
    return total + (outputs + activations) * math.prod(share(split, count) for split, count in cuts)


def _separable_split(native: Callable[[list], Any], inputs: list, expected, chunks: int,
                     splits: list[Split]) -> Split | None:
    """The first of `splits` (`_splits`) under which the chunks are separable, checked on a secret sample of positions
    (SEPARABLE_SAMPLE_ROWS, compared block by block, so its float64 copies stay small): the native reference run
    on them alone gives the same positions of the outputs as the full run. None when none is (a run that raises
    on the sample, a shape that does not fit, is not separable). Only splits whose outputs' dimension has the
    split's length are tried (an index past the output's rows is a device-side assert on a GPU, poisoning the
    process; seen with A.T @ B, level1/16, whose output has M rows and A has K)."""
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    for split in splits:
        count = max(2 if split.reduce else 1,
                    min(split.size - 1, math.ceil(split.size / chunks), SEPARABLE_SAMPLE_ROWS))
        index = torch.randperm(split.size, generator=generator)[:count].sort().values
        try:
            if split.reduce:  # the sample's outputs, and its two halves' reduced
                halves = (index[:count // 2], index[count // 2:])
                got = _reduced(split, [(len(h), native(_rows(inputs, h, split))) for h in halves])
                want = _outputs(native(_rows(inputs, index, split)), scalars=True)
                if want is not None and not any(bool(w.abs() > SEPARABLE_TOLERANCE) for w in want):
                    continue  # (a mean and a sum of outputs of 0 cannot be told apart: neither is taken)
            else:
                want = [t.index_select(split.out_dim, index.to(t.device)) for t in _outputs(expected)]
                got = _outputs(native(_rows(inputs, index, split)))
        except Exception:  # noqa: BLE001 - these positions alone do not make a valid call: not this split
            continue
        if want is not None and _agree(got, want):
            return split
    return None


def _reduced(split: Split, pieces: list[tuple[int, Any]]) -> list[torch.Tensor] | None:
    """The outputs of a model whose outputs are scalars, from each piece's (its count of positions, its outputs) as
    `split.reduce` says: the mean weighted by the counts, or the sum; in float64. None where a piece's outputs are
    not scalars."""
    total = sum(count for count, _ in pieces)
    outputs = [_outputs(out, scalars=True) for _, out in pieces]
    if any(out is None or len(out) != len(outputs[0]) for out in outputs):
        return None
    weights = [count / total if split.reduce == "mean" else 1.0 for count, _ in pieces]
    return [sum(out[k].double() * w for out, w in zip(outputs, weights)) for k in range(len(outputs[0]))]


def _agree(got: list | None, want: list) -> bool:
    """The same outputs, shape for shape, to SEPARABLE_TOLERANCE (compared block by block in float64)."""
    return got is not None and len(got) == len(want) and all(
        g.shape == w.shape and all(torch.allclose(x, y, rtol=SEPARABLE_TOLERANCE, atol=SEPARABLE_TOLERANCE,
                                                  equal_nan=True) for _, (x, y) in float64_blocks(g, w))
        for g, w in zip(got, want))


def _chunks_agree(native: Callable[[list], Any], inputs: list, expected, cuts: Cuts) -> bool:
    """Whether the native reference run chunk by chunk, over the very chunks the float64 run will take, gives its
    full output (to SEPARABLE_TOLERANCE): the secret sample misses a model whose positions depend on one other
    position (x / x.abs().max(), an anchor column) whenever the sample holds it, as likely as a chunk is long
    over the dimension's length (half the draws of such a model cut in two passed, their truth wrong)."""
    scalars = cuts[0][0].reduce is not None
    try:
        assembled = _outputs(_chunked(native, inputs, expected, cuts, upcast=False), scalars=scalars)
    except Exception:  # noqa: BLE001 - the chunks alone do not make valid calls
        return False
    return _agree(assembled, _outputs(expected, scalars=scalars))


def _chunked(run64: Callable[[list], Any], inputs: list, expected, cuts: Cuts, *, upcast: bool = True):
    """The float64 reference chunk by chunk along the cuts (every chunk of one crossed with every chunk of the
    other, for two; `upcast` False: the given run on copies of the chunks as they are), written into tensors shaped
    like the native outputs, in float32 (float64 where the native output is float64); scalar outputs reduced from
    the chunks' (`_reduced`)."""
    def call(chunk: list):
        return run64(_upcast_copy(chunk) if upcast else clone_args(chunk))

    spans = [[(begin, min(step, split.size - begin)) for begin in range(0, split.size, step)]
             for split, count in cuts for step in [math.ceil(split.size / count)]]

    def chunks():  # (the inputs' chunk, as views: upcast from them, no float32 copy first; its (begin, count) per cut)
        for parts in itertools.product(*spans):
            chunk = list(inputs)
            for (split, _), (begin, count) in zip(cuts, parts):
                chunk = [a.narrow(d, begin, count) if d is not None else a for a, d in zip(chunk, split.dims)]
            yield chunk, parts

    first = cuts[0][0]
    if first.reduce is not None:  # (a reduction is never crossed: one cut)
        reduced = _reduced(first, [(parts[0][1], call(chunk)) for chunk, parts in chunks()])
        if reduced is None or not _near(reduced, _outputs(expected, scalars=True)):
            raise ValueError("the chunks' reduced outputs are not the full run's")  # (this draw's: see `_near`)
        return _kept(reduced[0] if isinstance(expected, torch.Tensor) else tuple(reduced), expected)
    truth = [torch.empty(t.shape, dtype=torch.float64 if t.dtype == torch.float64 else torch.float32,
                         device=t.device) for t in _outputs(expected)]
    for chunk, parts in chunks():
        _place(truth, call(chunk), [(split.out_dim, begin, count) for (split, _), (begin, count) in zip(cuts, parts)])
    return truth[0] if isinstance(expected, torch.Tensor) else tuple(truth)


def _near(reduced: list[torch.Tensor], natives: list | None) -> bool:
    """Whether a reduced truth is within REDUCED_NEAR (relative; SEPARABLE_TOLERANCE absolute) of the native outputs
    of the same draw: the reduction was chosen on the first draw, and a model that is the mean of its chunks there
    need not be on every draw (a range probe's move)."""
    return natives is not None and len(natives) == len(reduced) and all(
        abs(float(r) - float(n)) <= REDUCED_NEAR * abs(float(n)) + SEPARABLE_TOLERANCE
        for r, n in zip(reduced, natives))


def _place(truth: list[torch.Tensor], out, regions: list[tuple[int, int, int]]) -> None:
    """One chunk's outputs written into their region of the truth (dimension, begin, count per cut); they go when
    this returns, before the next chunk runs (a loop variable left bound to the last of them kept a chunk's
    float64 output alive beside the next one's)."""
    for whole, part in zip(truth, _outputs(out)):
        for dim, begin, count in regions:
            whole = whole.narrow(dim, begin, count)
        whole.copy_(part)
