"""`kerneljudge report`: the metrics of a run for people (terminal, HTML) and programs (JSON, CSV), run
comparisons, and KernelBench results brought in. Named in cli.py's LAZY_COMMANDS.

`kerneljudge report [RUN...]` is the report itself (the `run` subcommand, taken when the first word is no
subcommand's name); `report list` lists the runs; `report import-kernelbench` records a KernelBench run.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table as RichTable

from kerneljudge.cli_agents import PIPED_WIDTH, _STORE_HELP, _store
from kerneljudge.records import jsonsafe
from kerneljudge.reports import kernelbench, load, metrics
from kerneljudge.reports.tables import Table, compare_tables, display, report_tables

#: The p grid of the HTML page's fast_p curve (KernelBench's thresholds are on it).
CURVE_P = tuple(round(0.05 * i, 2) for i in range(61))
_TERMINAL_SKIPS = ("samples",)  # too long for a terminal; in --json, --csv and --html


class _ReportGroup(click.Group):
    """A group whose default subcommand is `run`: `report`, `report RUN` and `report --html F` all report."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("report", cls=_ReportGroup)
def report_command() -> None:
    """Metrics of a run (the newest by default): fast_p, geometric-mean speedup and pass@k with bootstrap
    intervals, % of speed of light, failures by finding; `--html`, `--json`, `--csv`, `--compare A B`.
    `kerneljudge report RUN...` is `kerneljudge report run RUN...`."""


@report_command.command("run")
@click.argument("runs", nargs=-1, metavar="[RUN]...")
@click.option("--baseline", type=click.Choice(load.BASELINES), default="eager", show_default=True,
              help="Speedups against eager PyTorch or torch.compile.")
@click.option("--compare", nargs=2, metavar="RUN_A RUN_B", default=None,
              help="Per-problem deltas, new passes and regressions of RUN_B against RUN_A, with paired intervals.")
@click.option("--disagreements", is_flag=True,
              help="For a run imported from KernelBench: where its verdicts and the strict judge's differ, and why.")
@click.option("--html", "html_path", type=click.Path(path_type=Path), default=None,
              help="Also write one self-contained HTML page (plots and tables; needs kerneljudge[report]).")
@click.option("--json", "as_json", is_flag=True, help="Print every table as one JSON object.")
@click.option("--csv", "csv_dir", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write every table as DIR/<table>.csv.")
@click.option("--resamples", default=metrics.Bootstrap.resamples, show_default=True, type=click.IntRange(min=0),
              help="Bootstrap resamples of the problems (0: no intervals).")
@click.option("--seed", default=metrics.Bootstrap.seed, show_default=True, type=int, help="Bootstrap seed.")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None, help=_STORE_HELP)
def run_command(runs: tuple[str, ...], baseline: str, compare: tuple[str, str] | None, disagreements: bool,
                html_path: Path | None, as_json: bool, csv_dir: Path | None, resamples: int, seed: int,
                store_path: Path | None) -> None:
    """Report on RUN (several: their records together; none: the newest run)."""
    store = _store(store_path)
    bootstrap = metrics.Bootstrap(resamples=resamples, seed=seed)
    runs = tuple(compare[1:]) if compare else tuple(load.resolve_runs(store, runs))
    samples = load.load_samples(store, runs, baseline)
    tables = report_tables(samples, baseline, bootstrap)
    if compare:
        tables = compare_tables(load.load_samples(store, compare[:1], baseline), samples, compare, bootstrap) + tables
    if disagreements:
        tables = [t for run in runs for t in kernelbench.disagreement_tables(store, run, load.load_records(store, [run]))]\
            + tables
    title = f"kerneljudge report: {' vs '.join(compare) if compare else ', '.join(runs)}"
    if html_path:
        from kerneljudge.reports import html

        curve = metrics.fast_p_curve(list(metrics.by_problem(samples).values()), CURVE_P, bootstrap)
        subtitle = (f"{len(samples)} samples; speedups against {baseline}; {bootstrap.confidence:.0%} percentile "
                    f"bootstrap over problems ({bootstrap.resamples} resamples, seed {bootstrap.seed}); store {store.path}")
        html_path.write_text(html.render(title, subtitle, tables, curve, baseline))
    if csv_dir:
        write_csv(csv_dir, tables)
    if as_json:
        click.echo(json.dumps(jsonsafe({"runs": list(runs), "compare": list(compare or ()), "baseline": baseline,
                                        "bootstrap": vars(bootstrap), "tables": {t.name: t.to_json() for t in tables}}),
                              indent=2))
        return
    print_tables(title, [t for t in tables if t.name not in _TERMINAL_SKIPS])
    for path in (html_path, csv_dir):
        if path:
            click.echo(f"wrote {path}", err=True)


