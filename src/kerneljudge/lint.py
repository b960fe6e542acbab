"""Static lint of a candidate's source for behaviours that fool kernel judges.

The lint reads the candidate with :mod:`ast` (never regular expressions on the
Python code) and reports *warnings*: each hit names a behaviour that can make a
wrong or slow kernel look correct or fast, and says how an honest author avoids
it.  Run-time probes decide whether the behaviour actually happened.

Regular expressions are used only on string constants, because those hold the
C++/CUDA sources handed to ``load_inline`` and are not Python.

Names are resolved through the candidate's imports at any nesting level, so
``import torch as T; T.cuda.Stream()`` is seen as ``torch.cuda.Stream``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kerneljudge.records import Candidate, Finding


@dataclass(frozen=True)
class LintHit:
    code: str
    line: int
    message: str


FALLBACK = "lint-fallback"
REFERENCE = "lint-reference-use"
MONKEYPATCH = "lint-monkeypatch"
THREADING = "lint-threading"
STREAM = "lint-stream"
SEED_OR_ENV = "lint-seed-or-env"
TIMING = "lint-timing"

# How an honest author fixes each behaviour; ends every message.
_FIX = {
    FALLBACK: "let the exception propagate so a broken kernel fails instead of being replaced",
    REFERENCE: "write ModelNew on nn.Module with its code in this file, without reaching the reference",
    MONKEYPATCH: "leave modules shared with the judge untouched",
    THREADING: "do all the work synchronously inside forward()",
    STREAM: "launch on the current stream (at::cuda::getCurrentCUDAStream() or torch.cuda.current_stream())",
    SEED_OR_ENV: "compute the result from forward()'s inputs and the module's parameters only",
    TIMING: "remove the clock, since the judge does the timing",
}

# Why merely using a name from _NAME_RULES is suspicious, per code.
_USE_WHY = {
    REFERENCE: "reaches the reference or runs code built at run time",
    MONKEYPATCH: "imports the judge itself",
    THREADING: "can run work off the timed thread or in another process",
    STREAM: "can put work on a stream the judge does not time",
    SEED_OR_ENV: "reads seeds, the environment or the judge's state",
}

# Fully qualified names (matched as dotted prefixes, longest first) whose use is
# flagged wherever they appear: in imports, attribute chains or bare names.
_NAME_RULES = {
    # Dynamic code hides what runs and can fetch the reference Model at run time.
    "builtins.exec": REFERENCE,
    "builtins.eval": REFERENCE,
    "builtins.compile": REFERENCE,
    "builtins.__import__": REFERENCE,
    "importlib": REFERENCE,
    "runpy": REFERENCE,
    "sys.modules": REFERENCE,
    "__main__": REFERENCE,
    # The judge's own package is where its checks live.
    "kerneljudge": MONKEYPATCH,
    # Work on another thread or process escapes the timed region and the checks.
    "threading": THREADING,
    "_thread": THREADING,
    "multiprocessing": THREADING,
    "torch.multiprocessing": THREADING,
    "concurrent.futures": THREADING,
    "subprocess": THREADING,
    "asyncio": THREADING,
    "signal": THREADING,
    "os.fork": THREADING,
    "os.forkpty": THREADING,
    "os.system": THREADING,
    "os.popen": THREADING,
    "os.posix_spawn": THREADING,
    "os.posix_spawnp": THREADING,
    # Work on a side stream is not covered by timing on the current stream.
    "torch.cuda.Stream": STREAM,
    "torch.cuda.stream": STREAM,
    "torch.cuda.StreamContext": STREAM,
    "torch.cuda.set_stream": STREAM,
    "torch.cuda.ExternalStream": STREAM,
    "torch.cuda.streams": STREAM,
    "torch.Stream": STREAM,
    # Seeds, RNG state, environment and interpreter state let a candidate
    # predict the inputs or find the expected output instead of computing it.
    "torch.initial_seed": SEED_OR_ENV,
    "torch.seed": SEED_OR_ENV,
    "torch.get_rng_state": SEED_OR_ENV,
    "torch.set_rng_state": SEED_OR_ENV,
    "torch.cuda.initial_seed": SEED_OR_ENV,
    "torch.cuda.get_rng_state": SEED_OR_ENV,
    "torch.cuda.get_rng_state_all": SEED_OR_ENV,
    "torch.cuda.set_rng_state": SEED_OR_ENV,
    "torch.random.initial_seed": SEED_OR_ENV,
    "torch.random.seed": SEED_OR_ENV,
    "torch.random.get_rng_state": SEED_OR_ENV,
    "torch.random.set_rng_state": SEED_OR_ENV,
    "random.getstate": SEED_OR_ENV,
    "numpy.random.get_state": SEED_OR_ENV,
    "os.environ": SEED_OR_ENV,
    "os.environb": SEED_OR_ENV,
    "os.getenv": SEED_OR_ENV,
    "os.getenvb": SEED_OR_ENV,
    "sys.argv": SEED_OR_ENV,
    "sys.orig_argv": SEED_OR_ENV,
    "sys._getframe": SEED_OR_ENV,
    "inspect": SEED_OR_ENV,
    "gc.get_objects": SEED_OR_ENV,
    "gc.get_referrers": SEED_OR_ENV,
    "gc.get_referents": SEED_OR_ENV,
}

# Assigning to attributes below these roots patches objects the judge uses
# (comparison, clocks, synchronisation) in the same process.
_PATCH_ROOTS = frozenset(
    {"torch", "time", "triton", "kerneljudge", "builtins", "sys", "os", "gc", "numpy"}
)

# Calls that read a clock: an honest kernel has no need to measure time, while a
# cheating one can use it to tell timed runs from checked runs.
_CLOCKS = frozenset(
    f"time.{name}{suffix}"
    for name in ("perf_counter", "time", "monotonic", "process_time", "thread_time", "clock_gettime")
    for suffix in ("", "_ns")
) | {"timeit.default_timer"}
# torch.cuda.Event takes enable_timing first; torch.Event takes the device first.
_EVENTS = {"torch.cuda.Event": 1, "torch.Event": 0}

# Builtins resolved as ``builtins.<name>`` when the candidate does not import
# something else under that name.
_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "setattr", "delattr"})
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})

# Patterns searched in string constants (C++/CUDA sources) after comments are
# blanked out.  /proc is matched only at the start of a string or C++ literal.
_STRING_RULES = (
    (re.compile(r"\bcudaStreamCreate(?:WithFlags|WithPriority)?\b"), STREAM),
    (re.compile(r"\b(?:at|c10)::cuda::getStreamFromPool\b"), STREAM),
    (re.compile(r"\bcudaStreamNonBlocking\b"), STREAM),
    (re.compile(r"\bcudaStreamPerThread\b"), STREAM),
    (re.compile(r"\bstd::j?thread\b"), THREADING),
    (re.compile(r"\bstd::async\b"), THREADING),
    (re.compile(r"\bpthread_create\b"), THREADING),
    (re.compile(r"\bgetenv\b"), SEED_OR_ENV),
    (re.compile(r'(?:^|(?<="))/proc\b'), SEED_OR_ENV),
)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LAUNCH = re.compile(r"<<<(.*?)>>>", re.S)
_CURRENT_STREAM = re.compile(r"\bget(?:Current|Default)CUDAStream\b")
_DEFAULT_STREAMS = frozenset({"0", "nullptr", "NULL"})


def findings(candidate: "Candidate") -> list["Finding"]:
    """The lint hits of a candidate as warning findings of stage "lint"."""
    from kerneljudge.records import Finding

    return [Finding.of(hit.code, hit.message, stage="lint", line=hit.line) for hit in lint_source(candidate.source)]


def lint_source(source: str, *, reference_names: frozenset[str] = frozenset({"Model"})) -> list[LintHit]:
    """Return the lint hits of a candidate's source, sorted by line.

    Raises ``SyntaxError`` when the source is not valid Python.
    """
    tree = ast.parse(source)
    linter = _Linter(tree, reference_names)
    linter.visit(tree)
    return sorted(linter.hits.values(), key=lambda hit: (hit.line, hit.code))


class _Linter(ast.NodeVisitor):
    def __init__(self, tree: ast.Module, reference_names: frozenset[str]) -> None:
        self.refs = reference_names
        self.hits: dict[tuple[str, int], LintHit] = {}
        self.top_level = {id(stmt) for stmt in tree.body}
        self.aliases: dict[str, str] = {}
        strings = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        root = alias.name.split(".")[0]
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = _from_name(node, alias.name)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.append(node.value)
        # A launch passing a stream variable is trusted when the sources obtain
        # the current stream somewhere (typically passed down to a helper).
        self.current_stream_seen = any(_CURRENT_STREAM.search(_strip_comments(s)) for s in strings)

    def add(self, code: str, node: ast.AST | int, what: str) -> None:
        line = node if isinstance(node, int) else node.lineno
        self.hits.setdefault((code, line), LintHit(code, line, f"line {line}: {what}; {_FIX[code]}"))

    def qualname(self, node: ast.expr) -> str | None:
        """Dotted name of ``node`` through the candidate's imports, if any."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            return f"builtins.{node.id}" if node.id in _BUILTINS else None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base else None
        return None

    def check_name(self, qual: str, node: ast.AST) -> None:
        """Flag a use of ``qual`` that matches _NAME_RULES or a reference name."""
        if qual.rsplit(".", 1)[-1] in self.refs:
            self.add(REFERENCE, node, f"`{qual}` {_USE_WHY[REFERENCE]}")
        parts = qual.split(".")
        for end in range(len(parts), 0, -1):
            prefix = ".".join(parts[:end])
            if prefix in _NAME_RULES:
                code = _NAME_RULES[prefix]
                self.add(code, node, f"`{prefix.removeprefix('builtins.')}` {_USE_WHY[code]}")
                return

    # -- imports and names -------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.check_name(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self.check_name(_from_name(node, alias.name), node)

    def visit_Name(self, node: ast.Name) -> None:
        if not isinstance(node.ctx, ast.Load):
            return
        if node.id in self.refs:
            self.add(REFERENCE, node, f"`{node.id}` {_USE_WHY[REFERENCE]}")
        qual = self.qualname(node)
        if qual:
            self.check_name(qual, node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            if node.attr in self.refs:
                self.add(REFERENCE, node, f"`.{node.attr}` {_USE_WHY[REFERENCE]}")
            qual = self.qualname(node)
            if qual:
                self.check_name(qual, node)
        else:
            base = self.qualname(node.value)
            if base and base.split(".")[0] in _PATCH_ROOTS:
                verb = "assigned" if isinstance(node.ctx, ast.Store) else "deleted"
                self.add(MONKEYPATCH, node, f"`{base}.{node.attr}` is {verb}, patching a module the judge also uses")
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            qual = self.qualname(base) or ast.unparse(base)
            if qual.rsplit(".", 1)[-1] in self.refs:
                self.add(REFERENCE, base, f"`{node.name}` subclasses the reference `{ast.unparse(base)}`")
        self.generic_visit(node)

    # -- calls -------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        qual = self.qualname(node.func)
        if qual in _CLOCKS:
            self.add(TIMING, node, f"`{qual}()` reads a clock")
        elif qual in _EVENTS and _timing_enabled(node, positional=_EVENTS[qual]):
            self.add(TIMING, node, f"`{qual}(enable_timing=True)` creates a timing event")
        elif qual in ("builtins.setattr", "builtins.delattr") and node.args:
            target = self.qualname(node.args[0])
            if target and target.split(".")[0] in _PATCH_ROOTS:
                call = f"{qual.removeprefix('builtins.')}({target}, ...)"
                self.add(MONKEYPATCH, node, f"`{call}` patches a module the judge also uses")
        self.generic_visit(node)

    # -- fallbacks ---------------------------------------------------------

    def visit_Try(self, node: ast.Try) -> None:
        """A handler that swallows a failing call can return another computation."""
        guards_imports = id(node) in self.top_level and _imports_only(node)
        if _does_work(node.body) and not guards_imports:
            for handler in node.handlers:
                if not _reraises(handler):
                    clause = f"except {ast.unparse(handler.type)}" if handler.type else "except:"
                    self.add(
                        FALLBACK,
                        handler,
                        f"`{clause}` around a call can swallow a failing kernel and return another result",
                    )
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        """``contextlib.suppress`` is a try/except that never re-raises."""
        for item in node.items:
            expr = item.context_expr
            if isinstance(expr, ast.Call) and self.qualname(expr.func) == "contextlib.suppress":
                self.add(FALLBACK, node, "`contextlib.suppress` can swallow a failing kernel and return another result")
        self.generic_visit(node)

    # -- strings (C++/CUDA sources) ----------------------------------------

    def visit_Expr(self, node: ast.Expr) -> None:
        # Docstrings and other bare string statements are never executed code.
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str):
            return
        text = _strip_comments(node.value)

        def line_of(offset: int) -> int:
            return node.lineno + text.count("\n", 0, offset)

        for pattern, code in _STRING_RULES:
            for match in pattern.finditer(text):
                what = f"`{match.group()}` in a string constant {_USE_WHY[code]}"
                self.add(code, line_of(match.start()), what)
        for match in _LAUNCH.finditer(text):
            stream = _launch_stream(match.group(1))
            if stream and not (
                stream in _DEFAULT_STREAMS or _CURRENT_STREAM.search(stream) or self.current_stream_seen
            ):
                what = f"kernel launch on stream `{stream}`, not one from at::cuda::getCurrentCUDAStream(),"
                self.add(STREAM, line_of(match.start()), f"{what} {_USE_WHY[STREAM]}")


