"""The built-in problem suite shipped in the package, and its shipped solutions.

Problems live in `suite/level<N>/<num>_<Name>.py` (KernelBench's layout); solutions in
`suite/solutions/level<N>/<problem stem>/<variant>.py`. Short names: `level2/51`, `l2/51`, or the
full `level2/51_Gemm_...`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SUITE_ROOT = Path(__file__).resolve().parent / "suite"
SOLUTIONS_ROOT = SUITE_ROOT / "solutions"

#: Which shipped solution `eval PROBLEM` uses when none is given, by device type.
VARIANT_PREFERENCE = {"cuda": ("cuda", "triton", "pytorch", "cpp"), "cpu": ("pytorch", "cpp")}

_SHORT = re.compile(r"^(?:level|l)(\d+)/(\d+)(?:_.*)?$", re.IGNORECASE)


@dataclass(frozen=True)
class ProblemEntry:
    """One problem file of a KernelBench-layout folder."""

    name: str  # "level2/51_Gemm_..."
    path: Path
    level: int
    number: int


def list_problems(root: Path = SUITE_ROOT) -> list[ProblemEntry]:
    """Every `level<N>/<num>_<name>.py` under root, ordered by level and number."""
    entries = []
    for level_dir in sorted(root.glob("level*")):
        match = re.fullmatch(r"level(\d+)", level_dir.name)
        if not match or not level_dir.is_dir():
            continue
        for path in level_dir.glob("*.py"):
            number = re.match(r"(\d+)_", path.name)
            if number:
                entries.append(ProblemEntry(f"{level_dir.name}/{path.stem}", path, int(match.group(1)),
                                            int(number.group(1))))
    return sorted(entries, key=lambda e: (e.level, e.number))


def find_builtin(ref: str) -> ProblemEntry | None:
    """The built-in problem a short or full name refers to, or None."""
    match = _SHORT.match(ref.strip().removesuffix(".py"))
    if not match:
        return None
    level, number = int(match.group(1)), int(match.group(2))
    for entry in list_problems():
        if entry.level == level and entry.number == number:
            return entry
    return None


def builtin_name(path: Path) -> str | None:
    """`level2/51_...` if path is a problem file of the shipped suite, else None."""
    path = path.resolve()
    if path.parent.parent == SUITE_ROOT and path.parent.name.startswith("level"):
        return f"{path.parent.name}/{path.stem}"
    return None


def shipped_solutions(problem_name: str) -> dict[str, Path]:
    """variant -> path of the solutions shipped for a built-in problem."""
    folder = SOLUTIONS_ROOT / problem_name
    return {p.stem: p for p in sorted(folder.glob("*.py"))} if folder.is_dir() else {}


def default_solution(problem_name: str, device_type: str) -> Path | None:
    """The shipped solution `eval` uses on this device type, by VARIANT_PREFERENCE."""
    solutions = shipped_solutions(problem_name)
    for variant in VARIANT_PREFERENCE.get(device_type, VARIANT_PREFERENCE["cpu"]):
        if variant in solutions:
            return solutions[variant]
    return None
