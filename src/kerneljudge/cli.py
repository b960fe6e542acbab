"""The command line: `kerneljudge` (alias `kj`). Options become one Options value; exit codes 0/1/2.

Exit codes: 0 every candidate passed, 1 some candidate failed (wrong or caught by a probe),
2 some candidate could not be judged (build error, crash, timeout, bad input) or a usage error;
130 (143) interrupted by SIGINT (SIGTERM): the worker is killed first, with its whole process group.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape

from kerneljudge import findings as catalog
from kerneljudge import report, suite
from kerneljudge.errors import KernelJudgeError
from kerneljudge.options import (CheckOptions, Options, TimingOptions, WorkerOptions, default_cache_dir,
                                 default_server_socket, spoken)
from kerneljudge.progress import NoticePrinter, TerminalProgress
from kerneljudge.records import Result, jsonsafe


def _overrides(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{item!r}: use NAME=VALUE", param_hint="--set")
        pairs.append((name.strip(), value.strip()))
    return tuple(pairs)


PROBLEMS_ROOT = click.option(
    "--problems-root", type=click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path),
    default=None, help="Resolve levelN/ID in this KernelBench checkout (default $KERNELJUDGE_PROBLEMS_ROOT, "
    "else the built-in suite).")


_CACHE_DIR_HELP = "Build/baseline cache (default $KERNELJUDGE_CACHE_DIR, else ~/.cache/kerneljudge)."

# The options of the evaluation verbs, in groups: every verb takes the common ones and those of the stages
# it runs (`check` never times, so it has no timing options).
COMMON_OPTIONS = (
    click.option("--set", "sets", multiple=True, metavar="NAME=VALUE",
                 help="Override a constant of the problem (repeatable): a number (sizes >= 1), true/false, "
                 "or a tuple/list as 3,5 or [8,8]."),
    click.option("--preset", default=None, help="Size preset of the problem (built-in problems: small)."),
    PROBLEMS_ROOT,
    click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N."),
    click.option("--timeout", "timeout_s", type=float, default=WorkerOptions.timeout_s,
                 show_default=True, help="Seconds for the whole worker, build included."),
    click.option("--memory-limit-mb", type=int, default=None,
                 help="Memory limit of each judge process on CPU runs, and of the worker's processes together "
                      "wherever a memory cgroup can be made (default: 75% of RAM)."),
    click.option("--gpu-memory-share", type=float, default=WorkerOptions.gpu_memory_share, show_default=True,
                 help="Share of the GPU's memory the candidate's process may allocate (the judge's referee "
                      "keeps the rest; each lane's worker with --lanes-per-gpu above 1)."),
    click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help=_CACHE_DIR_HELP),
    click.option("--arch", default=None, help="CUDA arch list for builds, e.g. 9.0 (default: the GPU's)."),
    click.option("--no-store", is_flag=True, help="Do not record the result in the results store."),
    click.option("--json", "as_json", is_flag=True,
                 help="JSON on stdout instead of the report: one object (`run`: one line per candidate, then a "
                      "summary line)."),
    click.option("--no-server", is_flag=True,
                 help="Evaluate in this process even when `kerneljudge serve` is running."),
)
CHECKING_OPTIONS = (
    click.option("--trials", default=CheckOptions.trials, show_default=True, type=int,
                 help="Correctness trials."),
    click.option("--atol", type=float, default=None, help="Absolute tolerance (default: from the dtype)."),
    click.option("--rtol", type=float, default=None, help="Relative tolerance (default: from the dtype)."),
    click.option("--seed", type=int, default=None, help="Fix the seed (default: secret and random per run)."),
    click.option("--float64-budget-mb", type=int, default=None,
                 help="Run the float64 reference in chunks beyond this (default: 1/8 of the native run's memory, "
                      "or 1/4 of free memory if less; at least 256 MiB on a CPU, half the footprint within 64-256 MiB on a GPU)."),
    click.option("--protocol", type=click.Choice(["strict", "kernelbench"]), default="strict", show_default=True,
                 help="kernelbench: KernelBench's own protocol, with strict beside it; the report says where "
                      "the two verdicts differ."),
    click.option("--no-probes", is_flag=True, help="Skip the integrity probes (not for results you trust)."),
)
TIMING_OPTIONS = (
    click.option("--budget-ms", type=float, default=TimingOptions.budget_ms, show_default=True,
                 help="Timing budget per timed function."),
    click.option("--cuda-graph", is_flag=True, help="Time CUDA-graph replays (launch-bound kernels)."),
    click.option("--no-baselines", is_flag=True, help="Do not time the reference baselines."),
)


def with_options(*groups):
    """Decorate a command with these groups of options, in order."""

    def decorate(func):
        for decorator in reversed([d for group in groups for d in group]):
            func = decorator(func)
        return func

    return decorate


def build_options(kw: dict, *, timing: bool = True, probes: bool = True) -> Options:
    base = Options()
    return base.replace(
        device=kw["device"], preset=kw["preset"], overrides=_overrides(kw["sets"]), protocol=kw["protocol"],
        probes=probes and not kw["no_probes"],
        check={"trials": kw["trials"], "atol": kw["atol"], "rtol": kw["rtol"], "seed": kw["seed"],
               "float64_budget_mb": kw["float64_budget_mb"]},
        timing={"enabled": timing, **({"budget_ms": kw["budget_ms"], "cuda_graph": kw["cuda_graph"],
                                       "baselines": not kw["no_baselines"]} if "budget_ms" in kw else {})},
        worker={"timeout_s": kw["timeout_s"], "memory_limit_mb": kw["memory_limit_mb"],
                "gpu_memory_share": kw["gpu_memory_share"]},
        cache_dir=kw["cache_dir"] or default_cache_dir(), arch=kw["arch"],
        problems_root=kw["problems_root"] or base.problems_root,
        store_path=None if kw["no_store"] else base.store_path,
    )


def emit(results: list[Result], as_json: bool) -> int:
    """Print the results (one JSON object, or the human report) and return the exit code: the verdicts', also
    where the reader of stdout left before the end (`| head`; click's own exit code for that, 1, is "fail")."""
    if as_json:
        payload = results[0].to_json() if len(results) == 1 else {"results": [r.to_json() for r in results]}
        _echo(json.dumps(jsonsafe(payload), indent=2))
    else:
        console = _ReportConsole()
        for i, result in enumerate(results):
            if i:
                console.rule()
            report.render(result, console)
    return max(r.exit_code for r in results)


def _echo(text: str) -> None:
    """`text` on stdout, flushed; where its reader left, nothing (the caller's exit code stands)."""
    try:
        click.echo(text)
        sys.stdout.flush()
    except BrokenPipeError:
        _reader_left()


def _reader_left() -> None:
    """What is left unwritten to stdout goes nowhere, the interpreter's last flush included."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class _ReportConsole(Console):
    """rich's Console, whose own answer to a reader that left (exit 1) is left to `emit`."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _reader_left()


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived during an evaluation. Raised from the signal handler, so it unwinds
    through the worker's context, which kills the worker's process group (isolation.WorkerProcess)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextmanager
def _signals_interrupt():
    """SIGINT and SIGTERM raise Interrupted (once: a second Ctrl-C does not break the cleanup)."""
    def handler(signum, _frame):
        for name in (signal.SIGINT, signal.SIGTERM):
            signal.signal(name, signal.SIG_IGN)
        raise Interrupted(signum)

    previous = {name: signal.signal(name, handler) for name in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for name, old in previous.items():
            signal.signal(name, old)


def run_verb(verb: str, problem: str, solutions: tuple[str, ...], options: Options, kw: dict) -> None:
    """Evaluate each solution (through `kerneljudge serve` when one is running), print, exit.
    Interrupted (Ctrl-C, SIGTERM): the worker is killed, "interrupted" on stderr, exit 128 + signal."""
    as_json = kw["as_json"]
    try:
        options.validate()  # here too: a bad option never reaches a server, whatever the solutions
        with _signals_interrupt():
            results = _evaluate_all(verb, problem, solutions, options,
                                    None if kw["no_server"] else default_server_socket(), as_json)
    except Interrupted as exc:
        click.echo(f"kerneljudge: interrupted ({exc})", err=True)
        sys.exit(128 + exc.signum)
    except KernelJudgeError as exc:
        if not as_json:
            raise
        _echo(json.dumps({"verdict": "error", "error": spoken(exc, "cli")}))  # one JSON object on stdout
        sys.exit(2)
    sys.exit(emit(results, as_json))


def _evaluate_all(verb: str, problem: str, solutions: tuple[str, ...], options: Options,
                  socket_path: Path | None, as_json: bool) -> list[Result]:
    from kerneljudge import daemon

    results = []
    shown = not as_json and sys.stderr.isatty()  # progress on a terminal only; notices (waits) always
    with TerminalProgress() if shown else nullcontext(NoticePrinter()) as on_progress:
        for solution in solutions or (None,):
            result = None
            if shown:
                on_progress.start(Path(solution).name if solution else problem)
            if socket_path is not None:
                try:
                    result = daemon.evaluate_via_server(
                        socket_path, verb, problem, solution, options,
                        on_wait=lambda: click.echo("kerneljudge: waiting for the judge server (one evaluation at "
                                                   "a time; --no-server evaluates here)", err=True))
                except daemon.ServerRefused as exc:
                    click.echo(f"kerneljudge: {exc}; evaluating in this process", err=True)
                    socket_path = None
            if result is not None and not as_json and not results:
                click.echo(f"(evaluated by `kerneljudge serve` on {socket_path}; --no-server evaluates here)",
                           err=True)
            if result is None:
                from kerneljudge import api  # the whole judge: not imported where a server answered

                result = getattr(api, verb)(problem, solution, options, on_progress=on_progress)
            results.append(result)
    return results


# Commands written in modules of their own, imported when named (or listed by --help): a `kerneljudge eval`
# answered by `kerneljudge serve` then imports only what its client needs (0.47-0.51 s -> 0.23-0.27 s of
# imports, the CPU VM; the client's start is part of every served call's wall time).
LAZY_COMMANDS = {
    "history": "kerneljudge.cli_agents:history_command",
    "show": "kerneljudge.cli_agents:show_command",
    "mcp": "kerneljudge.cli_agents:mcp_command",
    "serve": "kerneljudge.cli_agents:serve_command",
    "report": "kerneljudge.cli_report:report_command",
    "doctor": "kerneljudge.cli_doctor:doctor_command",
    "lint-problem": "kerneljudge.cli_problemlint:lint_problem_command",
    "run": "kerneljudge.cli_batch:run_command",  # it uses this module's option groups
}


class Main(click.Group):
    """Turns the judge's own errors into a one-paragraph message and exit code 2; imports the commands of
    LAZY_COMMANDS when they are asked for."""

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx, name):
        if name not in self.commands and name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KernelJudgeError as exc:
            click.echo(f"error: {spoken(exc, 'cli')}", err=True)
            sys.exit(2)


@click.group(cls=Main)
@click.version_option(package_name="kerneljudge")
def main() -> None:
    """Judge GPU kernels against PyTorch reference modules: correct, for any inputs and parameters,
    and honestly timed."""


@main.command("eval")
@click.argument("problem")
@click.argument("solutions", nargs=-1)
@with_options(COMMON_OPTIONS, CHECKING_OPTIONS, TIMING_OPTIONS)
@click.option("--no-timing", is_flag=True, help="Skip timing.")
def eval_command(problem: str, solutions: tuple[str, ...], no_timing: bool, **kw) -> None:
    """Evaluate SOLUTION(s) against PROBLEM: build, check, probe, time, report.

    PROBLEM is a path or a built-in name (level2/51, l2/51). SOLUTION is a path, or @VARIANT for a
    shipped solution (@pytorch, @cuda, @triton); without one, the shipped solution for this device."""
    run_verb("evaluate", problem, solutions, build_options(kw, timing=not no_timing), kw)


@main.command("check")
@click.argument("problem")
@click.argument("solutions", nargs=-1)
@with_options(COMMON_OPTIONS, CHECKING_OPTIONS)
def check_command(problem: str, solutions: tuple[str, ...], **kw) -> None:
    """Correctness and integrity only (no timing): the agents' run_correctness."""
    run_verb("check", problem, solutions, build_options(kw, timing=False), kw)


@main.command("bench")
@click.argument("problem")
@click.argument("solutions", nargs=-1)
@with_options(COMMON_OPTIONS, CHECKING_OPTIONS, TIMING_OPTIONS)
def bench_command(problem: str, solutions: tuple[str, ...], **kw) -> None:
    """Timing against the baselines (timed before the candidate is loaded), after the checks that make a time
    meaningful: the agents' benchmark."""
    run_verb("bench", problem, solutions, build_options(kw), kw)


@main.command("submit")
@click.argument("problem")
@click.argument("solutions", nargs=-1)
@with_options(COMMON_OPTIONS, CHECKING_OPTIONS, TIMING_OPTIONS)
def submit_command(problem: str, solutions: tuple[str, ...], **kw) -> None:
    """The full strict evaluation plus a hidden re-check with secret seeds; the verdict is recorded."""
    run_verb("submit", problem, solutions, build_options(kw), kw)


@main.command("problems")
@click.argument("root", required=False, type=click.Path(exists=True, file_okay=False, path_type=Path))
@PROBLEMS_ROOT
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def problems_command(root: Path | None, problems_root: Path | None, as_json: bool) -> None:
    """List the problems of a KernelBench-layout folder (default: --problems-root, else the built-in suite)."""
    from kerneljudge import sourcefile

    root = root or problems_root or Options().problems_root
    rows = []
    for entry in suite.list_problems(suite.layout_root(root) if root else suite.SUITE_ROOT):
        try:
            tree = sourcefile.parse(sourcefile.read(entry.path), str(entry.path))
            constants, presets = sourcefile.constants(tree), sorted(sourcefile.presets(tree))
        except (SyntaxError, OSError, UnicodeDecodeError) as exc:
            constants, presets = {"unreadable": str(exc)}, []
        rows.append({"name": entry.name, "path": str(entry.path), "constants": constants, "presets": presets,
                     "solutions": sorted(suite.shipped_solutions(entry.name)) if root is None else [],
                     "note": None if root else suite.kernelbench_difference(entry.name, entry.path)})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("problem", "sizes", "presets", "shipped solutions", "note")
    for row in rows:
        table.add_row(row["name"], ", ".join(f"{k}={v}" for k, v in row["constants"].items()),
                      ", ".join(row["presets"]), ", ".join(row["solutions"]), row["note"] or "")
    Console().print(table)


@main.command("explain")
@click.argument("code", required=False)
def explain_command(code: str | None) -> None:
    """Explain a finding code (without CODE: list them all)."""
    if code is None:
        for entry in catalog.CATALOG.values():
            click.echo(f"{entry.code:24} {entry.severity:5} {entry.title}")
        return
    if code not in catalog.CATALOG:
        raise KernelJudgeError(f"no finding code {code!r}; `kerneljudge explain` lists them")
    entry = catalog.CATALOG[code]
    click.echo(f"{entry.code}: {entry.title}")
    click.echo(f"severity: {entry.severity}" + (" (the candidate could not be judged)" if entry.blocking else ""))
    if entry.catalog_row:
        click.echo(f"guards against: integrity catalog row {entry.catalog_row}")
    click.echo(f"fix: {entry.fix}")


@main.command("build")
@click.argument("solutions", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--jobs", "-j", default=2, show_default=True, help="Builds at once.")
@click.option("--arch", default=None, help="CUDA arch list, e.g. 9.0 (needed when no GPU is visible).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu or cuda (what the builds target).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=WorkerOptions.timeout_s,
              show_default=True, help="Seconds for each build's worker.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help=_CACHE_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one entry per SOLUTION.")
def build_command(solutions: tuple[Path, ...], jobs: int, arch: str | None, device: str, timeout_s: float,
                  cache_dir: Path | None, as_json: bool) -> None:
    """Compile SOLUTION(s) into the build cache, in parallel (each imported by a worker, its extensions built by
    the judge's sandboxed builder; no GPU needed)."""
    from kerneljudge.builder import build_all
    from kerneljudge.pipeline import resolve_device

    options = Options().replace(arch=arch, worker={"timeout_s": timeout_s},
                                cache_dir=cache_dir or default_cache_dir()).validate()
    outcomes = build_all(list(solutions), options, resolve_device(device), jobs)
    if as_json:
        click.echo(json.dumps([o.to_json() for o in outcomes], indent=2))
    else:
        console = Console()
        for o in outcomes:
            if o.ok:
                what = {"hit": "cache hit", "miss": "built", "none": "nothing to compile"}[o.build.cache]
                console.print(f"[green]ok[/green]    {o.path.name}: {what} in {o.build.build_ms / 1e3:.2f} s")
            else:
                console.print(f"[red]error[/red] {escape(o.path.name)}: "
                              + escape("; ".join(f.message for f in o.findings)))
    sys.exit(0 if all(o.ok for o in outcomes) else 2)


@main.group("cache")
def cache_group() -> None:
    """The build/baseline cache folder ($KERNELJUDGE_CACHE_DIR, default ~/.cache/kerneljudge)."""


@cache_group.command("info")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help=_CACHE_DIR_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def cache_info(cache_dir: Path | None, as_json: bool) -> None:
    """Where the cache is and what it holds."""
    from kerneljudge import cache

    data = cache.info(cache_dir or default_cache_dir())
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"cache: {data['path']}")
    for name, section in data["sections"].items():
        click.echo(f"  {name:10} {section['entries']:5} entries  {section['bytes'] / 2**20:8.1f} MiB")


@cache_group.command("clear")
@click.argument("section", required=False, type=click.Choice(["builds", "triton", "baselines", "bandwidth"]))
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help=_CACHE_DIR_HELP)
def cache_clear(section: str | None, cache_dir: Path | None) -> None:
    """Remove the cache (or one SECTION of it)."""
    from kerneljudge import cache

    removed = cache.clear(cache_dir or default_cache_dir(), section)
    click.echo(f"removed: {', '.join(removed) or 'nothing'}")
