"""Shared fixtures: fast CPU options, the candidates folder, and CLI runners (in this process, and in a
subprocess).

Every test runs real evaluations (a worker process per candidate). The build cache is shared by the
whole session so a C++ extension is compiled once per run of the suite.
"""

from __future__ import annotations

import fcntl
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

# No bytecode written by this process or the processes it starts (the CLI's, a judge server's): under
# pytest-xdist (the README's test command) another test process's evaluation watches the package's files,
# and bytecode written into it while its worker runs would be a change it did not make.
os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
sys.dont_write_bytecode = True

import pytest  # noqa: E402
import torch  # noqa: E402

from kerneljudge.options import Options  # noqa: E402

# Without a GPU, Triton runs through its interpreter, and triton.language's own functions take the mode they
# are imported in: imported here under the interpreter, before any test imports triton (problem lint does,
# through torch), a test that loads a Triton solution in this process (test_inference_mode.py) works whichever
# test ran first. The variable is put back at once: workers get it from the judge (machine.interpret_triton).
if not torch.cuda.is_available() and importlib.util.find_spec("triton") is not None and "triton" not in sys.modules:
    _before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    importlib.import_module("triton.language")
    if _before is None:
        del os.environ["TRITON_INTERPRET"]
    else:
        os.environ["TRITON_INTERPRET"] = _before

CANDIDATES = Path(__file__).parent / "candidates"
SEED = "level2/51"  # the seed problem, run with its `small` preset on the CPU
SHIPPED_CPP = next((Path(__file__).parents[1] / "src" / "kerneljudge" / "suite" / "solutions" / "level1").glob(
    "19_*/cpp.py"))
# The test files with the most test time first (seconds of test time beside the suite's other test processes,
# 2026-12-08: integrity 75, referee 66, ray 65, sandbox 63, isolation 53, batch 45, memory 28, server 24; the
# rest under 21 each). The README's command hands whole files to its test processes in collection order
# (pyproject's --no-loadscope-reorder), so the longest does not start last and run alone at the end.
SLOW_FILES_FIRST = ("test_integrity.py", "test_referee.py", "test_ray.py", "test_sandbox.py", "test_isolation.py",
                    "test_batch.py", "test_memory.py", "test_server.py")


def pytest_collection_modifyitems(items: list) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """A fresh build cache for the session; `KERNELJUDGE_TEST_CACHE` names one to reuse instead (the GPU
    device call builds its CUDA sources once for every script and test it runs: benchmarks/gpu_run.sh)."""
    shared = os.environ.get("KERNELJUDGE_TEST_CACHE")
    return Path(shared) if shared else tmp_path_factory.mktemp("kj-cache")


@pytest.fixture(scope="session")
def cpp_built(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float]:
    """`kerneljudge build` of the suite's C++ sources, three at once, into a fresh cache, in a subprocess:
    tests/candidates/isolation/cpp_ext.py (its extension source is shared by the probe candidates),
    cpp_broken.py (a compile error) and level1/19's shipped C++ solution. (cache folder, how it ended,
    seconds). Their only cold builds: the tests that evaluate them use this cache (a cold build of torch's
    headers takes ~20 s of one core; three at once use both of the CI's cores). Under pytest-xdist the test
    processes share it: the first one builds, under a lock, and records how the build ended for the others."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, above each test process's own
    cache, record = root / "kj-build-cache", root / "kj-build-cache.json"
    with open(root / "kj-build-cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not record.exists():
            cache.mkdir(exist_ok=True)
            isolation = CANDIDATES / "isolation"
            started = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "kerneljudge", "build", str(isolation / "cpp_ext.py"),
                                   str(isolation / "cpp_broken.py"), str(SHIPPED_CPP), "-j", "3", "--device", "cpu",
                                   "--cache-dir", str(cache)], capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "COLUMNS": "1000"})
            record.write_text(json.dumps({"args": done.args, "returncode": done.returncode, "stdout": done.stdout,
                                          "stderr": done.stderr, "seconds": time.monotonic() - started}))
        built = json.loads(record.read_text())
    done = subprocess.CompletedProcess(built["args"], built["returncode"], built["stdout"], built["stderr"])
    return cache, done, built["seconds"]


@pytest.fixture
def fast(cache_dir) -> Options:
    """CPU, no timing, nothing recorded: the options most tests start from."""
    return Options(device="cpu", store_path=None, cache_dir=cache_dir).replace(timing={"enabled": False})


def _kj_env(cache_dir: Path, tmp_path: Path, env: dict | None) -> dict:
    return {"KERNELJUDGE_CACHE_DIR": str(cache_dir), "KERNELJUDGE_STORE": str(tmp_path / "results.sqlite"),
            "KERNELJUDGE_SOCKET": str(tmp_path / "no-server" / "judge.sock"), **(env or {})}


@pytest.fixture
def kj(cache_dir, tmp_path):
    """Run the CLI in this process, as `kerneljudge ARGS` would: kj("eval", ...) -> (exit code, stdout,
    stderr). In this process its evaluations share the suite's fork server (a CLI in a process of its
    own starts one, importing torch, every time); `kj_process` runs it in a subprocess."""
    from click.testing import CliRunner

    from kerneljudge.cli import main

    def run(*args: str, timeout: float = 300, env: dict | None = None):
        done = CliRunner().invoke(main, list(args), env=_kj_env(cache_dir, tmp_path, env), catch_exceptions=False)
        return done.exit_code, done.stdout, done.stderr

    return run


@pytest.fixture
def kj_process(cache_dir, tmp_path):
    """Run the CLI in a subprocess: kj_process("eval", ...) -> (exit code, stdout, stderr)."""

    def run(*args: str, timeout: float = 300, env: dict | None = None):
        done = subprocess.run([sys.executable, "-m", "kerneljudge", *args], capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, **_kj_env(cache_dir, tmp_path, env)})
        return done.returncode, done.stdout, done.stderr

    return run


def parse_json(stdout: str) -> dict:
    """--json output must be exactly one JSON object."""
    return json.loads(stdout)


def codes(result) -> set[str]:
    """Finding codes of a Result or of its JSON."""
    findings = result["findings"] if isinstance(result, dict) else [f.to_json() for f in result.findings]
    return {f["code"] for f in findings}
