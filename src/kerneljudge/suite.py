"""The built-in problem suite shipped in the package, and its shipped solutions.

Problems live in `suite/level<N>/<num>_<Name>.py` (KernelBench's layout); solutions in
`suite/solutions/level<N>/<problem stem>/<variant>.py`. Short names: `level2/51`, `l2/51`, or the
full `level2/51_Gemm_...`. With a problems root (a KernelBench checkout, `--problems-root` or
$KERNELJUDGE_PROBLEMS_ROOT) the same names resolve inside it instead. Built-in problems whose sizes
differ from KernelBench's files (smaller, so the suite runs on a laptop) are listed in
KERNELBENCH_DIFFERENCES, and `kerneljudge problems` and the report say so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from kerneljudge import sourcefile

SUITE_ROOT = Path(__file__).resolve().parent / "suite"
SOLUTIONS_ROOT = SUITE_ROOT / "solutions"

#: Which shipped solution `eval PROBLEM` uses when none is given, by device type.
VARIANT_PREFERENCE = {"cuda": ("cuda", "triton", "pytorch", "cpp"), "cpu": ("pytorch", "cpp")}

#: Built-in problems that differ from KernelBench's file of the same name: KernelBench's values of the
#: constants that differ (tests/test_problems.py checks them against ../shared/kernelbench), and what
#: else differs, in words.
KERNELBENCH_DIFFERENCES: dict[str, tuple[dict[str, int], str]] = {
    "level1/19_ReLU": ({"dim": 393216}, "torch.rand inputs (here torch.randn)"),
    "level1/23_Softmax": ({"dim": 393216}, "torch.rand inputs (here torch.randn)"),
    "level1/47_Sum_reduction_over_a_dimension": ({"batch_size": 128, "dim1": 4096, "dim2": 4095},
                                                 "torch.rand inputs (here torch.randn)"),
    "level1/63_conv_standard_2D__square_input__square_kernel": (
        {"in_channels": 16, "out_channels": 128, "height": 1024, "width": 1024}, ""),
}

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


def is_short_name(ref: str) -> bool:
    """`level1/19`, `l1/19` or `level1/19_ReLU`: a name, not a path."""
    return _SHORT.match(ref.strip().removesuffix(".py")) is not None


def find_builtin(ref: str, root: Path = SUITE_ROOT) -> ProblemEntry | None:
    """The problem a short or full name refers to in a KernelBench-layout folder, or None."""
    match = _SHORT.match(ref.strip().removesuffix(".py"))
    if not match:
        return None
    level, number = int(match.group(1)), int(match.group(2))
    for entry in list_problems(root):
        if entry.level == level and entry.number == number:
            return entry
    return None


def layout_root(root: Path) -> Path:
    """The folder holding `level<N>/` in a problems root: the root itself, or its `KernelBench/`
    (a clone of the KernelBench repository) or `kernelbench/` subfolder."""
    if not any(root.glob("level*/")):
        for nested in (root / "KernelBench", root / "kernelbench"):
            if any(nested.glob("level*/")):
                return nested
    return root


def kernelbench_difference(name: str, path: Path) -> str | None:
    """How a built-in problem differs from KernelBench's file of the same name, in words, or None."""
    if name not in KERNELBENCH_DIFFERENCES:
        return None
    theirs, other = KERNELBENCH_DIFFERENCES[name]
    ours = sourcefile.constants(sourcefile.parse(sourcefile.read(path), str(path)))
    sizes = ", ".join(f"{k}={v} (here {ours.get(k)})" for k, v in theirs.items())
    return f"KernelBench's file has {sizes}" + (f"; {other}" if other else "")


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
