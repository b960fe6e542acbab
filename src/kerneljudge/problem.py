"""Stage 1, load the problem: find the file, read it as text, apply the size preset and `--set` overrides.

Nothing here imports the problem: its names are read from the syntax tree, so a malformed problem is
reported before any worker starts, and the judge process runs no user code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kerneljudge import sourcefile, suite
from kerneljudge.errors import ProblemError, UsageError
from kerneljudge.records import Problem

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


def load_problem(ref: str | Path, *, preset: str | None = None, overrides: tuple[tuple[str, str], ...] = (),
                 small_if_builtin: bool = False) -> Problem:
    """Resolve `ref` (a path, or a built-in name such as `level2/51` or `l2/51`) to a Problem.

    `small_if_builtin`: with no preset chosen, a built-in problem runs its `small` preset (CPU runs).
    """
    path, name, builtin = _resolve(ref)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
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
    values = dict(file_constants)
    if preset is not None:
        if preset not in presets:
            offered = ", ".join(sorted(presets)) or "none"
            raise UsageError(f"problem {name} has no preset {preset!r} (presets: {offered})")
        values.update(_checked(presets[preset], file_constants, f"preset {preset!r} of {name}"))
    values.update(_checked(_parsed(overrides), file_constants, "--set"))
    return Problem(
        name=name, path=path, source=source, sha256=hashlib.sha256(source.encode()).hexdigest(),
        constants=values, overrides={k: v for k, v in values.items() if file_constants.get(k) != v},
        preset=preset, presets=tuple(sorted(presets)), builtin=builtin,
    )


def _resolve(ref: str | Path) -> tuple[Path, str, bool]:
    path = Path(ref).expanduser()
    if path.is_file():
        name = suite.builtin_name(path)
        return path.resolve(), name or path.stem, name is not None
    entry = suite.find_builtin(str(ref))
    if entry is not None:
        return entry.path, entry.name, True
    known = ", ".join(e.name.split("_")[0] for e in suite.list_problems())
    raise ProblemError(f"no problem file {ref!r}: give a path to a .py file or a built-in name ({known})")


def _parsed(overrides: tuple[tuple[str, str], ...]) -> dict[str, sourcefile.Number]:
    parsed = {}
    for name, text in overrides:
        try:
            parsed[name] = sourcefile.parse_number(text)
        except ValueError as exc:
            raise UsageError(f"--set {name}={text}: the value must be a number") from exc
    return parsed


def _checked(values: dict, known: dict, origin: str) -> dict:
    unknown = [k for k in values if k not in known]
    if unknown:
        raise UsageError(f"{origin}: unknown constant {', '.join(unknown)}; the problem's constants are: "
                         f"{', '.join(known) or 'none'}")
    bad = [k for k, v in values.items() if not isinstance(v, (int, float)) or isinstance(v, bool)]
    if bad:
        raise UsageError(f"{origin}: {', '.join(bad)} must be numbers")
    return values
