"""Stage 2 (judge side), load the candidate: read it as text and say what it builds on.

The judge never imports candidate code; the worker does (stage "build"). Here the file is read and
parsed, so a missing file or a syntax error is reported without starting a worker.
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

from kerneljudge import sourcefile
from kerneljudge.errors import CandidateError
from kerneljudge.records import Candidate


def missing_file(path: str | Path) -> str | None:
    """Why `path` is not a candidate file to read (it does not exist, or is a folder); None if it is one."""
    path = Path(path).expanduser()
    if path.is_dir():
        return f"{path} is a directory; give the candidate's .py file"
    if not path.exists():
        return f"no candidate file {path}"
    return None


def load_candidate(path: str | Path) -> Candidate:
    """Read a candidate file; raise CandidateError for a missing or unparsable one."""
    path = Path(path).expanduser()
    missing = missing_file(path)
    if missing:
        raise CandidateError(missing)
    try:
        source = sourcefile.read(path)
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise CandidateError(f"cannot read candidate file {path}: {exc}") from exc
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        line = (exc.text or "").rstrip()
        raise CandidateError(f"{path.name} is not valid Python: line {exc.lineno}: {exc.msg}"
                             + (f"\n    {line}" if line else "")) from exc
    return Candidate(path=path.resolve(), source=source, sha256=_digest(source), kinds=_kinds(tree))


def file_sha256(path: str | Path) -> str | None:
    """The sha256 a Candidate of this file has (of its source), also where it does not parse, or None where it
    cannot be read: a batch keys a broken file by its content, so once fixed it is judged again."""
    try:
        return _digest(sourcefile.read(Path(path).expanduser()))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None


def _digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _kinds(tree: ast.Module) -> tuple[str, ...]:
    """What the candidate compiles: "cpp"/"cuda" from load_inline/load calls (and "cpp" wherever it imports or
    names torch's cpp_extension: a renamed or positional `load` builds through the judge too), "triton" from
    imports."""
    kinds: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m == "triton" or m.startswith("triton.") for m in modules):
                kinds.add("triton")
            if any(m.endswith("cpp_extension") for m in modules) or \
                    any(a.name == "cpp_extension" for a in node.names):
                kinds.add("cpp")
        elif isinstance(node, ast.Attribute) and node.attr == "cpp_extension":
            kinds.add("cpp")
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            keywords = {k.arg for k in node.keywords}
            # torch.utils.cpp_extension.load_inline, or load(sources=...) (not torch.load)
            if name == "load_inline" or (name == "load" and "sources" in keywords):
                kinds.add("cuda" if "cuda_sources" in keywords or _has_cuda_file(node) else "cpp")
    if "cuda" in kinds:
        kinds.discard("cpp")
    return tuple(sorted(kinds))


def _has_cuda_file(call: ast.Call) -> bool:
    return any(isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.endswith(".cu")
               for c in ast.walk(call))
