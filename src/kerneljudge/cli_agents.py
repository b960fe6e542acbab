"""CLI commands around the results store and the agent interfaces: `history`, `show`, `mcp`, `serve`.

Named in cli.py's LAZY_COMMANDS (imported when asked for). The store's errors
are StoreError (a KernelJudgeError), which the main group turns into a message and exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kerneljudge import findings as catalog
from kerneljudge import report
from kerneljudge.errors import KernelJudgeError
from kerneljudge.options import VERBS, Options, default_cache_dir, default_server_socket, default_store_path
from kerneljudge.records import Result, jsonsafe

PIPED_WIDTH = 10_000  # `history | grep ...` sees each row on one line
_STORE_HELP = "Results database (default $KERNELJUDGE_STORE, else ~/.local/share/kerneljudge/results.sqlite)."


def _store(path: Path | None):
    from kerneljudge.store import Store

    return Store(path or default_store_path())


@click.command("history")
@click.option("--problem", default=None, help="Only this problem (a name such as level2/51 or l2/51, or a file stem).")
@click.option("--verdict", type=click.Choice(["pass", "fail", "error"]), default=None, help="Only this verdict.")
@click.option("--verb", type=click.Choice(VERBS), default=None, help="Only records made by this verb.")
@click.option("--candidate", "candidate_sha", default=None, metavar="SHA",
              help="Only this candidate (sha256 of its source, or a prefix of 6+ characters).")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1), help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None, help=_STORE_HELP)
def history_command(problem: str | None, verdict: str | None, verb: str | None, candidate_sha: str | None,
                    limit: int, as_json: bool, store_path: Path | None) -> None:
    """List recorded evaluations, newest first (`kerneljudge show ID` shows one in full)."""
    path = (store_path or default_store_path()).expanduser()
    if candidate_sha is not None and len(candidate_sha) < 6:
        raise click.BadParameter("give at least 6 characters of the sha256", param_hint="--candidate")
    rows = [] if not path.exists() else _store(path).history(
        problem=problem, verdict=verdict, verb=verb, candidate_sha=candidate_sha, limit=limit)
    if as_json:
        click.echo(json.dumps(jsonsafe(rows), indent=2))
        return
    console = Console()
    if not console.is_terminal:  # piped or redirected: whole rows (Rich would fit them into 80 columns)
        console = Console(width=PIPED_WIDTH)
    if not rows:
        console.print(f"no recorded results{' match' if path.exists() else ' yet'} (store: {path})")
        return
    table = Table(title=f"results store: {path}", title_justify="left", header_style="bold", box=None)
    for name in ("id", "when (UTC)", "verb", "verdict", "problem", "candidate", "device", "speedup"):
        table.add_column(name, no_wrap=name in ("id", "when (UTC)", "verdict"))
    table.add_column("findings", overflow="fold", min_width=12)  # fail and warn codes; `show ID` has them all
    for row in rows:
        name = (row["candidate_path"] or "?").rsplit("/", 1)[-1]
        speedups = ", ".join(f"{v:.3g}x {k}" for k, v in (row["speedups"] or {}).items() if v is not None)
        codes = [c for c in row["finding_codes"] if c not in catalog.CATALOG or catalog.spec(c).severity != "info"]
        table.add_row(str(row["id"]), row["created_at"][5:16].replace("T", " "), row["verb"],
                      Text(row["verdict"], style=report.VERDICT_STYLE[row["verdict"]]), _short(row["problem"]),
                      f"{name} {row['candidate_sha256'][:8]}", row["device_type"] or "?", speedups or "-",
                      ", ".join(codes) or "-")
    console.print(table)


def _short(problem: str | None) -> str:
    """`level2/51` for a built-in problem's long name; other names as they are."""
    if not problem:
        return "?"
    head, _, rest = problem.partition("_")
    return head if problem.startswith("level") and "/" in head and rest else problem


@click.command("show")
@click.argument("record_id", metavar="ID", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print the whole record (result JSON, source, options).")
@click.option("--source", "source_only", is_flag=True, help="Print only the candidate source as it was judged.")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None, help=_STORE_HELP)
def show_command(record_id: int, as_json: bool, source_only: bool, store_path: Path | None) -> None:
    """Show one recorded evaluation: the report as it was printed, or its JSON or source."""
    record = _store(store_path).get(record_id)
    if source_only:
        click.echo(record["source"], nl=not record["source"].endswith("\n"))
        return
    if as_json:
        click.echo(json.dumps(jsonsafe(record), indent=2))
        return
    console = Console()
    console.print(f"[dim]record {record['id']} · {record['created_at']} · {record['verb']} · candidate sha256 "
                  f"{record['candidate_sha256'][:12]}[/dim]")
    report.render(Result.from_json(record["result"]), console)


@click.command("mcp")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None, help=_STORE_HELP)
@click.option("--no-store", is_flag=True, help="Do not record the results of tool calls.")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None,
              help="Build/baseline cache (default $KERNELJUDGE_CACHE_DIR or ~/.cache/kerneljudge).")
def mcp_command(store_path: Path | None, no_store: bool, cache_dir: Path | None) -> None:
    """Serve the judge to an agent as an MCP server over stdio (tools: list_problems, show_problem,
    run_correctness, benchmark, submit). Configure the client with command `kerneljudge`, args ["mcp"]."""
    try:
        from kerneljudge.mcp_server import run_stdio
    except ImportError as exc:
        raise KernelJudgeError(f"the MCP server needs the mcp package ({exc}): pip install 'kerneljudge[mcp]'") \
            from exc
    options = Options(cache_dir=cache_dir or default_cache_dir(),
                      store_path=None if no_store else (store_path or default_store_path()))
    run_stdio(options)


@click.command("serve")
@click.option("--socket", "socket_path", type=click.Path(path_type=Path), default=None,
              help="Where to listen (default $KERNELJUDGE_SOCKET, else judge.sock in "
                   "$XDG_RUNTIME_DIR/kerneljudge or /tmp/kerneljudge-UID).")
@click.option("--spares", default=1, show_default=True, type=click.IntRange(min=1),
              help="Workers kept started ahead of the next evaluation.")
@click.option("--status", is_flag=True, help="Print the running server's status as JSON and exit (1: none).")
def serve_command(socket_path: Path | None, spares: int, status: bool) -> None:
    """Keep a worker started between calls: eval, check, bench and submit then skip the seconds a new
    worker spends importing torch and starting CUDA. They use a running server on their own (one
    evaluation at a time); stop it with Ctrl-C or SIGTERM. It runs with its own environment, so start it
    from the one you evaluate in (clients whose kerneljudge, Python, or environment for the workers
    (compilers, CUDA and library paths, visible GPUs, thread counts) differ evaluate themselves)."""
    import signal

    from kerneljudge import daemon

    path = (socket_path or default_server_socket()).expanduser()
    if status:
        state = daemon.server_status(path)
        click.echo(json.dumps(state, indent=2) if state else f"no judge server listens on {path}")
        raise SystemExit(0 if state else 1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # leave through serve()'s cleanup
    try:
        daemon.serve(path, spares=spares, log=lambda line: click.echo(line, err=True))
    except KeyboardInterrupt:
        click.echo("kerneljudge serve: stopped", err=True)
