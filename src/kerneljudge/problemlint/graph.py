"""Redundant computation in the reference, read from its traced graph with the values of one call (referee side).

`torch.fx.symbolic_trace` gives the forward's operations; running the traced module once records every
node's value, so each rule sees shapes and numbers, not guesses:
- a reduction, softmax, logsumexp or normalisation over dimensions that all have size 1 (the identity,
  or a constant: softmax over one element is 1);
- an operation whose result equals its input on the drawn inputs (relu of a sigmoid, x * 1), or is one
  constant where its input is not;
- a result nothing uses (an input forward never reads, a value computed and dropped);
- algebraic collapse: a linear map (nn.Linear, matmul, a convolution) followed, through additions and
  scalings only, by a mean or sum over its output features: mean(x W^T + b) = x mean(W) + mean(b), so
  the matrix product is a matrix-vector product (KernelBench level2/51's 150x).
A model fx cannot trace (data-dependent control flow) gets no graph findings and says so.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from kerneljudge.proc.failures import exception_line

REDUCTIONS = frozenset("sum mean amax amin max min prod logsumexp softmax log_softmax softmin var std median "
                       "cumsum cumprod nansum nanmean argmax argmin all any".split())
CONSTANT_OVER_ONE = {"softmax": "1", "softmin": "1", "log_softmax": "0", "var": "0 (or NaN)", "std": "0 (or NaN)",
                     "argmax": "0", "argmin": "0"}
REDUCTION_MODULES = {"Softmax": "softmax", "LogSoftmax": "log_softmax", "Softmin": "softmin"}
NORM_MODULES = ("LayerNorm", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")
LINEAR_MODULES = {"Linear": -1, "Bilinear": -1, "Conv1d": 1, "Conv2d": 1, "Conv3d": 1}
LINEAR_FUNCTIONS = {"linear": -1, "matmul": -1, "mm": -1, "bmm": -1, "addmm": -1, "baddbmm": -1, "matmul_": -1,
                    "conv1d": 1, "conv2d": 1, "conv3d": 1}
AFFINE = {operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, torch.add, torch.sub,
          torch.mul, torch.div, torch.neg}
AFFINE_METHODS = frozenset("add sub mul div neg".split())
# Data movement and copies: "equal to its input" by design, not redundant.
MOVES = frozenset("view reshape flatten squeeze unsqueeze contiguous clone detach to type type_as float double "
                  "half bfloat16 permute transpose expand expand_as getitem getattr size dim t unflatten "
                  "Identity Flatten Unflatten Dropout".split())
# Constructors: a constant result by design.
CREATORS = frozenset("zeros_like ones_like full_like empty_like rand_like randn_like randint_like zeros ones full "
                     "empty new_zeros new_ones new_full new_empty arange tensor".split())


def _name(node: torch.fx.Node, gm: torch.fx.GraphModule) -> str:
    if node.op == "call_module":
        return type(gm.get_submodule(node.target)).__name__
    if node.op == "call_method":
        return str(node.target)
    return getattr(node.target, "__name__", str(node.target))


class _Recorder(torch.fx.Interpreter):
    def __init__(self, gm):
        super().__init__(gm)
        self.values: dict[torch.fx.Node, Any] = {}

    def run_node(self, n):
        value = super().run_node(n)
        self.values[n] = value
        return value


def trace(model: torch.nn.Module, inputs: list) -> tuple[torch.fx.GraphModule, dict]:
    gm = torch.fx.symbolic_trace(model)
    recorder = _Recorder(gm)
    with torch.inference_mode():
        recorder.run(*inputs)
    return gm, recorder.values


def redundancies(model: torch.nn.Module, inputs: list) -> tuple[list[dict], str]:
    """Findings as data {code, message, details}, and a word on the trace ("traced: N ops" or why not)."""
    try:
        gm, values = trace(model, inputs)
    except Exception as exc:  # noqa: BLE001 - fx cannot trace every forward
        return [], f"not traced ({exception_line(exc, 120)})"
    found: list[dict] = []
    for node in gm.graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module", "placeholder"):
            continue
        name = _name(node, gm)
        found.extend(_size_one(node, name, gm, values) or _numeric(node, name, gm, values))
        found.extend(_unused(node, name))
        found.extend(_collapse(node, name, gm, values))
    return _grouped(found), f"traced: {sum(n.op.startswith('call') for n in gm.graph.nodes)} operations"


def _grouped(found: list[dict]) -> list[dict]:
    """One finding per (code, op, kind): a ResNet's 17 identical ReLUs are one observation, counted."""
    groups: dict[tuple, list[dict]] = {}
    for f in found:
        groups.setdefault((f["code"], f["details"].get("op"), f["details"].get("kind")), []).append(f)
    merged = []
    for items in groups.values():
        first = dict(items[0])
        if len(items) > 1:
            first["message"] = f"{first['message']}; the same in {len(items) - 1} more place(s)"
            first["details"] = {**first["details"], "count": len(items),
                                "nodes": [f["details"]["node"] for f in items]}
        merged.append(first)
    return merged


def _first_tensor(node: torch.fx.Node, values: dict) -> torch.Tensor | None:
    for arg in node.args:
        if isinstance(arg, torch.fx.Node) and isinstance(values.get(arg), torch.Tensor):
            return values[arg]
    return None


def _reduced_dims(node: torch.fx.Node, name: str, gm) -> Any:
    if node.op == "call_module":
        return getattr(gm.get_submodule(node.target), "dim", None)
    dim = node.kwargs.get("dim")
    if dim is None and len(node.args) > 1 and name != "norm":
        dim = node.args[1]
    return dim


