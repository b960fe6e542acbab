"""A report as one self-contained HTML file: the plots as inline SVG drawn by matplotlib, then the tables.

Nothing is fetched when the page is viewed (no script, no font, no stylesheet from elsewhere; matplotlib
writes text as paths), so the file can be mailed or attached to a paper's artifact. The plots sit in a
grid of fixed-size cells (PLOT_WIDTH_PX x PLOT_HEIGHT_PX, two per row under a header of HEADER_HEIGHT_PX)
so the page reads the same at 1280 px wide and a test can find each plot on a screenshot.

matplotlib is an optional extra (`pip install 'kerneljudge[report]'`): the terminal, JSON and CSV reports
do not need it.
"""

from __future__ import annotations

import html
import io
import math
from typing import Any, Callable, Sequence

from kerneljudge.errors import KernelJudgeError
from kerneljudge.reports.metrics import FAST_P_THRESHOLDS, Estimate
from kerneljudge.reports.tables import Table, display

HEADER_HEIGHT_PX = 90
PLOT_WIDTH_PX, PLOT_HEIGHT_PX, GAP_PX = 610, 380, 20
_DPI = 100
LABELLED_PROBLEMS = 40  # the speed-of-light plot names each problem up to this many
_LEVEL_COLOURS = ("#4a9c5d", "#3b7dd8", "#e08a2c", "#8e5cc2")

_STYLE = f"""
body {{ margin: 0; font-family: sans-serif; color: #222; background: #fff; }}
header {{ height: {HEADER_HEIGHT_PX}px; overflow: hidden; box-sizing: border-box; padding: 12px {GAP_PX}px; }}
header h1 {{ font-size: 22px; margin: 0 0 6px 0; }} header p {{ margin: 0; font-size: 13px; color: #555; }}
.plots {{ display: grid; grid-template-columns: repeat(2, {PLOT_WIDTH_PX}px); gap: {GAP_PX}px;
          padding: 0 {GAP_PX}px; }}
.plot {{ width: {PLOT_WIDTH_PX}px; height: {PLOT_HEIGHT_PX}px; overflow: hidden; }}
.plot svg {{ width: {PLOT_WIDTH_PX}px; height: {PLOT_HEIGHT_PX}px; display: block; }}
section {{ padding: 8px {GAP_PX}px; max-width: 1240px; overflow-x: auto; }}
table {{ border-collapse: collapse; font-size: 13px; }}
th, td {{ border-bottom: 1px solid #ddd; padding: 3px 8px; text-align: left; white-space: nowrap; }}
th {{ background: #f3f3f3; }} h2 {{ font-size: 16px; margin: 14px 0 6px 0; }}
"""


def _plot(title: str, data: Sequence, draw: Callable[[Any], None], why_empty: str) -> str:
    """One plot as SVG text: `draw(axes)` when there is `data`, else `why_empty` in the middle."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise KernelJudgeError(f"--html needs matplotlib ({exc}): pip install 'kerneljudge[report]'") from exc
    figure = Figure(figsize=(PLOT_WIDTH_PX / _DPI, PLOT_HEIGHT_PX / _DPI), dpi=_DPI, layout="constrained")
    axes = figure.add_subplot()
    axes.set_title(title)
    if data:
        draw(axes)
    else:
        axes.text(0.5, 0.5, why_empty, ha="center", va="center", transform=axes.transAxes, fontsize=12, color="#666")
        axes.set_xticks([])
        axes.set_yticks([])
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg")
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _bounds(estimates: Sequence[Estimate]) -> tuple[list[float], list[float], list[float]]:
    """Values, lows and highs for plotting (0 for no value; the value where there is no interval)."""
    values = [e.value or 0.0 for e in estimates]
    lows = [e.low if e.low is not None else v for e, v in zip(estimates, values)]
    highs = [e.high if e.high is not None else v for e, v in zip(estimates, values)]
    return values, lows, highs


def speedup_plot(speedups: Sequence[float], baseline: str) -> str:
    """Histogram of the correct samples' speedups on a log axis, with the baseline's 1x marked."""
    def draw(axes) -> None:
        low = math.floor(min(math.log10(min(speedups)), -0.5) * 4) / 4
        high = math.ceil(max(math.log10(max(speedups)), 0.5) * 4) / 4
        axes.hist(speedups, bins=[10 ** (low + i * (high - low) / 30) for i in range(31)], color="#3b7dd8",
                  edgecolor="white")
        axes.set_xscale("log")
        axes.axvline(1.0, color="#c33", linestyle="--", label="1x (as fast as the baseline)")
        axes.set_xlabel("speedup (x)")
        axes.set_ylabel("samples")
        axes.legend(loc="upper right", fontsize=8)

    return _plot(f"Speedup of correct samples against {baseline} (log scale)", speedups, draw,
                 "no correct sample with a speedup")


def fast_p_plot(curve: dict[float, Estimate], baseline: str) -> str:
    """fast_p against p, with its bootstrap band and KernelBench's thresholds marked."""
    def draw(axes) -> None:
        ps = sorted(curve)
        values, lows, highs = _bounds([curve[p] for p in ps])
        axes.fill_between(ps, lows, highs, color="#3b7dd8", alpha=0.25, label="95% bootstrap band", step="post")
        axes.step(ps, values, where="post", color="#1f4e99", label="fast_p")
        for p in FAST_P_THRESHOLDS[1:]:
            axes.axvline(p, color="#999", linewidth=0.6, linestyle=":")
        axes.set_ylim(0, 1.02)
        axes.set_xlabel(f"p (speedup threshold against {baseline})")
        axes.set_ylabel("share of all problems")
        axes.legend(loc="upper right", fontsize=8)

    return _plot("fast_p: correct and more than p times faster", curve, draw, "no problem")


