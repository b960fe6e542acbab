"""Stage "report": rendering a Result for people (rich) and for agents (short plain text).

Rendering never computes anything new: every number shown is on the Result. The agent form puts
the actionable part first (blocking errors with compiler lines, then failing findings with their fix,
then the correctness line and the speedup) and is cut to a size bound.
"""

from __future__ import annotations

import math
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kerneljudge import suite
from kerneljudge.records import Finding, Result

SEVERITY_STYLE = {"error": "bold magenta", "fail": "bold red", "warn": "yellow", "info": "dim"}
VERDICT_STYLE = {"pass": "bold green", "fail": "bold red", "error": "bold magenta"}
SEVERITY_ORDER = {"error": 0, "fail": 1, "warn": 2, "info": 3}


def correctness_line(result: Result) -> str:
    """'correctness: (5 / 5) trials passed, max_abs_err=1.19e-07' as KernelBench users expect."""
    trials = result.trials
    if not trials:
        return "correctness: not checked"
    passed = sum(t.passed for t in trials)
    errors = [t.max_abs_err for t in trials if t.max_abs_err is not None]
    line = f"correctness: ({passed} / {len(trials)}) trials passed"
    if errors:
        worst = max(errors)
        line += f", max_abs_err={_num(worst)}"
        first = next(t for t in trials if t.atol is not None)
        line += f" (against {first.compared_to} reference, atol={first.atol:g} rtol={first.rtol:g})"
    return line


def timing_line(result: Result) -> str | None:
    timing = result.timing
    if not timing or not timing.get("candidate"):
        return None
    stats = timing["candidate"]
    method = f"{timing['method']}, " if timing.get("method") else ""
    sem = stats.get("sem_ms")  # none from a single run (a timing budget spent on a slow machine)
    spread = f", ±{100 * sem / stats['mean_ms']:.2g}% SEM" if isinstance(sem, (int, float)) and math.isfinite(sem) else ""
    line = (f"timing: {stats['median_ms']:.4g} ms median ({method}n={stats.get('n', '?')}{spread})"
            if stats.get("mean_ms") else "timing: n/a")
    for name, factor in (result.speedup or {}).items():
        base = (timing.get("baselines") or {}).get(name) or {}
        if factor is not None:
            line += f"; {factor:.3g}x vs {name} ({base.get('median_ms', float('nan')):.4g} ms)"
    if result.speedup and result.verdict != "pass":
        line += " (not a speedup: the candidate did not pass)"
    if timing.get("host_overhead_ms") is not None:
        line += f"; host overhead {timing['host_overhead_ms']:.3g} ms/call " + (
            "(the stream held while the host enqueued: not in the device time)" if timing.get("stream_hold_ms")
            else "(the calls wait for the device: not separated from the device time)")
    floor = timing.get("floor") or {}
    if floor.get("floor_ms"):
        line += f"; memory floor {floor['floor_ms']:.4g} ms ({floor['percent_of_light']:.0f}% of speed of light)"
    return line


def problem_file_line(problem: dict) -> str:
    """Which file was judged against; for a built-in problem, that it is one, and how it differs from
    KernelBench's file of the same name."""
    path = Path(problem["path"])
    name = suite.builtin_name(path) if path.is_file() else None
    if name is None:
        return str(path)
    note = suite.kernelbench_difference(name, path)
    return f"{path} (built-in suite" + (f"; {note}; --problems-root DIR runs KernelBench's" if note else "") + ")"


def ordered(findings) -> list[Finding]:
    return sorted(findings, key=lambda f: SEVERITY_ORDER[f.severity])


def worst_lines(result: Result) -> list[str]:
    """The first failing trial's worst elements: index, expected, got, |diff|, and how many miss."""
    trial = next((t for t in result.trials if t.worst), None)
    if trial is None:
        return []
    lines = [f"trial {trial.index}: {trial.mismatched} of {trial.elements} elements miss the tolerance; the worst:"]
    for e in trial.worst:
        where = (f"output {e['output']} " if "output" in e else "") + str(e["index"])
        lines.append(f"  {where:>20}  expected {e['expected']:<12.6g} got {e['got']:<12.6g} |diff| {e['abs_err']:.3g}")
    return lines


def header(result: Result) -> str:
    """'level2/51_... · wrong.py (pytorch) · cpu NAME', leaving out what was never loaded."""
    problem, candidate, device = result.problem, result.candidate, result.device
    parts = [problem["name"]] if problem.get("name") else []
    if candidate.get("path"):
        parts.append(f"{candidate['path'].rsplit('/', 1)[-1]} ({candidate['label']})")
    parts.append(" ".join(str(device[k]) for k in ("type", "name") if device.get(k)))
    return "  ·  ".join(p for p in parts if p)


