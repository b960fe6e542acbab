"""`kerneljudge report --html`: one self-contained page, screenshotted by a real headless Chromium at
1280 px; each plot cell must hold a drawing (pixel variance), and the empty cell beside the last plot
must not (so the measure tells a blank area from a plot)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from kerneljudge.cli_report import report_command
from kerneljudge.reports import html

from report_fixture import fixture_store

pytestmark = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                reason="--html needs the report extra: pip install 'kerneljudge[report]'")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLOTS = 5
WIDTH_PX, HEIGHT_PX = 1280, 1400


def cell(index: int) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of plot cell `index` in the page's grid (two per row under the header)."""
    x0 = html.GAP_PX + (index % 2) * (html.PLOT_WIDTH_PX + html.GAP_PX)
    y0 = html.HEADER_HEIGHT_PX + (index // 2) * (html.PLOT_HEIGHT_PX + html.GAP_PX)
    return x0, y0, x0 + html.PLOT_WIDTH_PX, y0 + html.PLOT_HEIGHT_PX


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("html")
    store = fixture_store(folder / "results.sqlite")
    done = CliRunner().invoke(report_command, ["r1", "--store", str(store.path), "--html", str(folder / "r1.html"),
                                               "--resamples", "300"])
    assert done.exit_code == 0, done.output
    return str(folder / "r1.html")


def test_the_page_is_self_contained(page):
    text = open(page).read()
    assert text.count("<svg") == PLOTS
    # only references inside the page (matplotlib's clip paths and glyphs: url(#id), href="#id")
    assert not re.search(r"""(src|href)=["'](?!#)|<script|@import|url\((?!#)""", text)
    assert re.search(r"""href=["']#""", text)
    for title in ("fast_p", "By problem", "Failed samples by finding", "By level"):
        assert title in text


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium: `apt-get install -y chromium` (.ci/run installs it as "
                                              "root where apt-get is available)")
def test_plots_are_drawn_in_a_headless_browser(page, tmp_path):
    shot = tmp_path / "page.png"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--force-device-scale-factor=1", f"--user-data-dir={tmp_path / 'profile'}",
               f"--window-size={WIDTH_PX},{HEIGHT_PX}", f"--screenshot={shot}", f"file://{page}"]
    subprocess.run(command, capture_output=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    assert shot.exists(), "chromium wrote no screenshot"
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    assert pixels.shape[:2] == (HEIGHT_PX, WIDTH_PX)
    for index in range(PLOTS + 1):
        x0, y0, x1, y1 = cell(index)
        region = pixels[y0:y1, x0:x1]
        spread = float(region.std())
        if index < PLOTS:
            assert spread > 0.05, f"plot {index} at {(x0, y0)} looks blank (pixel std {spread:.4f})"
            assert (region.max(axis=-1) - region.min(axis=-1)).max() > 0.3, f"plot {index} has no coloured mark"
        else:
            assert spread < 0.01, f"the empty cell {index} is not blank (std {spread:.4f}): the layout moved"


def test_a_run_with_nothing_to_plot_still_gets_every_plot_cell(tmp_path):
    from kerneljudge.store import Store

    from report_fixture import fill

    store = Store(tmp_path / "results.sqlite")
    fill(store, "failed", [("level1/3", "fail", None, {"codes": ("wrong-output",)})])
    done = CliRunner().invoke(report_command, ["--store", str(store.path), "--html", str(tmp_path / "f.html")])
    assert done.exit_code == 0, done.output
    text = (tmp_path / "f.html").read_text()
    assert text.count("<svg") == PLOTS and "wrong-output" in text
