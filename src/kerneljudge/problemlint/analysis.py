"""The problem lint's measurements, run in the referee (torch and the problem, never a candidate).

At the chosen sizes the reference runs on inputs from two seeds, twice on the first, once per changed
input and once per changed parameter; each outcome is judged with the tolerance the judge would apply
(DEFAULT_TOLERANCE for the output's dtype, and 1e-2 for fp16/bf16 runs):
- trivial outputs: zeros, the best single constant (the output's midrange), each sample's mean (where
  a sample has several elements), a uniform random tensor, and every input of the output's shape passed
  through;
- sensitivity: the first seed's output compared with the output after one change (all inputs from the
  second seed; one input from it; one parameter scaled by 0.5..1.5 and shifted, as the probes do): an
  output that still passes as the first one does not depend on what changed;
- magnitude below atol, saturation (almost every element at the minimum or the maximum), NaN/Inf, and
  two calls on the same inputs that disagree;
- the traced graph (graph.py) and the footprint and time (sizes.py).
Findings come back as data ({code, message, details}); the judge gives them severity and fix.
"""

from __future__ import annotations

import copy
import gc
import time

import torch

from kerneljudge.options import DEFAULT_TOLERANCE
from kerneljudge.problemlint import graph, sizes
from kerneljudge.proc.inputs import clone_args, make_inputs, seed_generators, synchronize
from kerneljudge.proc.perturb import entries, perturb
from kerneljudge.proc.tensorwire import tensors_of
from kerneljudge.worker.build import import_problem

SEEDS = (1, 2)
LOW_PRECISION = ("fp16/bf16", DEFAULT_TOLERANCE["bfloat16"])
MAX_PARAMETERS = 12  # perturbed one by one (the first ones); the facts say how many of how many
SATURATED_SHARE = 0.95
LAUNCH_BOUND_MS = 0.020
TIMED_CALLS = 20


def lint(problem: dict, device: torch.device, *, shrink: bool, timed: bool, bounded: bool = False) -> dict:
    """The problem's findings at its given sizes, or at smaller ones (`shrink`: see sizes.py), with the
    facts behind them. `timed`: also time the reference (launch-bound; only at the given sizes). `bounded`
    (an evaluation's notice): nothing is run where the sizes exceed sizes.EVALUATION_SCALE times the budget's
    bytes or their size is not known; the reply says why under "skipped"."""
    constants, shrunk = sizes.shrink(problem, problem["constants"]) if shrink else (problem["constants"], {})
    facts: dict = {"constants": constants, "shrunk": shrunk, "device": str(device)}
    if bounded:
        over = _over_evaluation_scale(problem, constants)
        if over:
            return {"findings": [], "facts": facts, "skipped": over}
    found: list[dict] = []
    found.extend(_footprint(problem, device, facts))
    module = import_problem(problem["path"], problem["source"], constants)
    seed_generators(0, device)
    init_inputs = list(module.get_init_inputs())
    with torch.device(device):
        model = module.Model(*copy.deepcopy(init_inputs))
    model = model.to(device).eval()
    first, second = (make_inputs(module, seed, device) for seed in SEEDS)
    expected = _run(model, first, device)
    outs = tensors_of(expected)
    if not outs or not all(t.is_floating_point() for t in outs):
        facts["output"] = "not floating-point tensors: numeric checks skipped"
    else:
        atol, rtol = _tolerance(outs)
        facts.update(output_shapes=[list(t.shape) for t in outs], output_dtype=str(outs[0].dtype),
                     max_abs_output=max(float(t.abs().max()) for t in outs), tolerance=[atol, rtol])
        found.extend(_numeric(model, module, first, second, expected, device, (atol, rtol), facts))
    graph_found, facts["graph"] = graph.redundancies(model, clone_args(first))
    for f in graph_found if shrunk else []:  # a 1x1 feature map of a lowered ResNet is not the file's
        f["message"] += " (at the lowered sizes)"
        f["details"]["lowered"] = True
    found.extend(graph_found)
    if timed and not shrunk:
        facts["reference_ms"] = _time_ms(model, first, device)
        if facts["reference_ms"] < LAUNCH_BOUND_MS:
            found.append(_f("problem-launch-bound", f"the reference takes {facts['reference_ms'] * 1e3:.1f} µs per "
                            f"call on {device} (median of {TIMED_CALLS}): under {LAUNCH_BOUND_MS * 1e3:.0f} µs, launch "
                            "overhead decides the time", reference_ms=facts["reference_ms"]))
    del model, first, second, expected, outs
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {"findings": found, "facts": facts}


