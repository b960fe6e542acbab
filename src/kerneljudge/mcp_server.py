"""The judge as an MCP server (official `mcp` SDK, 2.x), so coding agents can call it as tools.

Tools: list_problems, show_problem, run_correctness, benchmark, submit. The three judging tools take
the candidate as SOURCE text (written to a temporary .py file first) or as a PATH, run the same
pipeline as the CLI and the Python API (`kerneljudge.api`), and return structured output:

    {"verdict": "pass"|"fail"|"error",
     "summary": report.brief(result, 2000),     # what to fix first, plain text
     "result":  the Result's JSON, trimmed to a size bound}

A candidate's failure is never a tool error: it is a result with verdict "fail" or "error" and
findings. A tool error means the request itself was unusable (an argument out of its range, an
unknown or malformed problem, a solution_path that is no file, an unknown constant, no GPU for
device="cuda"); its message names the argument as this server's tools call it and what to change.

Run with `kerneljudge mcp` (stdio). Tools run on the SDK's worker threads, so a long evaluation does
not block the server's event loop; each evaluation has its own fresh worker process, taken
pre-started from a pool.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any, Callable

from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from kerneljudge import __version__, api, pipeline, report, sourcefile, suite
from kerneljudge.candidate import missing_file
from kerneljudge.errors import KernelJudgeError
from kerneljudge.isolation import WorkerPool
from kerneljudge.options import DEFAULT_TOLERANCE, CheckOptions, Options, TimingOptions, spoken
from kerneljudge.problem import load_problem
from kerneljudge.records import Result, jsonsafe

#: Bound on the JSON size of one judging tool's structured output (the result is trimmed to fit).
MAX_OUTPUT_CHARS = 24_000
#: Bound on the plain-text summary (report.brief).
SUMMARY_CHARS = 2_000
#: The worker's output tail kept in a tool result (the end is where the error is).
TAIL_CHARS = 2_000

INSTRUCTIONS = """\
kerneljudge judges a candidate kernel file against a KernelBench problem file.
A problem defines `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`. A candidate is a Python
file defining `class ModelNew(nn.Module)` with the same constructor and forward signatures, holding the same
parameters/buffers (same names and shapes) as Model; it may build CUDA/C++ extensions (torch.utils.cpp_extension
load_inline) or Triton kernels. Workflow: list_problems -> show_problem -> run_correctness until verdict is
"pass" -> benchmark -> submit. Each judging tool returns {verdict, summary, result}; read `summary` first:
it lists blocking errors and failing findings with their fix."""

_PROTOCOL = (
    "Strict protocol: the candidate runs in a separate worker process (crashes, exits, hangs and out-of-memory "
    "are contained and reported as findings). Model and ModelNew are constructed from the same seed, then the "
    "reference's parameters and buffers are copied into ModelNew via load_state_dict (every reference key must "
    "exist with the same shape; extra candidate buffers are allowed); both run in eval() and inference mode. "
    f"Correctness: {CheckOptions.trials} trials, each with fresh inputs from get_inputs() under its own seed "
    "derived from a secret random seed; the candidate runs first (on CUDA, on freed memory poisoned with NaN), "
    "its inputs must be bit-for-bit unchanged afterwards, and its output must match the reference recomputed in "
    "float64 within atol=rtol="
    + ", ".join(f"{v:g} ({k})" for k, v in DEFAULT_TOLERANCE.items() if k != "float64")
    + " by output dtype. Integrity probes then test for stale results after parameters or inputs change, outputs "
    "aliasing inputs/parameters, unwritten output memory, nondeterminism, leftover threads, side streams, "
    "patched clocks/judge functions and dead decoy kernels; a static lint warns about fallbacks to the reference, "
    "monkeypatching, threads, seeds/env reads and clocks. Verdict: pass (all trials pass, no failing finding), "
    "fail (wrong output or an integrity finding), error (could not be judged: syntax/import/compile error, "
    "missing ModelNew, crash, timeout)."
)
_TIMING = (
    f"Timing: {TimingOptions.warmup_runs} warm-up calls, then timed calls rotating among "
    f"{TimingOptions.input_sets} input sets refilled with new values each round (about "
    f"{TimingOptions.checked_calls} timed outputs, at secret positions spread over the whole timing, are checked against the reference) until the relative standard error of the mean is below {TimingOptions.target_rel_sem:.1%}, "
    f"with at least {TimingOptions.min_runs} calls and {TimingOptions.min_time_ms:g} ms and at most "
    f"{TimingOptions.budget_ms:g} ms (budget_ms) per timed function; the reference is timed the same way eagerly "
    "and under torch.compile, giving speedups; times far below the memory-bandwidth floor are flagged."
)
_CANDIDATE_ARGS = (
    "Give the candidate as solution_source (the full text of the .py file; it is written to a temporary file) or "
    "solution_path (a file path, or @VARIANT for a solution shipped with a built-in problem); with neither, a "
    "built-in problem's shipped solution for the device is judged. problem: a path to a KernelBench problem "
    "file or a built-in name (level2/51, l2/51). device: auto (cuda if a GPU is visible, else cpu), cpu, cuda, "
    "cuda:N. sets: size-constant overrides {NAME: value} applied after preset; built-in problems on a CPU use "
    "their 'small' preset unless a preset is given. Returns {verdict, summary, result}."
)


class JudgeOutput(TypedDict):
    """What a judging tool returns."""

    verdict: str  # pass | fail | error
    summary: str  # report.brief: blocking errors, failing findings with their fix, correctness, timing
    result: dict[str, Any]  # Result.to_json(), trimmed to MAX_OUTPUT_CHARS (see result["trimmed"])


class ProblemSummary(TypedDict):
    name: str
    path: str
    constants: dict[str, Any]
    presets: list[str]
    solutions: list[str]


class ProblemList(TypedDict):
    problems: list[ProblemSummary]


class ProblemDetail(TypedDict):
    name: str
    path: str
    builtin: bool
    source: str
    constants: dict[str, Any]  # the sizes a run uses with this preset (file values when preset is None)
    file_constants: dict[str, Any]  # the values written in the file (the full size)
    presets: dict[str, dict[str, Any]]
    solutions: dict[str, str]  # variant -> path (built-in problems)
    solution_sources: dict[str, str]  # variant -> source, only when include_solution_sources


def build_server(options: Options | None = None, pool: WorkerPool | None = None) -> MCPServer:
    """An MCPServer whose judging tools start from `options` (default `Options()`, which records every
    result in the results store). The tools' own arguments (device, sets, preset, ...) override it.
    With a `pool`, each evaluation takes a pre-started worker from it."""
    base = options or Options()
    server = MCPServer("kerneljudge", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(description="List the built-in KernelBench problems: name (use it as `problem`), file path, "
                             "size constants, size presets, and the variants of the shipped solutions.")
    def list_problems() -> ProblemList:
        rows = []
        for entry in suite.list_problems():
            tree = sourcefile.parse(sourcefile.read(entry.path), str(entry.path))
            rows.append(ProblemSummary(name=entry.name, path=str(entry.path), constants=sourcefile.constants(tree),
                                       presets=sorted(sourcefile.presets(tree)),
                                       solutions=sorted(suite.shipped_solutions(entry.name))))
        return ProblemList(problems=rows)

    @server.tool(description="Show one problem: its full source (the reference Model, get_inputs, "
                             "get_init_inputs), the size constants a run uses (after `preset`), the file's own "
                             "values, its presets, and the shipped solutions (variant -> path; their sources too "
                             "with include_solution_sources=true). problem: a path or a built-in name (l2/51).")
    def show_problem(problem: str, preset: str | None = None,
                     include_solution_sources: bool = False) -> ProblemDetail:
        loaded = _usage(lambda: load_problem(problem, preset=preset))
        tree = sourcefile.parse(loaded.source, str(loaded.path))
        shipped = suite.shipped_solutions(loaded.name) if loaded.builtin else {}
        return ProblemDetail(
            name=loaded.name, path=str(loaded.path), builtin=loaded.builtin, source=loaded.source,
            constants=dict(loaded.constants), file_constants=sourcefile.constants(tree),
            presets=sourcefile.presets(tree), solutions={k: str(v) for k, v in shipped.items()},
            solution_sources={k: v.read_text() for k, v in shipped.items()} if include_solution_sources else {})

    @server.tool(description="Check a candidate's correctness and integrity, without timing (the agents' "
                             "run_correctness). Static lint, build (compiles CUDA/C++ extensions; builds are "
                             "cached by source hash), then the checks. " + _PROTOCOL + " trials: number of "
                             f"correctness trials, 1 or more (default {CheckOptions.trials}); seed: fix the seed to reproduce "
                             "a failure (default: secret, random per run). " + _CANDIDATE_ARGS)
    def run_correctness(problem: str, solution_source: str | None = None, solution_path: str | None = None,
                        device: str = "auto", sets: dict[str, int | float | str] | None = None,
                        preset: str | None = None, trials: int | None = None,
                        seed: int | None = None) -> JudgeOutput:
        opts = _options(base, device, sets, preset)
        opts = opts.replace(check={"trials": trials if trials is not None else opts.check.trials,
                                   "seed": seed if seed is not None else opts.check.seed})
        return _judge(api.check, problem, solution_source, solution_path, opts, pool)

    @server.tool(description="Time a candidate against the reference, after the correctness checks that make a "
                             "time meaningful (a wrong kernel's time means nothing: a failing candidate is not "
                             "timed). " + _TIMING + " " + _PROTOCOL + " budget_ms: timing budget per timed "
                             f"function, in ms, above 0 (default {TimingOptions.budget_ms:g}). " + _CANDIDATE_ARGS)
    def benchmark(problem: str, solution_source: str | None = None, solution_path: str | None = None,
                  device: str = "auto", sets: dict[str, int | float | str] | None = None,
                  preset: str | None = None, budget_ms: float | None = None) -> JudgeOutput:
        opts = _options(base, device, sets, preset)
        opts = opts.replace(timing={"budget_ms": budget_ms if budget_ms is not None else opts.timing.budget_ms})
        return _judge(api.bench, problem, solution_source, solution_path, opts, pool)

    @server.tool(description="Submit a candidate: the full evaluation under the strict protocol (lint, build, "
                             "correctness, integrity probes, timing) plus a hidden re-check with fresh secret seeds "
                             "whose details are withheld; the verdict is recorded in the results store. Use after "
                             "run_correctness passes. " + _PROTOCOL + " " + _TIMING + " " + _CANDIDATE_ARGS)
    def submit(problem: str, solution_source: str | None = None, solution_path: str | None = None,
               device: str = "auto", sets: dict[str, int | float | str] | None = None,
               preset: str | None = None) -> JudgeOutput:
        return _judge(api.submit, problem, solution_source, solution_path, _options(base, device, sets, preset),
                      pool)

    return server


def run_stdio(options: Options | None = None) -> None:
    """Serve over stdio until the client closes the connection (what `kerneljudge mcp` runs), with a
    worker kept started ahead of each tool call."""
    with WorkerPool() as pool:
        pool.fill(device=pipeline.resolve_device((options or Options()).device))  # the likely device, taken at once
        build_server(options, pool).run("stdio")


# ---------------------------------------------------------------------------------------------- helpers
def _usage(fn: Callable[[], Any]) -> Any:
    """Run `fn`; the judge's usage errors become tool errors carrying their message, in MCP's words."""
    try:
        return fn()
    except KernelJudgeError as exc:
        raise ToolError(spoken(exc, "mcp")) from exc


def _options(base: Options, device: str, sets: dict[str, Any] | None, preset: str | None) -> Options:
    overrides = tuple((str(k), str(v)) for k, v in (sets or {}).items())
    return base.replace(device=device, overrides=overrides, preset=preset)


def _judge(verb: Callable[..., Result], problem: str, source: str | None, path: str | None,
           options: Options, pool: WorkerPool | None) -> JudgeOutput:
    if source is not None and path is not None:
        raise ToolError("give the candidate as solution_source or as solution_path, not both")
    if path is not None and not path.startswith("@") and (missing := missing_file(path)):
        raise ToolError(f"solution_path: {missing}")
    if source is None:
        return judge_output(_request_usable(_usage(lambda: verb(problem, path, options, pool=pool))))
    with tempfile.TemporaryDirectory(prefix="kj-mcp-") as folder:
        candidate = Path(folder) / "candidate.py"
        candidate.write_text(source)
        return judge_output(_request_usable(_usage(lambda: verb(problem, candidate, options, pool=pool))))


def _request_usable(result: Result) -> Result:
    """The result, unless the problem could not be loaded: that is the request's fault (a tool error),
    not the candidate's."""
    for finding in result.findings:
        if finding.code == "problem-invalid":
            raise ToolError(f"problem: {finding.message}")
    return result