def light_plot(problems: Table) -> str:
    """% of speed of light (roofline floor over the time) of each problem's fastest correct sample."""
    rows = [r for r in problems.rows if r["percent_of_light"] is not None]
    named = len(rows) <= LABELLED_PROBLEMS  # more bars than names can be read: sorted, one colour per level

    def draw(axes) -> None:
        shown = rows if named else sorted(rows, key=lambda r: -r["percent_of_light"])
        levels = sorted({r["level"] for r in shown})
        for index, level in enumerate(levels):
            at = [i for i, r in enumerate(shown) if r["level"] == level]
            axes.bar(at, [shown[i]["percent_of_light"] for i in at], color=_LEVEL_COLOURS[index % len(_LEVEL_COLOURS)],
                     label=f"level {level}")
        if named:
            axes.set_xticks(range(len(shown)), [r["problem"] for r in shown], rotation=60, ha="right", fontsize=7)
        else:
            axes.set_xticks([])
            axes.set_xlabel(f"{len(shown)} problems, sorted")
        axes.axhline(100, color="#c33", linestyle="--", linewidth=0.8)
        axes.legend(loc="upper right", fontsize=8)
        axes.set_ylabel("% of speed of light")

    return _plot("% of speed of light per problem (memory floor / time)", rows, draw,
                 "no correct sample carries a roofline floor")


def level_plot(levels: Table) -> str:
    """Correctness rate and fast_1 per scope, with their intervals."""
    rows, width = levels.rows, 0.38

    def draw(axes) -> None:
        for offset, column, color in ((-width / 2, "correct_rate", "#3b7dd8"), (width / 2, "fast_1", "#e08a2c")):
            values, lows, highs = _bounds([Estimate(r[column], r[f"{column}_low"], r[f"{column}_high"]) for r in rows])
            axes.bar([i + offset for i in range(len(rows))], values, width, capsize=3, color=color, label=column,
                     yerr=[[v - lo for v, lo in zip(values, lows)], [hi - v for v, hi in zip(values, highs)]])
        axes.set_xticks(range(len(rows)), [r["scope"] for r in rows])
        axes.set_ylim(0, 1.05)
        axes.set_ylabel("share of problems")
        axes.legend(loc="upper right", fontsize=8)

    return _plot("Per level: correctness rate and fast_1 (95% intervals)", rows, draw, "no problem")


def failure_plot(failures: Table) -> str:
    """Failed samples by finding code (the 15 most frequent)."""
    rows = failures.rows[:15]

    def draw(axes) -> None:
        axes.barh(range(len(rows)), [r["samples"] for r in rows], color="#c2553f")
        axes.set_yticks(range(len(rows)), [r["code"] for r in rows], fontsize=8)
        axes.invert_yaxis()
        axes.set_xlabel("samples")

    return _plot("Failed samples by finding", rows, draw, "no failed sample")


def table_html(table: Table) -> str:
    headers, rows = display(table)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f"<section><h2>{html.escape(table.title)}</h2>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></section>")


def render(title: str, subtitle: str, tables: Sequence[Table], curve: dict[float, Estimate], baseline: str) -> str:
    """The whole page: five plots (speedups, fast_p, speed of light, levels, failures), then every table."""
    by_name = {t.name: t for t in tables}
    speedups = [r["speedup"] for r in by_name["samples"].rows if r["verdict"] == "pass" and r["speedup"]]
    plots = [speedup_plot(speedups, baseline), fast_p_plot(curve, baseline), light_plot(by_name["problems"]),
             level_plot(by_name["levels"]), failure_plot(by_name["failures"])]
    cells = "".join(f'<div class="plot">{svg}</div>' for svg in plots)
    return ("<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<header><h1>{html.escape(title)}</h1><p>{html.escape(subtitle)}</p></header>"
            f'<div class="plots">{cells}</div>' + "".join(table_html(t) for t in tables) + "</body></html>")
