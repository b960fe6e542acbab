"""Reading Python source as data: module-level size constants, presets, and rewriting constants.

Problem files are KernelBench's format, where sizes are module-level constants read by get_inputs()
and get_init_inputs() at call time. They are read from the syntax tree, never by running the file:
a small evaluator computes numbers, booleans and tuples/lists of numbers from literals, the operators
+ - * / // % ** and earlier constants (`N = 2048 * 2`, `groups = in_channels`,
`bias_shape = (out_channels, 1, 1)`, `[1024] * 16`), through plain, chained (`height = width = 128`)
and unpacking (`depth, height, width = 16, 32, 32`) assignments. Anything else (a call, an attribute,
a string) is not a constant. Rewriting replaces only the statements whose value changes, in place and
on the same lines (tracebacks and Triton's source lookup keep their line numbers), so constants
derived from a rewritten one (`out = size // 2`) follow it.
"""

from __future__ import annotations

import ast
import math
import operator
import tokenize
from pathlib import Path
from typing import Any, Callable

#: A constant's value: a number, a boolean, or a flat tuple/list of numbers.
Value = int | float | bool | tuple | list

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
MAX_MAGNITUDE = 2 ** 63  # a size beyond this is a typo, and bounds the work `**` can ask for
MAX_ELEMENTS = 4096  # the longest tuple/list (`[1024] * 16`) the evaluator builds


class NotConstant(Exception):
    """The expression is not one the evaluator computes: the name it assigns is not a constant."""


def read(path: str | Path) -> str:
    """A source file's text decoded as Python decodes it: a UTF-8 byte-order mark or a coding cookie honoured
    (an editor's BOM made an honest candidate "not valid Python" for the judge while Python imported it). Raises
    OSError, UnicodeDecodeError, or SyntaxError for an unknown coding cookie."""
    with tokenize.open(path) as f:
        return f.read()


def parse(source: str, filename: str) -> ast.Module:
    return ast.parse(source, filename=filename)


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def evaluate(node: ast.expr, env: dict[str, Value]) -> Value:
    """The value of a constant expression, with earlier constants in `env`; NotConstant otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):  # bool is an int
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise NotConstant(node.id)
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [evaluate(e, env) for e in node.elts]
        if any(isinstance(i, (tuple, list)) for i in items):
            raise NotConstant("nested sequence")
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = evaluate(node.operand, env)
        if not _is_number(operand):
            raise NotConstant("unary operator on a sequence")
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _binary(node.op, evaluate(node.left, env), evaluate(node.right, env))
    raise NotConstant(type(node).__name__)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _binary(op: ast.operator, left: Value, right: Value) -> Value:
    if isinstance(left, (tuple, list)) or isinstance(right, (tuple, list)):
        return _sequence_op(op, left, right)
    if not (_is_number(left) and _is_number(right)):
        raise NotConstant("arithmetic on a boolean")
    if isinstance(op, ast.Pow) and (abs(right) > 64 or (isinstance(right, int) and right < 0 and left == 0)):
        raise NotConstant("exponent out of range")
    try:
        result = _BINARY[type(op)](left, right)
    except (ZeroDivisionError, OverflowError, ValueError) as exc:
        raise NotConstant(str(exc)) from exc
    if not _is_number(result) or abs(result) > MAX_MAGNITUDE or not math.isfinite(result):
        raise NotConstant("value out of range")
    return result


def _sequence_op(op: ast.operator, left: Value, right: Value) -> Value:
    """`[1024] * 16`, `(1,) * 3` and concatenation of two sequences of the same kind."""
    if isinstance(op, ast.Add) and type(left) is type(right):
        result = left + right
    elif isinstance(op, ast.Mult) and isinstance(right, int) and not isinstance(right, bool) \
            and isinstance(left, (tuple, list)) and 0 <= right <= MAX_ELEMENTS:
        result = left * right
    elif isinstance(op, ast.Mult) and isinstance(left, int) and not isinstance(left, bool) \
            and isinstance(right, (tuple, list)) and 0 <= left <= MAX_ELEMENTS:
        result = right * left
    else:
        raise NotConstant("sequence arithmetic")
    if len(result) > MAX_ELEMENTS:
        raise NotConstant("sequence too long")
    return result


def _targets(statement: ast.stmt) -> list[tuple[str, ...] | str] | None:
    """What an assignment binds: a name, or a tuple of names it unpacks into, per target
    (`a = b = 1`: ["a", "b"]; `a, b = 1, 2`: [("a", "b")]); None for any other statement or target."""
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None and statement.simple:
        targets = [statement.target]
    else:
        return None
    found: list[tuple[str, ...] | str] = []
    for target in targets:
        if isinstance(target, ast.Name):
            found.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
            found.append(tuple(e.id for e in target.elts))
        else:
            return None
    return found


def _names(targets: list[tuple[str, ...] | str]) -> list[str]:
    return [name for target in targets for name in ((target,) if isinstance(target, str) else target)]


def _bindings(targets: list[tuple[str, ...] | str], value: Value) -> dict[str, Value]:
    """name -> value for each name the targets bind (NotConstant where the value does not unpack)."""
    bound: dict[str, Value] = {}
    for target in targets:
        if isinstance(target, str):
            bound[target] = value
        elif isinstance(value, (tuple, list)) and len(value) == len(target):
            bound.update(zip(target, value))
        else:
            raise NotConstant("cannot unpack")
    return bound


def _other_bindings(statement: ast.stmt) -> set[str]:
    """Module-level names a statement that is not a constant assignment binds (def, import, for, if...)."""
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {statement.name}
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in statement.names}
    names: set[str] = set()
    for child in ast.iter_child_nodes(statement):
        if isinstance(child, ast.stmt):
            names |= _other_bindings(child)
        elif not isinstance(child, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            names |= {n.id for n in ast.walk(child) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _walk(tree: ast.Module, rewrite: Callable[[ast.stmt, dict[str, Value]], dict[str, Value]] | None = None
          ) -> dict[str, Value]:
    """The module's constants after its top-level statements, in order. `rewrite(statement, bound)`
    may replace what an assignment binds (the values then bound are what it returns)."""
    env: dict[str, Value] = {}
    for statement in tree.body:
        targets = _targets(statement)
        if targets is not None:
            try:
                bound = _bindings(targets, evaluate(statement.value, env))
            except NotConstant:
                for name in _names(targets):
                    env.pop(name, None)
                continue
            env.update(rewrite(statement, bound) if rewrite else bound)
        else:
            for name in _other_bindings(statement):
                env.pop(name, None)
    return env


def constants(tree: ast.Module) -> dict[str, Value]:
    """Module-level constants (numbers, booleans, flat tuples/lists of numbers), in file order, with the
    values they have once the module's top level has run."""
    return _walk(tree)


