"""The run's journal: `kerneljudge_results.jsonl` in the output folder, one JSON line per finished job,
written (and flushed to disk) as each job ends. It is what makes a rerun resume: a job whose resume key
has a line is done. A SIGKILL loses at most the jobs in flight and a half-written last line, which
the next open cuts off. The first line names the run (its id groups the run's records in the store),
so a resumed run keeps its id.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

import kerneljudge

FILE_NAME = "kerneljudge_results.jsonl"


class Journal:
    """`done`: resume key -> the job's latest line. With `force`, earlier lines count as not done (the new
    ones, appended, supersede them)."""

    def __init__(self, folder: Path, *, force: bool = False):
        self.path = Path(folder) / FILE_NAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.lines: list[dict[str, Any]] = []
        self.run_id: str | None = None
        if self.path.exists():
            self._read()
        if self.run_id is None:
            self.run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
            self._write({"run_id": self.run_id, "kerneljudge": kerneljudge.__version__})
        self.done = {} if force else {line["key"]: line for line in self.lines}

    def _read(self) -> None:
        data = self.path.read_bytes()
        complete = data[:data.rfind(b"\n") + 1]
        if len(complete) < len(data):  # a line cut by a kill: gone, its job runs again
            with open(self.path, "r+b") as out:
                out.truncate(len(complete))
        for raw in complete.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and "run_id" in line and self.run_id is None:
                self.run_id = str(line["run_id"])
            elif isinstance(line, dict) and isinstance(line.get("key"), str) and isinstance(line.get("id"), str):
                self.lines.append(line)

    def _write(self, line: dict[str, Any]) -> None:
        with open(self.path, "a") as out:
            out.write(json.dumps(line, allow_nan=False) + "\n")
            out.flush()
            os.fsync(out.fileno())

    def append(self, line: dict[str, Any]) -> None:
        self._write(line)
        self.lines.append(line)
        self.done[line["key"]] = line

    def latest(self, ids: set[str] | None = None) -> list[dict[str, Any]]:
        """The latest line of each job (of `ids` when given), in the order first seen."""
        latest: dict[str, dict[str, Any]] = {}
        for line in self.lines:
            if ids is None or line["id"] in ids:
                latest[line["id"]] = line
        return list(latest.values())