def _over_evaluation_scale(problem: dict, constants: dict) -> str:
    """Why an evaluation's lint of the problem at `constants` would not be bounded, or "" where it would: its bytes
    (inputs and outputs, and what its operations write) beyond sizes.EVALUATION_SCALE times the budget's, or a size
    not known (the problem or its forward does not run on the meta device). FLOPs cost time, not memory: not here."""
    try:
        cost = sizes.cost(problem, constants)
    except Exception as exc:  # noqa: BLE001 - not runnable on meta: its size is unknown, so not bounded
        said = (str(exc).splitlines() or [""])[0][:120]
        return f"its size could not be measured on the meta device ({type(exc).__name__}: {said})"
    if cost.flops is None:
        return "its forward does not run on the meta device, so what it writes is not known"
    if cost.memory_within(sizes.EVALUATION_SCALE):
        return ""
    return (f"its sizes could not be lowered within {sizes.EVALUATION_SCALE} times the lint's budget (one forward: "
            f"{(cost.bytes - cost.parameter_bytes) / 2**20:.0f} MiB of inputs and outputs, {cost.traffic / 2**20:.0f} "
            f"MiB written)")


def _f(code: str, message: str, **details) -> dict:
    return {"code": code, "message": message, "details": details}


def _run(model, args: list, device: torch.device):
    with torch.inference_mode():
        out = model(*clone_args(args))
    synchronize(device)
    return out


def _tolerance(outs: list) -> tuple[float, float]:
    default = DEFAULT_TOLERANCE.get(str(outs[0].dtype).removeprefix("torch."), DEFAULT_TOLERANCE["float32"])
    return default, default


def _excess(candidate: list, reference: list, atol: float, rtol: float) -> float:
    """The largest |candidate - reference| / (atol + rtol |reference|): at most 1 passes (NaN never)."""
    worst = 0.0
    for c, r in zip(candidate, reference):
        if c.shape != r.shape:
            return float("inf")
        ratio = ((c.double() - r.double()).abs() / (atol + rtol * r.double().abs())).max()
        worst = max(worst, float(ratio) if ratio == ratio else float("inf"))
    return worst


def _passes(candidate: list, reference: list, tolerance: tuple[float, float]) -> dict | None:
    """The strictest precision at which `candidate` passes as `reference` (None: at none)."""
    for label, (atol, rtol) in ((f"{reference[0].dtype}".removeprefix("torch."), tolerance),
                                (LOW_PRECISION[0], (LOW_PRECISION[1], LOW_PRECISION[1]))):
        excess = _excess(candidate, reference, atol, rtol)
        if excess <= 1:
            return {"precision": label, "atol": atol, "rtol": rtol, "excess": round(excess, 4)}
    return None


def _numeric(model, module, first, second, expected, device, tolerance, facts) -> list[dict]:
    outs = tensors_of(expected)
    found = []
    nonfinite = sum(int((~torch.isfinite(t)).sum()) for t in outs)
    if nonfinite:
        total = sum(t.numel() for t in outs)
        return [_f("problem-nonfinite", f"{nonfinite} of {total} output elements are NaN or Inf",
                   nonfinite=nonfinite, elements=total)]
    again = tensors_of(_run(model, first, device))
    if _excess(again, outs, *tolerance) > 1:
        found.append(_f("problem-nondeterministic", "a second call on the same inputs differs beyond the tolerance "
                        f"(excess {_excess(again, outs, *tolerance):.3g}x)"))
    largest = facts["max_abs_output"]
    for label, atol in ((f"{outs[0].dtype}".removeprefix("torch."), tolerance[0]), LOW_PRECISION):
        if largest <= atol:
            found.append(_f("problem-tiny-output", f"max |output| is {largest:.3g}, not above atol {atol:g} ({label}): "
                            "zeros pass", max_abs_output=largest, atol=atol, precision=label))
            break
    for kind, candidate in _trivial(outs, first):
        passed = _passes(candidate, outs, tolerance)
        if passed:
            found.append(_f("problem-trivial-output", f"{kind} passes as the output at the {passed['precision']} "
                            f"tolerance (atol={passed['atol']:g}, rtol={passed['rtol']:g}; worst element at "
                            f"{passed['excess']:.3g} of the bound)", trivial=kind, **passed))
    found.extend(_saturated(outs, tolerance))
    found.extend(_sensitivity(model, module, first, second, outs, device, tolerance, facts))
    return found


def _trivial(outs: list, inputs: list):
    """(what, candidate output) for each trivial output."""
    yield "zeros", [torch.zeros_like(t) for t in outs]
    if all(t.numel() > 1 for t in outs):  # one element is its own midrange: the seed check covers it
        yield "a constant (the output's midrange)", [torch.full_like(t, float((t.max() + t.min()) / 2))
                                                     for t in outs]
    if all(t.dim() > 1 and t[0].numel() > 1 for t in outs):
        yield "each sample's mean", [t.mean(dim=tuple(range(1, t.dim())), keepdim=True).expand_as(t) for t in outs]
    generator = torch.Generator(outs[0].device).manual_seed(0)
    yield "a uniform random tensor", [torch.rand(t.shape, generator=generator, device=t.device, dtype=t.dtype)
                                      for t in outs]
    if len(outs) == 1:
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor) and x.shape == outs[0].shape and x.is_floating_point():
                yield f"input {i} passed through", [x.to(outs[0].dtype)]