def presets(tree: ast.Module) -> dict[str, dict[str, Value]]:
    """The optional module-level `PRESETS = {"small": {"batch_size": 64, ...}}` literal."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "PRESETS"):
            value = _literal(node.value)
            if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
                return {str(k): dict(v) for k, v in value.items()}
    return {}


def top_level_names(tree: ast.Module) -> set[str]:
    """Names a module defines at top level: classes, functions, assignments and imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            names.update(e.id for t in node.targets if isinstance(t, (ast.Tuple, ast.List))
                         for e in t.elts if isinstance(e, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def with_constants(source: str, values: dict[str, Value], filename: str = "<problem>") -> str:
    """The source with its constants set to `values`: every top-level assignment whose value would differ
    is replaced, on its own lines, by plain assignments of literals (`height = width = 128` with
    height=64 becomes `height = 64; width = 128`); the other lines are untouched."""
    if not values:
        return source
    lines = source.splitlines(keepends=True)
    edits: list[tuple[ast.stmt, str]] = []

    def rewrite(statement: ast.stmt, bound: dict[str, Value]) -> dict[str, Value]:
        wanted = {name: values.get(name, value) for name, value in bound.items()}
        if any(not _same(wanted[name], value) for name, value in bound.items()):
            edits.append((statement, "; ".join(f"{name} = {value!r}" for name, value in wanted.items())))
        return wanted

    _walk(parse(source, filename), rewrite)
    for statement, text in reversed(edits):  # bottom-up: earlier offsets stay valid
        first, last = statement.lineno - 1, statement.end_lineno - 1
        head = _prefix(lines[first], statement.col_offset)
        tail = _suffix(lines[last], statement.end_col_offset)
        lines[first:last + 1] = [head + text + "\n" * (last - first) + tail]
    return "".join(lines)


def _same(a: Value, b: Value) -> bool:
    return type(a) is type(b) and a == b


def _prefix(line: str, col: int) -> str:
    """The text before a column (ast columns count UTF-8 bytes)."""
    return line.encode()[:col].decode()


def _suffix(line: str, col: int) -> str:
    return line.encode()[col:].decode()


def parse_value(text: str) -> Value:
    """A `--set` value as written: a number (`64`, `1_024`, `2048 * 2`, `1e-5`, `-1`), a boolean
    (`true`, `False`), or a sequence (`8,8`, `[8, 8]`, `(3, 5)`); ValueError for anything else."""
    text = text.strip()
    text = {"true": "True", "false": "False"}.get(text.lower(), text)
    try:
        node = ast.parse(text, mode="eval").body
        return evaluate(node, {})
    except (SyntaxError, NotConstant) as exc:
        raise ValueError(f"{text!r} is not a number, a boolean or a list of numbers") from exc
