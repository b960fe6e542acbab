"""Signals to the judge: Ctrl-C and SIGTERM stop an evaluation at once with exit 128 + signal, and the
worker (with the processes the candidate started) never outlives the judge, even a judge killed outright.

Each test runs the real CLI in a subprocess on a candidate whose forward spins forever and records its
worker's pid and a child's pid; the signal goes to the judge once the candidate is running. Deadlines
are generous (a loaded 2-core machine), the assertions are about what happens, not how fast.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from conftest import CANDIDATES, SEED

HANG = CANDIDATES / "isolation" / "hang.py"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent that does not reap it counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(pids: list[int], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def start_hanging_evaluation(cache_dir, tmp_path) -> tuple[subprocess.Popen, int, int]:
    """The CLI judging hang.py, once its forward spins: (judge, worker pid, candidate's child pid)."""
    pidfile = tmp_path / "pids"
    env = {**os.environ, "KERNELJUDGE_CACHE_DIR": str(cache_dir), "KJ_TEST_PIDFILE": str(pidfile),
           "KERNELJUDGE_SANDBOX_OFF": "mount,pid",  # host pids, in a file outside the worker's folder
           "KERNELJUDGE_SOCKET": str(tmp_path / "no-server" / "judge.sock")}
    judge = subprocess.Popen([sys.executable, "-m", "kerneljudge", "check", SEED, str(HANG), "--device", "cpu",
                              "--no-store", "--timeout", "300"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (pidfile.exists() and len(pidfile.read_text().split()) == 2):
        assert judge.poll() is None, f"the judge ended before the candidate ran: {judge.communicate()}"
        assert time.monotonic() < deadline, "the candidate never started"
        time.sleep(0.1)
    worker, child = map(int, pidfile.read_text().split())
    assert worker in {p.pid for p in psutil.Process(judge.pid).children(recursive=True)}, \
        "the worker is the judge's descendant (under the sandbox launcher)"
    return judge, worker, child


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_kills_the_worker_and_exits_128_plus_the_signal(cache_dir, tmp_path, signum, code):
    judge, worker, child = start_hanging_evaluation(cache_dir, tmp_path)
    judge.send_signal(signum)
    try:
        out, err = judge.communicate(timeout=30)
    finally:
        judge.kill()
    assert judge.returncode == code, err
    assert "interrupted" in err and "Aborted" not in err
    assert out == ""  # no report of an evaluation that did not finish
    assert survivors([worker, child]) == [], "the worker or the candidate's child outlived the judge"


def test_a_judge_killed_outright_takes_its_worker_with_it(cache_dir, tmp_path):
    judge, worker, child = start_hanging_evaluation(cache_dir, tmp_path)
    try:
        judge.kill()
        judge.wait(timeout=30)
        assert survivors([worker]) == [], "the worker outlived a judge killed by SIGKILL"
    finally:
        for pid in (worker, child):  # the candidate's own child is not covered when the judge gets no say
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
