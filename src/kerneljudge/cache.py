"""The judge's cache folder: builds, timed baselines, measured bandwidths and problem lints.

One folder (Options.cache_dir: --cache-dir, else $KERNELJUDGE_CACHE_DIR, else ~/.cache/kerneljudge):

    builds/<key>/<name>/  one extension per folder, keyed on what load_inline/load compiles, written by the judge's
                       builder alone (extensions.py)
    staging/<random>/  a build in progress (left behind where a build's folder could not be removed)
    triton/            Triton's kernel cache, shared by earlier versions (cleared with the rest): each worker now
                       has its own, in its folder (isolation.py says why)
    baselines/<key>.json  the reference's torch.compile timing per problem, sizes, device, versions, stop rule
                       (eager is timed in every run, and a cached compile time must stay plausible beside it)
    bandwidth/<key>.json  measured copy bandwidth per device and versions
    problemlint/<key>.json  a problem's lint per content, sizes and device type (problemlint/judge.py)

JSON entries are written atomically (temp file + rename), so a crash never leaves half an entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

SECTIONS = ("builds", "staging", "triton", "baselines", "bandwidth", "problemlint")


def key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def load(cache_dir: Path, section: str, entry: str) -> dict[str, Any] | None:
    path = cache_dir / section / f"{entry}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def save(cache_dir: Path, section: str, entry: str, data: dict[str, Any]) -> None:
    folder = cache_dir / section
    folder.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(data, out)
    os.replace(temp, folder / f"{entry}.json")


def clear_entry(cache_dir: Path, section: str, entry: str) -> None:
    (cache_dir / section / f"{entry}.json").unlink(missing_ok=True)


def info(cache_dir: Path) -> dict[str, Any]:
    """Entries and bytes per section."""
    sections = {}
    for section in SECTIONS:
        folder = cache_dir / section
        files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
        entries = len([p for p in folder.iterdir()]) if folder.is_dir() else 0
        sections[section] = {"entries": entries, "bytes": sum(p.stat().st_size for p in files)}
    return {"path": str(cache_dir), "sections": sections}


def clear(cache_dir: Path, section: str | None = None) -> list[str]:
    """Remove one section (or all); returns what was removed."""
    removed = []
    for name in ([section] if section else SECTIONS):
        folder = cache_dir / name
        if folder.is_dir():
            shutil.rmtree(folder)
            removed.append(name)
    return removed