def sandbox_line(result: Result) -> str | None:
    """The worker's sandbox layers in one line: active, and those the system refused (`kerneljudge doctor`
    says why)."""
    if not result.sandbox:
        return None
    off = result.sandbox.get("inactive") or {}
    return ("sandbox: " + " ".join(result.sandbox.get("active") or ["none"])
            + (f" (off: {', '.join(off)})" if off else ""))


def render(result: Result, console: Console) -> None:
    """The human report."""
    head = Text()
    head.append("kerneljudge ", style="bold")
    head.append(header(result))
    console.print(head)
    if result.problem.get("path"):
        console.print(Text(f"problem file: {problem_file_line(result.problem)}", style="dim"))
    verdict = Text("verdict: ")
    verdict.append(result.verdict.upper(), style=VERDICT_STYLE[result.verdict])
    verdict.append(f"   protocol: {result.protocol}")
    console.print(verdict)
    console.print(correctness_line(result))
    if result.build:
        build = result.build
        what = {"hit": "cache hit", "miss": "compiled (cache miss)", "none": "nothing to compile"}[build.cache]
        console.print(f"build: {what}, {build.build_ms / 1e3:.2f} s")
    line = timing_line(result)
    if line:
        console.print(line)
    if result.findings:
        table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
        table.add_column("severity")
        table.add_column("code")
        table.add_column("what happened, and the fix", overflow="fold")
        for f in ordered(result.findings):
            table.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), f.code,
                          Text(f.message) + Text(f"\nfix: {f.fix}", style="dim") if f.severity != "info" else Text(f.message))
        console.print(table)
    for line in worst_lines(result):
        console.print(Text(line))
    if result.worker_output_tail and result.verdict == "error":
        console.print("[dim]worker output (tail):[/dim]")
        console.print(Text(result.worker_output_tail[-1500:], style="dim"))
    if memory_line(result.memory):
        console.print(f"[dim]{memory_line(result.memory)}[/dim]")
    line = sandbox_line(result)
    if line:
        console.print(Text(line, style="dim"))
    if result.stage_ms:
        console.print("[dim]stages: " + " · ".join(f"{k} {_ms(v)}" for k, v in result.stage_ms.items()) + "[/dim]")
    if result.reproduce and result.verdict != "pass":
        console.print(Text(f"reproduce: {result.reproduce}"))
    elif result.seed is not None:
        console.print(f"[dim]seed: {result.seed}[/dim]")


def memory_line(memory: dict) -> str:
    """'memory: judge peak 1.2 GB (3.1x the problem's 0.4 GB; cuda max_memory_allocated) of 143.8 GB;
    float64 reference in 4 chunks' (empty without a peak)."""
    if not memory.get("judge_peak_bytes"):
        return ""
    footprint = (memory.get("footprint") or {}).get("total_bytes")
    ratio = memory.get("peak_over_footprint")
    plan = memory.get("reference") or {}
    how = {"full": "", "chunked": f"; float64 reference in {plan.get('chunks')} chunks",
           "native": "; no float64 reference"}.get(plan.get("float64"), "")
    if footprint and ratio is not None and footprint >= SMALL_FOOTPRINT_BYTES:
        against = f" ({ratio:.3g}x the problem's {_size(footprint)}; {memory.get('judge_peak_measured')})"
    elif footprint:  # a tiny problem: the processes' own working memory is all the peak says
        workspaces = memory.get("cublas_workspaces_bytes")
        against = (f" (the problem's {_size(footprint)}: the peak is the processes' own working memory"
                   + (f", {_size(workspaces)} of it cuBLAS workspaces" if workspaces else "") + ")")
    else:
        against = ""
    return (f"memory: judge peak {_size(memory['judge_peak_bytes'])}" + against
            + (f" of {_size(memory['device_total_bytes'])}" if memory.get("device_total_bytes") else "") + how)


#: Below this footprint the peak-to-footprint ratio only measures torch's own memory, so it is not shown.
SMALL_FOOTPRINT_BYTES = 64 * 2**20


def _size(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.3g} GB" if n_bytes >= 1e9 else f"{n_bytes / 1e6:.3g} MB"


def brief(result: Result, max_chars: int = 2000) -> str:
    """Plain text for agents: the verdict and what to do first, within max_chars."""
    lines = [f"verdict: {result.verdict}"]
    for f in ordered(result.findings):
        if f.severity == "info":
            continue
        lines.append(f"[{f.severity}] {f.code}: {f.message}")
        if f.severity in ("error", "fail"):
            lines.append(f"  fix: {f.fix}")
    lines.append(correctness_line(result))
    line = timing_line(result)
    if line:
        lines.append(line)
    if result.reproduce and result.verdict != "pass":
        lines.append(f"reproduce: {result.reproduce}")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 14] + "\n[... clipped]"


def _num(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.3g}"


def _ms(value: float) -> str:
    return f"{value / 1e3:.2f} s" if value >= 1000 else f"{value:.0f} ms"
