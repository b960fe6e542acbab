"""The results store, with Results from real evaluations (CPU, timing off) and built by hand."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from kerneljudge import api
from kerneljudge.cli_agents import history_command, show_command
from kerneljudge.errors import KernelJudgeError, StoreError
from kerneljudge.options import Options
from kerneljudge.records import Finding, Result, Trial, jsonsafe
from kerneljudge.store import SCHEMA_VERSION, Store

from scaled_relu import EXITS, GOOD, PROBLEM, SYNTAX, WRONG  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def judged(tmp_path_factory) -> dict:
    """Real check runs of good, wrong and exiting candidates (evaluated once for the module)."""
    folder = tmp_path_factory.mktemp("judged")
    (folder / "prob.py").write_text(PROBLEM)
    options = Options(device="cpu", store_path=None, cache_dir=folder / "cache").replace(
        timing={"enabled": False}, check={"trials": 2})
    out = {"folder": folder}
    for name, source in (("good", GOOD), ("wrong", WRONG), ("exits", EXITS), ("syntax", SYNTAX)):
        path = folder / f"{name}.py"
        path.write_text(source)
        out[name] = (api.check(folder / "prob.py", path, options), source, options)
    return out


def normalised(result: Result) -> dict:
    return json.loads(json.dumps(jsonsafe(result.to_json())))


def test_real_records_round_trip(judged, tmp_path):
    store = Store(tmp_path / "deep" / "folder" / "results.sqlite")  # parent folders are created
    good, source, options = judged["good"]
    assert good.verdict == "pass"
    record_id = store.record(good, verb="check", source=source, options=options.to_json())
    record = store.get(record_id)
    assert record["verdict"] == "pass" and record["correct"] is True and record["verb"] == "check"
    assert record["source"] == source
    assert record["result"] == normalised(good)  # the complete result JSON, unchanged
    assert record["problem"] == "prob" and record["sizes"] == {"batch": 8, "n": 64}
    assert record["candidate_sha256"] == good.candidate["sha256"]
    assert record["device_type"] == "cpu" and record["versions"] == good.versions
    assert record["options"]["device"] == "cpu" and record["options"]["check"]["seed"] is None
    assert record["speedups"] is None  # not timed
    rebuilt = Result.from_json(record["result"])
    assert rebuilt.verdict == good.verdict and rebuilt.trials == good.trials

    wrong, source, _ = judged["wrong"]
    record = store.get(store.record(wrong, verb="evaluate", source=source))
    assert record["verdict"] == "fail" and record["correct"] is False
    assert record["finding_codes"] == [f.code for f in wrong.findings] and "wrong-output" in record["finding_codes"]
    assert Result.from_json(record["result"]).findings == wrong.findings
    assert record["options"] is None


def test_worker_exit_mid_evaluation_still_leaves_a_complete_record(judged, tmp_path):
    result, source, _ = judged["exits"]
    assert result.verdict == "error"
    assert [f.code for f in result.findings if f.blocking] == ["candidate-exit"]
    store = Store(tmp_path / "r.sqlite")
    record = store.get(store.record(result, verb="submit", source=source))
    assert record["verdict"] == "error" and record["verb"] == "submit"
    assert record["result"]["findings"][-1]["details"]["exit_code"] == 3
    assert record["candidate_path"].endswith("exits.py") and record["source"] == source


def test_unparsable_candidate_is_recorded_with_the_sha_of_its_source(judged, tmp_path):
    import hashlib

    result, source, _ = judged["syntax"]
    assert result.verdict == "error" and result.candidate == {}
    store = Store(tmp_path / "r.sqlite")
    record = store.get(store.record(result, verb="check", source=source, candidate_path="syntax.py"))
    assert record["candidate_sha256"] == hashlib.sha256(source.encode()).hexdigest()
    assert record["candidate_path"] == "syntax.py" and record["finding_codes"] == ["candidate-invalid"]


def test_history_filters_newest_first(judged, tmp_path):
    store = Store(tmp_path / "r.sqlite")
    good, wrong, exits = judged["good"], judged["wrong"], judged["exits"]
    ids = [store.record(good[0], verb="check", source=good[1]),
           store.record(wrong[0], verb="check", source=wrong[1]),
           store.record(good[0], verb="submit", source=good[1]),
           store.record(exits[0], verb="evaluate", source=exits[1])]
    rows = store.history()
    assert [r["id"] for r in rows] == ids[::-1]
    assert "result" not in rows[0] and "source" not in rows[0]  # summaries only
    assert [r["id"] for r in store.history(verdict="pass")] == [ids[2], ids[0]]
    assert [r["id"] for r in store.history(verb="check")] == [ids[1], ids[0]]
    assert [r["id"] for r in store.history(verb="check", verdict="fail")] == [ids[1]]
    assert [r["id"] for r in store.history(candidate_sha=good[0].candidate["sha256"][:8])] == [ids[2], ids[0]]
    assert len(store.history(problem="prob")) == 4 and store.history(problem="other") == []
    assert [r["id"] for r in store.history(limit=1)] == [ids[3]]
    assert store.count() == 4


def test_builtin_short_names_find_records(judged, tmp_path):
    store = Store(tmp_path / "r.sqlite")
    good, source, _ = judged["good"]
    for name in ("level2/51_Gemm_Subtract", "level2/510_Other"):
        store.record(Result(**{**good.__dict__, "problem": {**good.problem, "name": name}}), verb="check",
                     source=source)
    assert [r["problem"] for r in store.history(problem="l2/51")] == ["level2/51_Gemm_Subtract"]
    assert len(store.history(problem="level2/510_Other")) == 1


def test_errors_are_store_errors_with_a_message(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    with pytest.raises(StoreError, match="no record 42"):
        store.get(42)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(StoreError, match="cannot open the results store"):
        Store(garbage)
    newer = tmp_path / "newer.sqlite"
    sqlite3.connect(newer).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}").connection.close()
    with pytest.raises(StoreError, match="newer than this"):
        Store(newer)
    with pytest.raises(ValueError):
        store.record(_hand_result(), verb="judge", source="x")


def _hand_result(**changes) -> Result:
    base = dict(verdict="fail", findings=(Finding.of("wrong-output", "trial 0: 3 elements differ", stage="check"),),
                trials=(Trial(0, False, max_abs_err=float("inf"), worst_index=(1, 2)),),
                problem={"name": "hand", "sha256": "ab" * 32, "constants": {"n": 4}},
                candidate={"path": "/x/c.py", "sha256": "cd" * 32, "kinds": [], "label": "pytorch"},
                device={"type": "cpu", "name": "test"}, versions={"torch": "x"}, protocol="strict",
                timing={"speedup": {"eager": float("nan"), "compile": 2.0}})
    return Result(**{**base, **changes})


def test_hand_built_result_strict_json_and_unserialisable_result_writes_nothing(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    record = store.get(store.record(_hand_result(), verb="bench", source="src"))
    assert record["speedups"] == {"eager": None, "compile": 2.0}  # NaN is not JSON: stored as null
    assert record["result"]["trials"][0]["max_abs_err"] is None
    bad = _hand_result(findings=(Finding("wrong-output", "fail", "m", "f", "check", {"tensor": object()}),))
    with pytest.raises(TypeError):
        store.record(bad, verb="check", source="src")
    assert store.count() == 1  # nothing half-written


WRITER = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {src!r})
    from kerneljudge.records import Result
    from kerneljudge.store import Store
    result = Result.from_json(json.load(open(sys.argv[1])))
    store = Store(sys.argv[2])
    count = int(sys.argv[3])
    print("ready", flush=True)
    i = 0
    while count < 0 or i < count:
        store.record(result, verb="check", source=sys.argv[4] + str(i))
        i += 1
""")


