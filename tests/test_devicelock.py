"""Two evaluations on one device take turns at timing: the later one waits, says so on stderr, and its
result carries a `timing-lock-wait` finding naming the holder; both pass.

The first evaluation's candidate is honest but, on a call that only its timing makes, waits until the
test lets it go: the test starts the second once the first holds the lock for its timing (it held it for its
baselines before the candidate was loaded, too), and lets the first go once the
second waits for the lock (the kernel's lock table shows the waiter), whatever the machine's load; what
is asserted is the turn-taking, not how long anything took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from conftest import CANDIDATES, SEED, codes, parse_json
from kerneljudge import devicelock

# past the correctness trials and the probes (at most 34 calls: candidates/integrity/replay_after_warmup.py),
# within the timing's fixed 60 calls
HOLD_AT_CALL = 41

HOLDER = """import os
import time

_calls = 0


def _hold():
    global _calls
    _calls += 1
    if _calls == {hold_at}:
        open({holding!r}, "w").close()
        for _ in range(6000):  # at most 2 minutes
            if os.path.exists({release!r}):
                break
            time.sleep(0.02)


"""

FIRST = """
import json, sys
from pathlib import Path
from kerneljudge import api
result = api.evaluate({seed!r}, {candidate!r}, device="cpu", store_path=None, cache_dir=Path(sys.argv[1]),
                      worker={{"writable": ({folder!r},)}},
                      timing={{"target_rel_sem": 0, "min_runs": 60, "max_runs": 60, "budget_ms": 1e7,
                               "baselines": False}})
print(json.dumps({{"verdict": result.verdict, "codes": sorted({{f.code for f in result.findings}})}}))
"""


def holder(folder: Path) -> Path:
    """core/correct.py, with a forward that, on its HOLD_AT_CALL-th call, writes `folder/holding` and waits
    until `folder/release` exists."""
    path = folder / "holder.py"
    correct = (CANDIDATES / "core" / "correct.py").read_text()
    assert "    def forward(self, x):\n" in correct
    path.write_text(HOLDER.format(hold_at=HOLD_AT_CALL, release=str(folder / "release"), holding=str(folder / "holding"))
                    + correct.replace("    def forward(self, x):\n", "    def forward(self, x):\n        _hold()\n"))
    return path


def waiting_on(lock: Path) -> bool:
    """Some process waits for the flock on `lock` (a blocked request: "->" in /proc/locks)."""
    inode = f":{os.stat(lock).st_ino} "
    return any("->" in line and inode in line for line in Path("/proc/locks").read_text().splitlines())


def test_a_second_evaluation_waits_for_the_first_ones_timing_and_says_so(cache_dir, kj, tmp_path):
    lock = devicelock.lock_path(cache_dir / "locks", "cpu")
    folder = tmp_path / "holder"
    folder.mkdir()
    script = FIRST.format(seed=SEED, candidate=str(holder(folder)), folder=str(folder))
    first = subprocess.Popen([sys.executable, "-c", script, str(cache_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        # the holder's pid is in the file, and it holds the lock in its timing (it took it for its baselines too)
        while not ((folder / "holding").exists() and lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None, f"the first evaluation ended early: {first.communicate()}"
            assert time.monotonic() < deadline, "the first evaluation never took the timing lock"
            time.sleep(0.05)
        # the CLI runs here (its signal handlers need the main thread); a thread lets the first go once the
        # second waits for the lock (or once the second ended without waiting: then its result says so)
        ended = threading.Event()

        def release_once_waited() -> None:
            while not (waiting_on(lock) or ended.wait(0.05)):
                pass
            (folder / "release").touch()  # the first's timing goes on, ends and releases the lock

        releaser = threading.Thread(target=release_once_waited, daemon=True)
        releaser.start()
        try:
            rc, out, err = kj("eval", SEED, "--device", "cpu", "--json", "--no-store", "--no-baselines",
                              "--budget-ms", "200")
        finally:
            ended.set()
            releaser.join(timeout=30)
        first_out, first_err = first.communicate(timeout=180)
    finally:
        (folder / "release").touch()
        first.kill()
    second = parse_json(out)
    assert rc == 0 and second["verdict"] == "pass", (err, [(f["code"], f["message"]) for f in second["findings"]])
    wait = [f for f in second["findings"] if f["code"] == "timing-lock-wait"]
    assert len(wait) == 1 and wait[0]["severity"] == "info"
    assert wait[0]["details"]["holder_pid"] == first.pid and wait[0]["details"]["waited_ms"] > 0
    assert f"waiting for the timing lock on cpu, held by pid {first.pid}" in err
    first_result = json.loads(first_out.strip().splitlines()[-1])
    assert first_result["verdict"] == "pass", first_err
    assert "timing-lock-wait" not in first_result["codes"]
    assert lock.read_text() == ""  # released: no stale holder left in the file


def test_an_evaluation_alone_does_not_wait(fast):
    from kerneljudge import api

    result = api.evaluate(SEED, None, fast.replace(timing={"enabled": True, "budget_ms": 100, "baselines": False}))
    assert result.verdict == "pass" and result.timing is not None
    assert "timing-lock-wait" not in codes(result)
