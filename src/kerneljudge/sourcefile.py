"""Reading Python source as data: module-level size constants, presets, and rewriting constants.

Problem files are KernelBench's format, where sizes are module-level constants read by get_inputs()
and get_init_inputs() at call time. Rewriting the assignments in the source (not patching the module
after it ran) keeps constants derived from them (`out = size // 2`) consistent.
"""

from __future__ import annotations

import ast
from typing import Any

Number = int | float


def parse(source: str, filename: str) -> ast.Module:
    return ast.parse(source, filename=filename)


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def constants(tree: ast.Module) -> dict[str, Number]:
    """Module-level `name = <int or float literal>` assignments (booleans excluded), in file order."""
    found: dict[str, Number] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _literal(node.value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                found[node.targets[0].id] = value
    return found


def presets(tree: ast.Module) -> dict[str, dict[str, Number]]:
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
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def with_constants(source: str, values: dict[str, Number], filename: str = "<problem>") -> str:
    """The source with the module-level assignments of `values` replaced by those literals."""
    if not values:
        return source
    tree = parse(source, filename)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in values):
            node.value = ast.copy_location(ast.Constant(values[node.targets[0].id]), node.value)
    return ast.unparse(tree)


def parse_number(text: str) -> Number:
    """`--set` values: ints stay ints ("64", "1_024"), anything else with a dot or exponent is a float."""
    text = text.strip()
    try:
        return int(text.replace("_", ""), 0)
    except ValueError:
        return float(text)