def _writer(tmp_path: Path, judged, store_path: Path, count: int, tag: str) -> subprocess.Popen:
    result_file = tmp_path / "result.json"
    result_file.write_text(json.dumps(jsonsafe(judged["wrong"][0].to_json())))
    return subprocess.Popen([sys.executable, "-c", WRITER.format(src=str(SRC)), str(result_file), str(store_path),
                             str(count), tag], stdout=subprocess.PIPE, text=True)


def test_concurrent_writers_from_two_processes(judged, tmp_path):
    path = tmp_path / "shared.sqlite"
    writers = [_writer(tmp_path, judged, path, 40, tag) for tag in ("a", "b")]
    for writer in writers:
        writer.communicate(timeout=60)
        assert writer.returncode == 0
    store = Store(path)
    rows = store.history(limit=1000)
    assert len(rows) == 80 and len({r["id"] for r in rows}) == 80
    sources = {store.get(r["id"])["source"] for r in rows}
    assert sources == {f"{tag}{i}" for tag in "ab" for i in range(40)}


def test_killed_writer_never_leaves_half_a_record(judged, tmp_path):
    path = tmp_path / "killed.sqlite"
    writer = _writer(tmp_path, judged, path, -1, "k")
    assert writer.stdout.readline().strip() == "ready"
    time.sleep(0.5)
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT verdict, source, result FROM results").fetchall()
    conn.close()
    assert rows, "the writer recorded nothing before it was killed"
    for verdict, source, result in rows:
        assert verdict == "fail" and source.startswith("k") and json.loads(result)["verdict"] == "fail"