def _dims(dim, ndim: int) -> list[int] | None:
    items = dim if isinstance(dim, (tuple, list)) else [dim]
    if not items or not all(isinstance(d, int) and not isinstance(d, bool) for d in items):
        return None
    return [d % ndim for d in items] if ndim else None


def _finding(code: str, node, message: str, **details) -> dict:
    return {"code": code, "message": message, "details": {"node": node.name, **details}}


def _size_one(node, name: str, gm, values: dict) -> list[dict]:
    """A reduction or normalisation whose every reduced dimension has size 1."""
    x = _first_tensor(node, values)
    if x is None or x.dim() == 0:
        return []
    op = REDUCTION_MODULES.get(name, name)
    if op in REDUCTIONS:
        dims = _dims(_reduced_dims(node, name, gm), x.dim())
        if dims is None or any(x.shape[d] != 1 for d in dims):
            return []
        result = CONSTANT_OVER_ONE.get(op)
        what = f"is the constant {result}" if result else "is the identity"
        return [_finding("problem-redundant-op", node, f"{op} over dimension {dims} of size 1 (input shape "
                         f"{list(x.shape)}) {what}", op=op, dims=dims, shape=list(x.shape), kind="size-one")]
    if name in NORM_MODULES:
        module = gm.get_submodule(node.target)
        if name == "LayerNorm":
            count = 1
            for size in module.normalized_shape:
                count *= size
        elif name == "GroupNorm":
            count = (x.shape[1] // module.num_groups) * (x[0, 0].numel() if x.dim() > 2 else 1)
        else:
            count = x[0, 0].numel() if x.dim() > 2 else 1
        if count == 1:
            return [_finding("problem-redundant-op", node, f"{name} normalises groups of one element (input "
                             f"shape {list(x.shape)}): its output is its bias, whatever the input",
                             op=name, shape=list(x.shape), kind="size-one")]
    return []


def _numeric(node, name: str, gm, values: dict) -> list[dict]:
    """An operation whose result is its input on these inputs, or a constant where its input is not."""
    if node.op == "placeholder" or name in MOVES or name in CREATORS or name.endswith("_"):
        return []
    out, x = values.get(node), _first_tensor(node, values)
    if not isinstance(out, torch.Tensor) or x is None or out.numel() < 2 or not out.is_floating_point():
        return []
    if any(isinstance(a, torch.fx.Node) and a.op == "get_attr" for a in node.args) or node.op == "call_module" \
            and any(True for _ in gm.get_submodule(node.target).parameters()):
        return []  # parameters change: equal today is not redundant
    if out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
        return []  # in place (ReLU(inplace=True)): its input was overwritten, equal by construction
    if out.shape == x.shape and out.dtype == x.dtype and torch.equal(out, x):
        return [_finding("problem-redundant-op", node, f"{name} returns its input unchanged on the drawn inputs "
                         f"(shape {list(x.shape)})", op=name, shape=list(x.shape), kind="identity")]
    flat = out.reshape(-1)
    if bool((flat == flat[0]).all()) and not bool((x.reshape(-1) == x.reshape(-1)[0]).all()):
        return [_finding("problem-redundant-op", node, f"{name} returns one constant ({flat[0].item():.4g}) for "
                         f"every element (input shape {list(x.shape)})", op=name, kind="constant",
                         value=float(flat[0].item()))]
    return []


def _unused(node, name: str) -> list[dict]:
    if node.users or name.endswith("_") or name in ("setitem", "__setitem__"):
        return []
    if node.op == "placeholder":
        return [_finding("problem-redundant-op", node, f"forward never reads its input {node.name!r}",
                         op="input", kind="unused")]
    return [_finding("problem-redundant-op", node, f"the result of {name} ({node.name}) is never used",
                     op=name, kind="unused")]


def _collapse(node, name: str, gm, values: dict) -> list[dict]:
    """mean/sum over a linear map's output features, through additions and scalings only."""
    if name not in ("mean", "sum"):
        return []
    x = _first_tensor(node, values)
    dims = _dims(_reduced_dims(node, name, gm), x.dim()) if x is not None and x.dim() else None
    source = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    path = []
    while source is not None and dims:
        kind = _name(source, gm)
        feature = LINEAR_MODULES.get(kind) if source.op == "call_module" else (
            LINEAR_FUNCTIONS.get(kind) if source.op in ("call_function", "call_method") else None)
        if feature is not None:
            out = values.get(source)
            if not isinstance(out, torch.Tensor) or feature % out.dim() not in dims or out.shape[feature] < 2:
                return []
            label = source.target if source.op == "call_module" else kind
            chain = " -> ".join([str(label)] + path[::-1] + [name])
            return [_finding("problem-algebraic-collapse", node, f"{name} over the {out.shape[feature]} outputs of "
                             f"{label} ({chain}): the {name} of a linear map is a linear map to one output, so "
                             "the matrix product collapses to a matrix-vector product",
                             linear=str(label), features=int(out.shape[feature]), chain=chain)]
        if not _affine(source, kind):
            return []
        path.append(kind)
        source = next((a for a in source.args if isinstance(a, torch.fx.Node) and a.op != "get_attr"), None)
    return []


def _affine(node, kind: str) -> bool:
    """An addition, subtraction, negation, or a scaling by something that is not a traced value."""
    if node.op == "call_function" and node.target in AFFINE or node.op == "call_method" and kind in AFFINE_METHODS:
        if kind in ("mul", "truediv", "div"):
            traced = [a for a in node.args if isinstance(a, torch.fx.Node) and a.op != "get_attr"]
            return len(traced) == 1
        return True
    return False