def _saturated(outs: list, tolerance) -> list[dict]:
    found = []
    for i, t in enumerate(outs):
        low, high = t.min(), t.max()
        if t.numel() < 16 or high - low <= 2 * (tolerance[0] + tolerance[1] * max(low.abs(), high.abs())):
            continue  # a range within the tolerance is a constant output, said as a trivial output
        near = ((t - low).abs() <= tolerance[0] + tolerance[1] * low.abs()) | \
               ((t - high).abs() <= tolerance[0] + tolerance[1] * high.abs())
        share = float(near.double().mean())
        if share >= SATURATED_SHARE:
            found.append(_f("problem-saturated", f"{share:.1%} of output {i}'s elements sit at its minimum "
                            f"({float(low):.4g}) or maximum ({float(high):.4g})", share=share,
                            minimum=float(low), maximum=float(high), output=i))
    return found


def _sensitivity(model, module, first, second, outs, device, tolerance, facts) -> list[dict]:
    """Change one thing, run again: an output that still passes as before does not depend on it."""
    found = []
    unchanged = _passes(tensors_of(_run(model, second, device)), outs, tolerance)
    if unchanged:
        found.append(_f("problem-insensitive-seed", "the output for inputs drawn from another seed passes as this "
                        f"one's at the {unchanged['precision']} tolerance: a hard-coded output would pass",
                        **unchanged))
    tensors = [i for i, x in enumerate(first) if isinstance(x, torch.Tensor)]
    for i in tensors if len(tensors) > 1 else []:
        if torch.equal(first[i], second[i]):
            continue
        mixed = list(first)
        mixed[i] = second[i]
        same = _passes(tensors_of(_run(model, mixed, device)), outs, tolerance)
        if same:
            found.append(_f("problem-insensitive-input", f"input {i} (shape {list(first[i].shape)}) drawn from "
                            f"another seed leaves the output passing at the {same['precision']} tolerance",
                            input=i, **same))
    parameters = [n for n, p in model.named_parameters() if p.is_floating_point()]
    facts["parameters_checked"] = [min(len(parameters), MAX_PARAMETERS), len(parameters)]
    state, ignored = model.state_dict(), []
    for index, name in enumerate(parameters[:MAX_PARAMETERS]):
        kept = state[name].clone()
        perturb(*entries(model), 1000 + index, [name], replace=False, device=device)
        same = _passes(tensors_of(_run(model, first, device)), outs, tolerance)
        with torch.no_grad():
            state[name].copy_(kept)
        if same:
            ignored.append((name, same))
    if ignored:
        names = ", ".join(name for name, _ in ignored[:6]) + (f" and {len(ignored) - 6} more" if len(ignored) > 6 else "")
        loosest = max((same for _, same in ignored), key=lambda same: same["atol"])
        found.append(_f("problem-insensitive-parameter", f"{len(ignored)} of {facts['parameters_checked'][0]} "
                        f"parameters checked ({names}), each scaled by 0.5..1.5 and shifted, leave the output "
                        f"passing (at the {loosest['precision']} tolerance or stricter)",
                        parameters=[name for name, _ in ignored], **loosest))
    return found


def _footprint(problem: dict, device: torch.device, facts: dict) -> list[dict]:
    """Inputs, parameters and outputs at the problem's given sizes (meta device) against the device's memory."""
    try:
        cost = sizes.cost(problem, problem["constants"])
    except Exception as exc:  # noqa: BLE001 - get_inputs or the constructor does not run on meta
        facts["footprint"] = f"not measured ({type(exc).__name__})"
        return []
    memory = sizes.device_memory_bytes(device)
    facts.update(footprint_bytes=cost.bytes, flops=cost.flops, device_memory_bytes=memory)
    if cost.bytes > memory:
        return [_f("problem-oversized", f"inputs, parameters and outputs take {cost.bytes / 2**30:.1f} GiB at the "
                   f"problem's sizes; {device} has {memory / 2**30:.1f} GiB", footprint_bytes=cost.bytes,
                   device_memory_bytes=memory)]
    return []


def _time_ms(model, args: list, device: torch.device) -> float:
    inputs = clone_args(args)
    with torch.inference_mode():
        for _ in range(3):
            model(*inputs)
        samples = []
        for _ in range(TIMED_CALLS):
            synchronize(device)
            start = time.perf_counter()
            model(*inputs)
            synchronize(device)
            samples.append((time.perf_counter() - start) * 1e3)
    return sorted(samples)[len(samples) // 2]