@pytest.fixture
def cli():
    group = click.Group(commands=[history_command, show_command])

    def invoke(*args: str):
        try:
            return CliRunner(env={"COLUMNS": "200"}).invoke(group, list(args), catch_exceptions=False)
        except KernelJudgeError as exc:  # the main group turns these into exit code 2
            return exc
    return invoke


def test_history_and_show_commands(judged, tmp_path, cli):
    path = tmp_path / "r.sqlite"
    assert "no recorded results yet" in cli("history", "--store", str(path)).output
    store = Store(path)
    good, wrong = judged["good"], judged["wrong"]
    first = store.record(good[0], verb="check", source=good[1])
    second = store.record(wrong[0], verb="submit", source=wrong[1])

    rows = json.loads(cli("history", "--store", str(path), "--json").output)
    assert [r["id"] for r in rows] == [second, first]
    rows = json.loads(cli("history", "--store", str(path), "--json", "--verdict", "pass").output)
    assert [r["id"] for r in rows] == [first]
    table = cli("history", "--store", str(path)).output
    assert "wrong.py" in table and "submit" in table and "wrong-output" in table

    shown = cli("show", str(second), "--store", str(path)).output
    assert "verdict: FAIL" in shown and "wrong-output" in shown and f"record {second}" in shown
    assert cli("show", str(first), "--store", str(path), "--source").output == good[1]
    record = json.loads(cli("show", str(first), "--store", str(path), "--json").output)
    assert record["result"]["verdict"] == "pass" and record["source"] == good[1]
    error = cli("show", "999", "--store", str(path))
    assert isinstance(error, StoreError) and "no record 999" in str(error)


VERSION_1_TABLE = """CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, created_at TEXT NOT NULL,
    verb TEXT NOT NULL, verdict TEXT NOT NULL, correct INTEGER NOT NULL, problem TEXT, problem_sha256 TEXT,
    sizes TEXT, candidate_path TEXT, candidate_sha256 TEXT NOT NULL, candidate_label TEXT, source TEXT NOT NULL,
    device_type TEXT, device_name TEXT, protocol TEXT, versions TEXT, speedups TEXT, finding_codes TEXT NOT NULL,
    options TEXT, result TEXT NOT NULL)"""


def test_a_version_1_store_is_migrated_with_its_rows_and_runs_group_records(judged, tmp_path):
    """A store written before run ids existed keeps its records and gains the column; records of a
    batch run are found by run id and summed by `runs`."""
    path = tmp_path / "old.sqlite"
    good, source, _ = judged["good"]
    wrong, wrong_source, _ = judged["wrong"]
    with sqlite3.connect(path) as conn:  # the version-1 layout, as shipped before run ids, with one record
        conn.executescript(VERSION_1_TABLE + "; PRAGMA user_version = 1;")
        conn.execute("INSERT INTO results (created_at, verb, verdict, correct, candidate_sha256, source, "
                     "finding_codes, result) VALUES ('2026-11-30T00:00:00', 'check', 'pass', 1, 'ab', 'x', '[]', '{}')")
    store = Store(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    old = store.get(1)
    assert old["verdict"] == "pass" and old["created_at"] == "2026-11-30T00:00:00" and old["run_id"] is None
    store.record(good, verb="check", source=source, run_id="run-a")
    store.record(wrong, verb="check", source=wrong_source, run_id="run-a")
    store.record(good, verb="check", source=source, run_id="run-b")
    assert [r["verdict"] for r in store.history(run_id="run-a")] == ["fail", "pass"]
    runs = store.runs()
    assert [(r["run_id"], r["records"], r["passed"]) for r in runs] == [("run-b", 1, 1), ("run-a", 2, 1)]


def test_a_batch_job_recorded_again_replaces_its_record_in_the_run(judged, tmp_path):
    """A batch killed after recording a job and before journaling it judges the job again on resume: the
    run keeps one record per job, the newest; other runs and other jobs keep theirs."""
    store = Store(tmp_path / "r.sqlite")
    good, source, _ = judged["good"]
    wrong, wrong_source, _ = judged["wrong"]
    store.record(wrong, verb="evaluate", source=wrong_source, run_id="run-a", job_key="job-1")
    store.record(good, verb="evaluate", source=source, run_id="run-a", job_key="job-2")
    store.record(wrong, verb="evaluate", source=wrong_source, run_id="run-b", job_key="job-1")
    store.record(good, verb="evaluate", source=source, run_id="run-a", job_key="job-1")  # judged again
    assert sorted(r["verdict"] for r in store.history(run_id="run-a")) == ["pass", "pass"]
    assert [r["verdict"] for r in store.history(run_id="run-b")] == ["fail"]
