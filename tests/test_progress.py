"""Progress: what an evaluation is doing, told to an observer stage by stage and by the worker during
its long stages; shown on a terminal's stderr only (never piped, never with --json); a progress message
forged by candidate code is tampering."""

from __future__ import annotations

import io
import os
import pty
import threading
from contextlib import redirect_stderr, redirect_stdout
from unittest import mock

from conftest import CANDIDATES, SEED, codes, parse_json
from kerneljudge import api
from kerneljudge.progress import ProgressEvent

ISO = CANDIDATES / "isolation"


def test_events_follow_the_stages_and_the_worker_tells_its_build_and_timing(fast, cpp_built):
    events: list[ProgressEvent] = []
    options = fast.replace(cache_dir=cpp_built[0], timing={"enabled": True, "budget_ms": 200, "compile_baseline": False})
    result = api.evaluate(SEED, ISO / "cpp_ext.py", options,
                          on_progress=events.append)
    assert result.verdict == "pass"
    starts = [e.stage for e in events if e.done is None and e.stage in result.stage_ms]
    assert [s for i, s in enumerate(starts) if s not in starts[:i]] == ["load", "worker", "problem-lint", "reference",
                                                                         "baselines", "build", "check", "probes", "timing",
                                                                         "timed-checks", "closing"]
    built = [e.message for e in events if e.stage == "build"]
    assert any("compiling" in m or "build cache hit" in m for m in built), built
    timed = [e for e in events if e.stage in ("baselines", "timing") and e.total]
    parts = [(e.stage, e.message) for e in timed if ":" not in e.message]
    # the reference timed before the candidate is loaded (nothing of it can slow the reference down)
    assert parts == [("baselines", "baseline eager"), ("timing", "candidate")]
    assert all(e.done <= e.total for e in timed)
    assert {(e.stage, e.total) for e in timed} == {("baselines", 1), ("timing", 1)}  # one measurement each
    assert any(e.message.startswith("candidate: ") and e.message.endswith(" calls") for e in timed)


def test_a_progress_message_forged_by_the_candidate_is_tampering(fast):
    events: list[ProgressEvent] = []
    result = api.evaluate(SEED, ISO / "forge_progress.py", fast, on_progress=events.append)
    assert result.verdict == "fail" and "tampering" in codes(result)
    assert "not the reply" in [f for f in result.findings if f.code == "tampering"][0].message
    assert not any("all trials passed" in e.message for e in events)


def test_worker_messages_are_bounded_printable_text_with_integer_counts():
    event = ProgressEvent.from_worker("timing", {"message": "\x1b[2Jcleared" + "x" * 500, "done": "3", "total": True})
    assert event.message.startswith("[2Jcleared") and len(event.message) <= 160
    assert event.done is None and event.total is None
    assert ProgressEvent.from_worker("timing", {"message": "candidate", "done": 1, "total": 2}).text() == \
        "timing (1/2): candidate"


def run_on_terminal(args: list[str], env: dict) -> tuple[int, str, str]:
    """The CLI in this process (its evaluations share the suite's fork server, as `kj`'s do) with stdout
    captured and stderr on a pseudo-terminal: what it writes there is read from the terminal's other end."""
    from kerneljudge.cli import main

    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # the terminal closed: the command ended
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain)
    reader.start()
    out = io.StringIO()
    try:
        with open(slave, "w", encoding="utf-8", buffering=1) as terminal, \
                mock.patch.dict(os.environ, {**env, "COLUMNS": "120"}), redirect_stdout(out), redirect_stderr(terminal):
            try:
                main.main(args, prog_name="kerneljudge", standalone_mode=False)
                rc = 0
            except SystemExit as ended:
                rc = ended.code
    finally:
        reader.join(timeout=30)
        os.close(master)
    return rc, out.getvalue(), b"".join(chunks).decode(errors="replace")


def test_progress_is_shown_on_a_terminal_only(cache_dir, tmp_path, kj):
    env = {"KERNELJUDGE_CACHE_DIR": str(cache_dir), "KERNELJUDGE_SOCKET": str(tmp_path / "no-server" / "judge.sock")}
    args = ["eval", SEED, "--device", "cpu", "--no-store", "--no-baselines", "--budget-ms", "100"]
    rc, out, err = run_on_terminal(args, env)
    assert rc == 0 and "PASS" in out, (out, err)
    assert "worker: starting the worker" in err and "timing (1/" in err and "check: 5 correctness trials" in err
    rc, out, err = kj(*args)  # stderr piped
    assert rc == 0 and "PASS" in out, out  # the report names any finding that failed it
    assert "starting the worker" not in err and "timing (1/" not in err
    rc, out, err = run_on_terminal([*args, "--json"], env)
    assert rc == 0 and parse_json(out)["verdict"] == "pass"
    assert "starting the worker" not in err and "timing (1/" not in err
