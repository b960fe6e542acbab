"""`kerneljudge run SOURCE`: judge a batch (a KernelBench run folder, a folder of candidates for one
problem, or a JSONL manifest) with builds on every CPU and one judging lane per device (batch/).

Writes into the output folder (default: SOURCE's folder): `kerneljudge_results.jsonl` (one line per
candidate; the journal a rerun resumes from), `eval_results.json` (KernelBench's layout) and
`kerneljudge_results.csv`; records every result in the store under the run's id. Exit codes as the
other verbs: 0 all passed, 1 some failed, 2 some could not be judged; 130/143 interrupted (what
finished is kept and exported; a rerun does the rest).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path

import click

from kerneljudge.cli import (CHECKING_OPTIONS, COMMON_OPTIONS, TIMING_OPTIONS, Interrupted, _signals_interrupt,
                             build_options, with_options)

KERNELBENCH_NEARBY = Path("../shared/kernelbench")  # where a KernelBench checkout sits beside this project


@click.command("run")
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--problem", default=None, help="The problem a folder of candidates solves (path or name).")
@click.option("--kernelbench", type=click.Path(exists=True, file_okay=False, path_type=Path), default=None,
              help="KernelBench checkout for a run folder's problems (default: --problems-root, else "
                   "../shared/kernelbench when present, else the built-in suite).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Output folder (default: SOURCE's folder).")
@click.option("--gpus", "lanes", type=click.IntRange(min=1), default=None,
              help="Judging lanes: GPUs (default: every visible one); on a CPU run, CPU lanes (default 1, "
                   "timing serialised).")
@click.option("--lanes-per-gpu", type=click.IntRange(min=1), default=1, show_default=True,
              help="Lanes sharing each GPU: their checks overlap, a timing runs alone.")
@click.option("--build-jobs", type=click.IntRange(min=1), default=None, help="Builds at once (default: all cores).")
@click.option("--force", is_flag=True, help="Judge again what an earlier run of this batch finished.")
@click.option("--backend", "backend_name", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where to build and judge: this machine, or a Ray cluster (one judge per GPU; docs/ray.md).")
@click.option("--address", default="auto", show_default=True,
              help="--backend ray: the cluster's address (auto: the running one).")
@click.option("--no-timing", is_flag=True, help="Skip timing.")
@with_options(COMMON_OPTIONS, CHECKING_OPTIONS, TIMING_OPTIONS)
def run_command(source: Path, problem: str | None, kernelbench: Path | None, out: Path | None, lanes: int | None,
                lanes_per_gpu: int, build_jobs: int | None, force: bool, backend_name: str, address: str,
                no_timing: bool, **kw) -> None:
    """Judge a batch of candidates: a KernelBench run folder (level_L_problem_P_sample_S_kernel.py), a
    folder of candidates for --problem, or a JSONL manifest of {problem, solution, id, options}.
    Running it again resumes; --json streams one JSON line per candidate and a summary line."""
    from kerneljudge.batch import display, export
    from kerneljudge.batch.discover import Setting, discover
    from kerneljudge.batch.journal import Journal
    from kerneljudge.batch.keys import hardware
    from kerneljudge.batch.local import LocalBackend, local_devices
    from kerneljudge.batch.runner import BatchRun
    from kerneljudge.pipeline import resolve_device

    options = build_options(kw, timing=not no_timing).validate()
    device = resolve_device(options.device)
    root = kernelbench or kw["problems_root"] or options.problems_root or (
        KERNELBENCH_NEARBY.resolve() if KERNELBENCH_NEARBY.is_dir() else None)
    if backend_name == "ray":
        from kerneljudge.cluster.backend import RayBackend

        backend = RayBackend(options, address=address, judges=lanes, build_slots=build_jobs)
        device_type, hardware_name = backend.device_type, backend.hardware()
    else:
        backend = LocalBackend(local_devices(device, lanes, lanes_per_gpu), options,
                               build_slots=build_jobs or os.cpu_count() or 1)
        device_type = device.split(":")[0]
        hardware_name = hardware(device_type)
    setting = Setting(options.replace(problems_root=root), device_type, hardware_name, kernelbench=root)
    jobs = discover(source, setting, problem)
    folder = out or (source if source.is_dir() else source.parent)
    journal = Journal(folder, force=force)
    as_json = kw["as_json"]
    shown = not as_json and sys.stderr.isatty()
    panel = display.LivePanel(f"run {journal.run_id}") if shown else None
    batch = BatchRun(jobs, backend, journal=journal, store_path=options.store_path, on_change=panel or (lambda s: None))
    if as_json:
        for line in batch.skipped:
            _stream({**export.public(line), "skipped": True})
    interrupted = None
    try:
        with _signals_interrupt(), panel or nullcontext():
            for _, line in batch:
                if as_json:
                    _stream(export.public(line))
                elif panel is not None:
                    panel.finished(line)
    except Interrupted as exc:
        interrupted = exc
    finally:
        backend.close()
    lines = batch.lines()
    written = export.write(folder, lines)
    summary = batch.summary(interrupted=interrupted is not None)
    if as_json:
        _stream({**summary, "run_id": batch.run_id, "files": [str(p) for p in written]})
    elif sys.stdout.isatty() or interrupted is None:
        click.echo(f"{summary['finished']}/{summary['total']} judged ({summary['skipped']} from an earlier run): "
                   f"pass {summary['pass']}, fail {summary['fail']}, error {summary['error']} in "
                   f"{summary['wall_s']:.1f} s; run {batch.run_id}; results in {folder}{_gates(summary)}")
    if interrupted is not None:
        click.echo(f"kerneljudge: interrupted ({interrupted}); {summary['finished']} of {summary['total']} kept, "
                   "run the same command again to resume", err=True)
        sys.exit(128 + interrupted.signum)
    sys.exit(0 if summary["error"] == summary["fail"] == 0 else 1 if summary["error"] == 0 else 2)


def _stream(data: dict) -> None:
    """One JSON line on stdout, flushed at once (a reader sees each candidate as it ends)."""
    click.echo(json.dumps(data))
    sys.stdout.flush()


def _gates(summary: dict) -> str:
    """Each shared device's time alone for a timing and waiting for one (the other lanes stall then), where it
    timed: when they take most of it, more lanes per GPU buy little (README: batch throughput)."""
    parts = []
    for device, spent in summary["device_seconds"].items():
        total = sum(spent.values())
        if spent.get("timing_s") and total > 0:
            parts.append(f"{device}: timing {100 * spent['timing_s'] / total:.0f}%, waiting for a timing "
                         f"{100 * spent['draining_s'] / total:.0f}%")
    return f"; {'; '.join(parts)}" if parts else ""