def judge_output(result: Result, max_chars: int = MAX_OUTPUT_CHARS) -> JudgeOutput:
    """The structured output of a judging tool, within `max_chars` of JSON."""
    summary = report.brief(result, SUMMARY_CHARS)
    budget = max_chars - len(json.dumps({"verdict": result.verdict, "summary": summary, "result": {}}))
    return JudgeOutput(verdict=result.verdict, summary=summary, result=trim_result(result.to_json(), budget))


def trim_result(data: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """The result JSON cut to `max_chars`: the worker output keeps its last TAIL_CHARS characters; then long
    strings and long lists (timing samples) are clipped ever shorter; as a last resort only the verdict and
    the findings' codes and messages remain. `trimmed` lists what was cut."""
    data = jsonsafe(data)
    trimmed: list[str] = []
    tail = data.get("worker_output_tail")
    if isinstance(tail, str) and len(tail) > TAIL_CHARS:
        data["worker_output_tail"] = "[... clipped]\n" + tail[-(TAIL_CHARS - 14):]
        trimmed.append("worker_output_tail")
    for max_str, max_list in ((2000, 64), (500, 16), (200, 4)):
        if _size(data, trimmed) <= max_chars:
            break
        data = _clip(data, max_str, max_list, "", trimmed)
    if _size(data, trimmed) > max_chars:
        data = {"verdict": data.get("verdict"), "correct": data.get("correct"), "speedup": data.get("speedup"),
                "findings": [{"code": f.get("code"), "severity": f.get("severity"),
                              "message": str(f.get("message"))[:300]} for f in data.get("findings", [])][:20]}
        trimmed.append("everything but verdict, correct, speedup and findings (code, severity, message)")
    if trimmed:
        data["trimmed"] = trimmed
    return data


def _size(data: dict[str, Any], trimmed: list[str]) -> int:
    return len(json.dumps(data)) + len(json.dumps(trimmed)) + 16


def _clip(value: Any, max_str: int, max_list: int, where: str, trimmed: list[str]) -> Any:
    if isinstance(value, str) and len(value) > max_str:
        _note(trimmed, where)
        if where.endswith("_tail"):  # output tails: the end is where the error is
            return "[... clipped]\n" + value[-(max_str - 14):]
        return value[: max_str - 14] + " [... clipped]"
    if isinstance(value, list):
        if len(value) > max_list:
            _note(trimmed, where)
            value = value[:max_list]
        return [_clip(v, max_str, max_list, where, trimmed) for v in value]
    if isinstance(value, dict):
        return {k: _clip(v, max_str, max_list, f"{where}.{k}" if where else k, trimmed) for k, v in value.items()}
    return value


def _note(trimmed: list[str], where: str) -> None:
    if where not in trimmed:
        trimmed.append(where)
