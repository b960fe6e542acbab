"""Shared fixtures: fast CPU options, the candidates folder, and a CLI runner.

Every test runs real evaluations (a worker process per candidate). The build cache is shared by the
whole session so a C++ extension is compiled once per run of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kerneljudge.options import Options

CANDIDATES = Path(__file__).parent / "candidates"
SEED = "level2/51"  # the seed problem, run with its `small` preset on the CPU


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kj-cache")


@pytest.fixture
def fast(cache_dir) -> Options:
    """CPU, no timing, nothing recorded: the options most tests start from."""
    return Options(device="cpu", store_path=None, cache_dir=cache_dir).replace(timing={"enabled": False})


@pytest.fixture
def kj(cache_dir, tmp_path):
    """Run the CLI in a subprocess: kj("eval", ...) -> (exit code, stdout, stderr)."""

    def run(*args: str, timeout: float = 300, env: dict | None = None):
        environment = {**os.environ, "KERNELJUDGE_CACHE_DIR": str(cache_dir),
                       "KERNELJUDGE_STORE": str(tmp_path / "results.sqlite"),
                       "KERNELJUDGE_SOCKET": str(tmp_path / "no-server" / "judge.sock"), **(env or {})}
        done = subprocess.run([sys.executable, "-m", "kerneljudge", *args], capture_output=True, text=True,
                              timeout=timeout, env=environment)
        return done.returncode, done.stdout, done.stderr

    return run


def parse_json(stdout: str) -> dict:
    """--json output must be exactly one JSON object."""
    return json.loads(stdout)


def codes(result) -> set[str]:
    """Finding codes of a Result or of its JSON."""
    findings = result["findings"] if isinstance(result, dict) else [f.to_json() for f in result.findings]
    return {f["code"] for f in findings}
