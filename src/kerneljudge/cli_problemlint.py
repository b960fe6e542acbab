"""`kerneljudge lint-problem PROBLEM...`: degenerate, redundant and mis-sized problems (problemlint/).

Exit codes: 0 no problem flagged, 1 some problem has a warning, 2 a usage error.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import click

from kerneljudge.options import Options, WorkerOptions, default_cache_dir
from kerneljudge.problemlint.judge import ProblemLint, lint_problems
from kerneljudge.records import jsonsafe

SEVERITY_COLOUR = {"warn": "yellow", "info": None}


@click.command("lint-problem")
@click.argument("problems", nargs=-1, required=True)
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Lint at these sizes (repeatable).")
@click.option("--preset", default=None, help="Lint at this size preset.")
@click.option("--full", is_flag=True, help="Lint at the file's own sizes (default: the `small` preset, else "
              "sizes lowered to fit a laptop; the output says which).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--problems-root", type=click.Path(exists=True, file_okay=False, resolve_path=True, path_type=Path),
              default=None, help="Resolve levelN/ID in this KernelBench checkout.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=1), default=WorkerOptions.timeout_s,
              show_default=True, help="Seconds per problem.")
@click.option("--no-timing", is_flag=True, help="Do not time the reference (launch-bound check).")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Where results are kept for the evaluations' notice (default $KERNELJUDGE_CACHE_DIR).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def lint_problem_command(problems: tuple[str, ...], sets: tuple[str, ...], preset: str | None, full: bool,
                         device: str, problems_root: Path | None, timeout_s: float, no_timing: bool,
                         cache_dir: Path | None, as_json: bool) -> None:
    """Lint PROBLEM(s) (files, built-in names, or folders such as ../shared/kernelbench/level1): trivial
    outputs that pass, outputs that ignore an input, a parameter or the seed, tiny, saturated, NaN or
    nondeterministic outputs, redundant operations in the traced graph, and sizing."""
    from kerneljudge.cli import _overrides

    base = Options()
    options = base.replace(device=device, preset=preset, overrides=_overrides(sets),
                           problems_root=problems_root or base.problems_root,
                           cache_dir=cache_dir or default_cache_dir(), worker={"timeout_s": timeout_s}).validate()
    shown = not as_json and sys.stderr.isatty()
    results = lint_problems(problems, options, full=full, timed=not no_timing,
                            on_result=(lambda r: click.echo(render(r))) if not as_json else
                            (lambda r: click.echo(f"linted {r.name}", err=True)) if shown else (lambda r: None))
    if as_json:
        click.echo(json.dumps(jsonsafe({"problems": [r.to_json() for r in results], "summary": summary(results)}),
                              indent=2))
    else:
        click.echo(render_summary(summary(results)))
    sys.exit(1 if any(r.flagged for r in results) else 0)


def summary(results: list[ProblemLint]) -> dict:
    counts = Counter(f.code for r in results for f in {f.code: f for f in r.findings}.values())
    return {"linted": len(results), "flagged": sum(r.flagged for r in results),
            "skipped": sum(any(f.code == "problem-lint-skipped" for f in r.findings) for r in results),
            "problems_per_finding": dict(sorted(counts.items()))}


def render(result: ProblemLint) -> str:
    lines = [click.style(result.name, bold=True) + f"  ({result.sizes}; {result.lint_ms / 1e3:.1f} s)"]
    for f in result.findings:
        colour = SEVERITY_COLOUR.get(f.severity)
        lines.append(f"  {click.style(f.severity, fg=colour)} {f.code}: {f.message}")
        if f.severity != "info":
            lines.append(click.style(f"       fix: {f.fix}", dim=True))
    if not result.findings:
        lines.append("  no findings")
    return "\n".join(lines)


def render_summary(data: dict) -> str:
    per = ", ".join(f"{code} {n}" for code, n in data["problems_per_finding"].items()) or "none"
    return (f"{data['linted']} problems linted, {data['flagged']} flagged, {data['skipped']} not linted; "
            f"problems per finding: {per}")