def _from_name(node: ast.ImportFrom, name: str) -> str:
    """Qualified name bound by ``from <module> import <name>`` (relative kept as dots)."""
    module = "." * node.level + (node.module or "")
    return f"{module}.{name}" if node.module else f"{module}{name}"


def _strip_comments(text: str) -> str:
    """Blank out C/C++ comments, keeping newlines so offsets map to lines."""
    return _COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def _does_work(body: list[ast.stmt]) -> bool:
    """Whether statements call or import something, i.e. can run a kernel."""
    return any(
        isinstance(n, (ast.Call, ast.BinOp, ast.Import, ast.ImportFrom))
        for stmt in body
        for n in ast.walk(stmt)
    )


def _imports_only(node: ast.Try) -> bool:
    """A module-level optional import: only ImportError caught, nothing called."""
    for handler in node.handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if not all(isinstance(t, ast.Name) and t.id in _IMPORT_ERRORS for t in types):
            return False
    return not any(isinstance(n, (ast.Call, ast.BinOp)) for stmt in node.body for n in ast.walk(stmt))


def _reraises(handler: ast.ExceptHandler) -> bool:
    """Whether the handler always ends by raising, with no way out."""
    escapes = (ast.Return, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom)
    return isinstance(handler.body[-1], ast.Raise) and not any(
        isinstance(n, escapes) for stmt in handler.body for n in ast.walk(stmt)
    )


def _timing_enabled(call: ast.Call, positional: int) -> bool:
    """Whether ``Event(...)`` is given an enable_timing that is not literally false."""
    values = [kw.value for kw in call.keywords if kw.arg == "enable_timing"] + call.args[:positional]
    return any(not (isinstance(v, ast.Constant) and not v.value) for v in values)


def _launch_stream(config: str) -> str | None:
    """The fourth ``<<<grid, block, shmem, stream>>>`` argument, if given."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(config):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(config[start:i])
            start = i + 1
    parts.append(config[start:])
    return " ".join(parts[3].split()) if len(parts) == 4 else None