def write_csv(folder: Path, tables: list[Table]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for table in tables:
        with open(folder / f"{table.name}.csv", "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=table.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(jsonsafe(table.rows))


def print_tables(title: str, tables: list[Table]) -> None:
    console = Console()
    if not console.is_terminal:
        console = Console(width=PIPED_WIDTH)
    console.print(f"[bold]{title}[/bold]")
    for table in tables:
        headers, rows = display(table)
        shown = RichTable(title=table.title, title_justify="left", header_style="bold", box=None)
        for header in headers:
            shown.add_column(header, overflow="fold")
        for row in rows:
            shown.add_row(*row)
        console.print(shown)


@report_command.command("list")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1), help="At most this many runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as a JSON object.")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None, help=_STORE_HELP)
def list_command(limit: int, as_json: bool, store_path: Path | None) -> None:
    """The runs in the store, newest first."""
    rows = _store(store_path).runs(limit=limit)
    table = Table("runs", "Runs in the results store, newest first",
                  ("run_id", "started_at", "finished_at", "records", "passed"), rows)
    if as_json:
        click.echo(json.dumps(jsonsafe(table.to_json()), indent=2))
        return
    print_tables("kerneljudge report list", [table])


@report_command.command("import-kernelbench")
@click.argument("eval_results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--run-folder", required=True, type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="KernelBench's run folder with level_L_problem_P_sample_S_kernel.py files.")
@click.option("--run-id", default=None, help="The run id to record (default: kernelbench-<run folder name>).")
@click.option("--problems", "problems_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="KernelBench's problem folder (levelN/*.py), to name the problems.")
@click.option("--baseline-times", "baseline_times", multiple=True, metavar="NAME=FILE",
              help="KernelBench baseline times (baseline_time_torch*.json) as eager=FILE or compile=FILE.")
@click.option("--store", "store_path", type=click.Path(path_type=Path), default=None, help=_STORE_HELP)
def import_command(eval_results: Path, run_folder: Path, run_id: str | None, problems_dir: Path | None,
                   baseline_times: tuple[str, ...], store_path: Path | None) -> None:
    """Record a KernelBench eval_results.json (and its run folder's kernels) as a run; then
    `kerneljudge report RUN --disagreements` sets its verdicts beside the strict ones."""
    files = {}
    for item in baseline_times:
        name, sep, path = item.partition("=")
        if not sep or name not in load.BASELINES:
            raise click.BadParameter(f"give NAME=FILE with NAME in {', '.join(load.BASELINES)}",
                                     param_hint="--baseline-times")
        files[name] = Path(path)
    run_id = run_id or f"kernelbench-{run_folder.resolve().name}"
    ids = kernelbench.import_run(_store(store_path), eval_results, run_folder, run_id=run_id,
                                 problems_dir=problems_dir, baseline_files=files)
    click.echo(f"imported {len(ids)} samples as run {run_id} (records {ids[0]}-{ids[-1]})" if ids
               else f"{eval_results} holds no sample")
