"""Stage 1, load the problem: find the file, read it as text, apply the size preset and `--set` overrides.

Nothing here imports the problem: its names are read from the syntax tree, so a malformed problem is
reported before any worker starts, and the judge process runs no user code.

Constant values (`--set NAME=VALUE` and presets) keep the kind of the file's value:
- an int is a size, a whole number >= 1; except a padding or a constant the file sets to 0 (>= 0), and
  one that is evidently not a size: negative in the file, or an axis (`dim`/`..._dim` set to -5..4);
- a float is any finite number; a boolean is true or false;
- a tuple is the same number of elements (`--set kernel_size=3,5`, or `(3, 5)`), a list one or more
  (`--set layer_sizes=8,8` or `[8, 8]`); each element follows the rule of the file's elements.
Constants derived from a changed one (`groups = in_channels`) follow it.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

from kerneljudge import sourcefile, suite
from kerneljudge.errors import ProblemError, UsageError
from kerneljudge.records import Problem

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


def load_problem(ref: str | Path, *, preset: str | None = None, overrides: tuple[tuple[str, str], ...] = (),
                 small_if_builtin: bool = False, problems_root: Path | None = None) -> Problem:
    """Resolve `ref` (a path, or a name such as `level2/51` or `l2/51`: inside `problems_root` when
    given, else in the built-in suite) to a Problem.

    `small_if_builtin`: with no preset chosen, a built-in problem runs its `small` preset (CPU runs).
    """
    path, name, builtin = _resolve(ref, problems_root)
    try:
        source = sourcefile.read(path)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise ProblemError(f"cannot read problem file {path}: {exc}") from exc
    try:
        tree = sourcefile.parse(source, str(path))
    except SyntaxError as exc:
        raise ProblemError(f"problem file {path} is not valid Python: line {exc.lineno}: {exc.msg}") from exc
    missing = [n for n in REQUIRED_NAMES if n not in sourcefile.top_level_names(tree)]
    if missing:
        raise ProblemError(f"problem file {path} does not define {', '.join(missing)}: a KernelBench problem "
                           "defines class Model, get_inputs() and get_init_inputs()")

    file_constants = sourcefile.constants(tree)
    presets = sourcefile.presets(tree)
    if preset is None and small_if_builtin and builtin and "small" in presets:
        preset = "small"
    chosen: dict[str, sourcefile.Value] = {}
    if preset is not None:
        if preset not in presets:
            offered = ", ".join(sorted(presets)) or "none"
            raise UsageError(f"problem {name} has no preset {preset!r} (presets: {offered})")
        chosen.update(_checked(presets[preset], file_constants, f"preset {preset!r} of {name}"))
    chosen.update(_checked(_parsed(overrides), file_constants, "--set"))
    values = sourcefile.constants(sourcefile.parse(sourcefile.with_constants(source, chosen, str(path)), str(path)))
    return Problem(
        name=name, path=path, source=source, sha256=hashlib.sha256(source.encode()).hexdigest(),
        constants=values, overrides={k: v for k, v in values.items() if file_constants.get(k) != v},
        preset=preset, presets=tuple(sorted(presets)), builtin=builtin,
    )


def _resolve(ref: str | Path, problems_root: Path | None) -> tuple[Path, str, bool]:
    path = Path(ref).expanduser()
    if path.is_file():
        name = suite.builtin_name(path)
        return path.resolve(), name or path.stem, name is not None
    if problems_root is not None and suite.is_short_name(str(ref)):
        root = suite.layout_root(Path(problems_root).expanduser())
        entry = suite.find_builtin(str(ref), root)
        if entry is None:
            raise ProblemError(f"no problem {ref!r} in the problems root {root} (--problems-root or "
                               "$KERNELJUDGE_PROBLEMS_ROOT): it holds KernelBench's layout, level1/19_ReLU.py, "
                               "directly or in a KernelBench/ subfolder")
        return entry.path.resolve(), entry.name, False
    entry = suite.find_builtin(str(ref))
    if entry is not None:
        return entry.path, entry.name, True
    known = ", ".join(e.name.split("_")[0] for e in suite.list_problems())
    raise ProblemError(f"no problem file {ref!r}: give a path to a .py file, a built-in name ({known}), or a "
                       "KernelBench checkout as the problems root (problems root option, or "
                       "$KERNELJUDGE_PROBLEMS_ROOT) for its levelN/ID names")


def _parsed(overrides: tuple[tuple[str, str], ...]) -> dict[str, sourcefile.Value]:
    parsed = {}
    for name, text in overrides:
        try:
            parsed[name] = sourcefile.parse_value(text)
        except ValueError as exc:
            raise UsageError(f"--set {name}={text}: {exc}") from exc
    return parsed


def _checked(values: dict, known: dict, origin: str) -> dict:
    unknown = [k for k in values if k not in known]
    if unknown:
        raise UsageError(f"{origin}: unknown constant {', '.join(unknown)}; the problem's constants are: "
                         f"{', '.join(known) or 'none'}")
    return {name: _coerced(name, value, known[name], origin) for name, value in values.items()}


def _coerced(name: str, value, current, origin: str):
    """`value` as a value of the file's constant `current`, or a UsageError naming its legal form."""
    if isinstance(current, (tuple, list)):
        items = list(value) if isinstance(value, (tuple, list)) else [value]
        if (isinstance(current, tuple) and len(items) != len(current)) or not items:
            raise _illegal(name, value, current, origin)
        element = _element_kind(name, current)
        return type(current)(_scalar(name, v, element, origin, (value, current)) for v in items)
    return _scalar(name, value, current, origin, (value, current))


def _scalar(name: str, value, current, origin: str, shown: tuple):
    if isinstance(current, bool):
        ok = isinstance(value, bool)
    elif isinstance(current, int):
        floor = _int_floor(name, current)
        ok = isinstance(value, int) and not isinstance(value, bool) and (floor is None or value >= floor)
    else:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        value = float(value) if ok else value
    if not ok:
        raise _illegal(name, *shown, origin)
    return value


def _element_kind(name: str, current: tuple | list):
    """A representative element of a sequence constant: its elements' kind and smallest value."""
    if any(isinstance(v, float) for v in current):
        return 0.0
    return min(current, default=1)


def _int_floor(name: str, current: int) -> int | None:
    """The smallest legal value of an int constant (None: any int); see the module docstring."""
    if current < 0 or ((name == "dim" or name.endswith("_dim")) and -5 <= current <= 4):
        return None
    return 0 if current == 0 or "padding" in name else 1


def _illegal(name: str, value, current, origin: str) -> UsageError:
    where = origin if origin == "--set" else f"{origin} sets"
    return UsageError(f"{where} {name}={_shown(value)}: {name} is {_form(name, current)}; the file has "
                      f"{name} = {current!r}")


def _form(name: str, current) -> str:
    """The legal form of a constant's values, in words (error messages)."""
    if isinstance(current, (tuple, list)):
        count = f"{len(current)} values" if isinstance(current, tuple) else "one or more values"
        example = ",".join(str(v) for v in current[:3])
        return (f"a {type(current).__name__} of {count}, each {_form(name, _element_kind(name, current))}: "
                f"e.g. --set {name}={example}")
    if isinstance(current, bool):
        return "a boolean (true or false)"
    if isinstance(current, float):
        return "a finite number"
    floor = _int_floor(name, current)
    return {None: "an integer", 0: "a whole number >= 0"}.get(floor, "a size (a whole number >= 1)")


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (tuple, list)) else str(value)
