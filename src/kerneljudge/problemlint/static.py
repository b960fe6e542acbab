"""Sizes `--set` cannot reach, read from the problem's syntax tree (judge side: nothing runs).

`--set` and presets rewrite module-level constants (sourcefile.py). A size written as a literal inside
get_inputs() or get_init_inputs() (`torch.rand(16, 3, 224, 224)`), or a module-level name computed by
code (`vocab_size = config.vocab_size`), cannot be changed that way, so the problem cannot be shrunk
to run on a laptop nor grown to load a GPU.
"""

from __future__ import annotations

import ast

from kerneljudge import sourcefile

SIZED_FUNCTIONS = ("get_inputs", "get_init_inputs")
MIN_SIZE = 16  # smaller literals are shapes (3 colour channels), not scale
CREATORS = frozenset("rand randn randint zeros ones empty full randperm arange tensor".split())


def unreachable_sizes(source: str, filename: str) -> list[dict]:
    """Findings as data ({code, message, details}) for each size --set cannot change."""
    tree = sourcefile.parse(source, filename)
    constants = sourcefile.constants(tree)
    functions = [s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name in SIZED_FUNCTIONS]
    assigned = {n.id: s for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    found = []
    read = sorted({n.id for f in functions for n in ast.walk(f) if isinstance(n, ast.Name)
                   and isinstance(n.ctx, ast.Load) and n.id in assigned and n.id not in constants})
    for name in read:
        statement = assigned[name]
        if isinstance(statement.value, ast.Call) or (isinstance(statement.value, ast.Constant)
                                                     and isinstance(statement.value.value, str)):
            continue  # an object (a model's config) or a name, not a size
        found.append({"code": "problem-unreachable-size", "details": {"name": name, "line": statement.lineno},
                      "message": f"{name} (line {statement.lineno}) is computed by code "
                                 f"(`{ast.unparse(statement.value)[:60]}`), so --set cannot change it"})
    for function in functions:
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            literals = _literal_sizes(call)
            if literals:
                found.append({"code": "problem-unreachable-size",
                              "details": {"function": function.name, "line": call.lineno, "literals": literals},
                              "message": f"{function.name}() line {call.lineno} has literal sizes {literals} "
                                         f"(`{ast.unparse(call)[:60]}`), which --set cannot change"})
    return found


def _literal_sizes(call: ast.Call) -> list[int]:
    name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
    if name not in CREATORS or name == "tensor":
        return []
    args = call.args[2:] if name == "randint" and len(call.args) >= 3 else call.args
    sized = [kw.value for kw in call.keywords if kw.arg == "size"] + list(args)
    values = []
    for arg in sized:
        for node in (arg.elts if isinstance(arg, (ast.Tuple, ast.List)) else [arg]):
            if isinstance(node, ast.Constant) and type(node.value) is int and node.value >= MIN_SIZE:
                values.append(node.value)
    return values
