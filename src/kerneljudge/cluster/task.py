"""What travels to a judge actor: one candidate and its problem as text, with the options and the verb.

A Ray cluster shares no files: the driver reads the problem and the candidate once and ships their
text; the actor writes them to a private folder on its node and runs the ordinary pipeline on them.
Whatever the result says about those temporary paths is put back to the driver's paths on the way out
(`restore_paths`), so a record made from a Ray result reads the same as one made locally.
"""

from __future__ import annotations

import json
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kerneljudge.candidate import load_candidate
from kerneljudge.errors import KernelJudgeError
from kerneljudge.options import Options
from kerneljudge.problem import load_problem
from kerneljudge.suite import builtin_name


#: Held while the driver parses a problem or a candidate: lanes make tasks from several threads, and
#: CPython 3.11's ast.parse is not thread-safe ("AST constructor recursion depth mismatch", seen here).
_PARSING = threading.Lock()


@dataclass(frozen=True)
class JudgeTask:
    """One candidate to judge. `key` identifies it to the driver (the batch's resume key)."""

    key: str
    problem_ref: str  # as the driver was given it: a built-in name, a name in the problems root, or a path
    builtin: bool  # a built-in problem: the actor resolves it in its own package, without problems root
    problem_file: tuple[str, str, str] | None  # (path in the actor's folder, source, driver's path)
    ref_is_path: bool  # problem_ref is a path: the actor passes its copy's path, not a name
    solution_path: str  # the driver's path, put back into the result
    solution_source: str | None  # None: unreadable on the driver; the actor's pipeline reports it
    options: dict[str, Any]  # Options.to_json(keep_seed=True)
    verb: str = "evaluate"

    @classmethod
    def of(cls, key: str, problem_ref: str | Path, solution: str | Path, options: Options,
           verb: str = "evaluate") -> "JudgeTask":
        """Read the problem and the solution on the driver. One that cannot be read is shipped by name
        only: the actor's pipeline then reports it, as a local run would."""
        with _PARSING:
            try:
                solution_source = load_candidate(solution).source
            except KernelJudgeError:
                solution_source = None
            try:
                problem = load_problem(problem_ref, problems_root=options.problems_root)
            except KernelJudgeError:
                problem = None
        builtin = problem is not None and problem.builtin
        ref, problem_file, as_path = str(problem_ref), None, False
        if builtin:
            ref = builtin_name(problem.path)
        elif problem is not None:
            as_path = Path(problem_ref).is_file()
            relative = problem.path.name if as_path else problem.name + problem.path.suffix
            problem_file = (relative, problem.source, str(problem.path))
        return cls(key, ref, builtin, problem_file, as_path, str(solution), solution_source,
                   options.to_json(keep_seed=True), verb)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JudgeTask":
        problem_file = data["problem_file"]
        return cls(**{**data, "problem_file": tuple(problem_file) if problem_file else None})


def restore_paths(result_json: dict[str, Any], replacements: dict[str, str]) -> dict[str, Any]:
    """`result_json` with every occurrence of each temporary path replaced by the driver's path (the
    result's problem and candidate paths, the reproduce command, messages naming the file)."""
    text = json.dumps(result_json)
    for temporary, original in replacements.items():
        text = text.replace(json.dumps(temporary)[1:-1], json.dumps(original)[1:-1])
    return json.loads(text)
