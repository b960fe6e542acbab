"""Two evaluations on one device take turns at timing: the later one waits, says so on stderr, and its
result carries a `timing-lock-wait` finding naming the holder; both pass.

The first evaluation times for a fixed 25 s (no convergence stop), so the second, started once the
first holds the lock, reaches its own timing stage while the first still times, even on a loaded
machine; what is asserted is the turn-taking, not how long anything took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from conftest import SEED, codes, parse_json
from kerneljudge import devicelock

HOLD_S = 8

FIRST = """
import json, sys
from pathlib import Path
from kerneljudge import api
result = api.evaluate({seed!r}, None, device="cpu", store_path=None, cache_dir=Path(sys.argv[1]),
                      timing={{"target_rel_sem": 0, "budget_ms": {budget}, "min_time_ms": 10, "max_runs": 10**8,
                               "baselines": False}})
print(json.dumps({{"verdict": result.verdict, "codes": sorted({{f.code for f in result.findings}})}}))
"""


def test_a_second_evaluation_waits_for_the_first_ones_timing_and_says_so(cache_dir, kj):
    lock = devicelock.lock_path(cache_dir / "locks", "cpu")
    first = subprocess.Popen([sys.executable, "-c", FIRST.format(seed=SEED, budget=HOLD_S * 1000), str(cache_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        while not (lock.exists() and lock.read_text().strip() == str(first.pid)):  # the holder's pid is in the file
            assert first.poll() is None, f"the first evaluation ended early: {first.communicate()}"
            assert time.monotonic() < deadline, "the first evaluation never took the timing lock"
            time.sleep(0.1)
        rc, out, err = kj("eval", SEED, "--device", "cpu", "--json", "--no-store", "--no-baselines",
                          "--budget-ms", "200")
        first_out, first_err = first.communicate(timeout=180)
    finally:
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
