"""The results store: every evaluation the judge finishes, kept in one SQLite file.

Why a database and not a folder of JSON files: agents and people ask questions across runs ("what did
I submit for level2/51 last week, and was it faster?"), several judges may run at once (one per GPU),
and a record must be all there or not there at all. SQLite gives all three with the standard library:

* one row per evaluation, written by ONE `INSERT` inside ONE transaction (`with conn:`), so a crash
  of the judge at any moment leaves either the whole record or nothing;
* WAL journaling and a busy timeout, so several processes can record at the same time;
* `PRAGMA user_version` holds the schema version, so a newer layout is detected instead of misread.

The row keeps summary columns (verdict, problem, candidate hash, device, speedups) for `history`,
plus the complete result JSON and the candidate's source text, so `get` can show exactly what was
judged and what the judge said, even after the candidate file has changed or been deleted.

Where the file lives is decided by `Options.store_path` (default: `options.default_store_path()`,
i.e. $KERNELJUDGE_STORE, else ~/.local/share/kerneljudge/results.sqlite); nothing here reads
globals or the environment.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kerneljudge.errors import StoreError
from kerneljudge.options import VERBS
from kerneljudge.records import Result, jsonsafe

#: Bumped whenever the table layout changes; stored in `PRAGMA user_version`. Version 2 added `run_id`,
#: version 3 `job_key`.
SCHEMA_VERSION = 3

#: Seconds a writer waits for another process's transaction before giving up.
BUSY_TIMEOUT_S = 30.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at       TEXT NOT NULL,     -- UTC, ISO 8601
    verb             TEXT NOT NULL,     -- evaluate | check | bench | submit
    verdict          TEXT NOT NULL,     -- pass | fail | error
    correct          INTEGER NOT NULL,  -- 0/1: every trial passed and no failing finding
    problem          TEXT,              -- "level2/51_..." or the problem file's stem
    problem_sha256   TEXT,
    sizes            TEXT,              -- JSON: the problem constants the run used
    candidate_path   TEXT,
    candidate_sha256 TEXT NOT NULL,
    candidate_label  TEXT,              -- pytorch | cuda | triton | cpp | ...
    source           TEXT NOT NULL,     -- the candidate source text as judged
    device_type      TEXT,
    device_name      TEXT,
    protocol         TEXT,
    versions         TEXT,              -- JSON
    speedups         TEXT,              -- JSON {baseline: factor} or NULL when not timed
    finding_codes    TEXT NOT NULL,     -- JSON list of the findings' codes, in order
    options          TEXT,              -- JSON of Options.to_json() (never holds a secret seed)
    result           TEXT NOT NULL,     -- JSON of Result.to_json(), complete
    run_id           TEXT,              -- the batch run the record belongs to; NULL for a single evaluation
    job_key          TEXT               -- the batch job within its run: one record per (run_id, job_key)
);
CREATE INDEX IF NOT EXISTS results_problem ON results (problem, id);
CREATE INDEX IF NOT EXISTS results_candidate ON results (candidate_sha256, id);
CREATE INDEX IF NOT EXISTS results_run ON results (run_id, id);
CREATE INDEX IF NOT EXISTS results_job ON results (run_id, job_key);
"""

#: The steps that bring an older file up to SCHEMA_VERSION, keyed by the version they start from.
_MIGRATIONS = {
    1: "ALTER TABLE results ADD COLUMN run_id TEXT; CREATE INDEX IF NOT EXISTS results_run ON results (run_id, id);",
    2: "ALTER TABLE results ADD COLUMN job_key TEXT; "
       "CREATE INDEX IF NOT EXISTS results_job ON results (run_id, job_key);",
}

#: Columns `history` returns (everything but the bulky source, options and result JSON).
SUMMARY_COLUMNS = ("id", "created_at", "verb", "verdict", "correct", "problem", "problem_sha256", "sizes",
                   "candidate_path", "candidate_sha256", "candidate_label", "device_type", "device_name",
                   "protocol", "speedups", "finding_codes", "run_id")
_JSON_COLUMNS = ("sizes", "versions", "speedups", "finding_codes", "options", "result")


class Store:
    """One results database. Cheap to create; each call opens its own short-lived connection, so a
    Store can be shared by threads and used from several processes at once."""

    def __init__(self, path: Path | str):
        self.path = Path(path).expanduser()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder of the results store {self.path}: {exc}; set "
                             "$KERNELJUDGE_STORE to a writable path (or pass --no-store)") from exc
        self._create_schema()

    # ------------------------------------------------------------------ connection and schema
    def _connect(self, isolation_level: str = "DEFERRED") -> sqlite3.Connection:
        """A new connection that waits up to BUSY_TIMEOUT_S for other processes' locks."""
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=isolation_level)
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            conn.row_factory = sqlite3.Row
            return conn
        except sqlite3.Error as exc:
            raise self._error("open", exc) from exc

    def _error(self, action: str, exc: Exception) -> StoreError:
        return StoreError(f"cannot {action} the results store {self.path}: {exc}. If the file is damaged or not a "
                          "kerneljudge store, move it away (a new one is created), or point $KERNELJUDGE_STORE "
                          "elsewhere")

    def _create_schema(self) -> None:
        """Create the table (once) and switch the file to WAL. Switching the journal mode does not wait on
        SQLite's busy handler (it fails at once with "database is locked" while another process holds the
        file), so this step is retried until BUSY_TIMEOUT_S has passed."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        attempt = 0
        while True:
            try:
                return self._try_create_schema()
            except sqlite3.OperationalError as exc:
                attempt += 1
                if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                    raise self._error("open", exc) from exc
                time.sleep(min(0.01 * attempt, 0.2))
            except sqlite3.Error as exc:
                raise self._error("open", exc) from exc

    def _try_create_schema(self) -> None:
        conn = self._connect()
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StoreError(f"the results store {self.path} has schema version {version}, newer than this "
                                 f"kerneljudge understands ({SCHEMA_VERSION}): upgrade kerneljudge or use another "
                                 "store ($KERNELJUDGE_STORE)")
            # WAL: readers never block the writer and writers from several processes queue on the lock.
            # The mode is stored in the file, so only the first opener has to switch it.
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            if version < SCHEMA_VERSION:
                # One transaction: a half-created or half-migrated schema is never left behind. A file
                # at version 0 is new (or empty); an older one is migrated step by step, rows kept.
                steps = [_SCHEMA] if version == 0 else [_MIGRATIONS[v] for v in range(version, SCHEMA_VERSION)]
                with conn:
                    conn.executescript("BEGIN IMMEDIATE;" + "".join(steps)
                                       + f"PRAGMA user_version = {SCHEMA_VERSION};")
        finally:
            conn.close()

    # ------------------------------------------------------------------ writing
    def record(self, result: Result, *, verb: str, source: str, options: dict | None = None,
               candidate_path: str | None = None, run_id: str | None = None, job_key: str | None = None) -> int:
        """Store one finished evaluation; return its id.

        `source` is the candidate text that was judged (kept so the record stays meaningful after the
        file changes). `run_id` groups the records of one batch run (`runs`, `history(run_id=...)`); with a
        `job_key` the record replaces the run's earlier one for that job, in the same transaction (a batch
        killed after recording a job and before its journal line judges it again on resume: one record).
        `candidate_path` is only needed when the result has no candidate section (the
        file could not be read or parsed). Everything is serialised first, then written with a single
        INSERT in a single transaction: the record is complete or absent, never partial.
        """
        if verb not in VERBS:
            raise ValueError(f"verb must be one of {', '.join(VERBS)}, not {verb!r}")
        problem, candidate, device = result.problem or {}, result.candidate or {}, result.device or {}
        row = {
            "created_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
            "verb": verb,
            "verdict": result.verdict,
            "correct": int(result.correct),
            "problem": problem.get("name"),
            "problem_sha256": problem.get("sha256"),
            "sizes": _dumps(problem.get("constants")),
            "candidate_path": candidate.get("path") or candidate_path,
            "candidate_sha256": candidate.get("sha256") or hashlib.sha256(source.encode()).hexdigest(),
            "candidate_label": candidate.get("label"),
            "source": source,
            "device_type": device.get("type"),
            "device_name": device.get("name"),
            "protocol": result.protocol,
            "versions": _dumps(result.versions),
            "speedups": _dumps(result.speedup),
            "finding_codes": _dumps([f.code for f in result.findings]),
            "options": _dumps(options),
            "result": _dumps(result.to_json()),
            "run_id": run_id,
            "job_key": job_key if run_id else None,
        }
        columns = ", ".join(row)
        marks = ", ".join(f":{name}" for name in row)
        # IMMEDIATE: take the write lock when the transaction begins (waiting on the busy timeout), so a
        # concurrent writer can never invalidate this transaction's snapshot halfway.
        conn = self._connect("IMMEDIATE")
        try:
            with conn:  # commit on success, roll back on any error
                if row["job_key"] is not None:
                    conn.execute("DELETE FROM results WHERE run_id = ? AND job_key = ?", (run_id, job_key))
                cursor = conn.execute(f"INSERT INTO results ({columns}) VALUES ({marks})", row)
            return int(cursor.lastrowid)
        except sqlite3.Error as exc:
            raise self._error("write to", exc) from exc
        finally:
            conn.close()

    # ------------------------------------------------------------------ reading
    def history(self, *, problem: str | None = None, verdict: str | None = None, verb: str | None = None,
                candidate_sha: str | None = None, run_id: str | None = None,
                limit: int = 50) -> list[dict[str, Any]]:
        """Summaries of the most recent records, newest first.

        `problem` matches the full name, or a built-in short name (`level2/51` or `l2/51` finds
        `level2/51_Gemm_...`);
        `candidate_sha` matches a full sha256 or a prefix of at least 6 characters.
        """
        where, params = [], []
        if problem:
            where.append("(problem = ? OR problem LIKE ? ESCAPE '\\')")
            params += [problem, _like_prefix(_long_name(problem)) + "\\_%"]
        if verdict:
            where.append("verdict = ?")
            params.append(verdict)
        if verb:
            where.append("verb = ?")
            params.append(verb)
        if run_id:
            where.append("run_id = ?")
            params.append(run_id)
        if candidate_sha:
            where.append("candidate_sha256 LIKE ? ESCAPE '\\'")
            params.append(_like_prefix(candidate_sha.lower()) + "%")
        sql = (f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM results"
               + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY id DESC LIMIT ?")
        params.append(max(0, int(limit)))
        conn = self._connect()
        try:
            return [_row(r) for r in conn.execute(sql, params).fetchall()]
        except sqlite3.Error as exc:
            raise self._error("read", exc) from exc
        finally:
            conn.close()

    def get(self, record_id: int) -> dict[str, Any]:
        """The complete record: summary columns, source, options, versions and the full result JSON
        (`Result.from_json(record["result"])` rebuilds the Result)."""
        conn = self._connect()
        try:
            row = conn.execute("SELECT * FROM results WHERE id = ?", (int(record_id),)).fetchone()
        except sqlite3.Error as exc:
            raise self._error("read", exc) from exc
        finally:
            conn.close()
        if row is None:
            raise StoreError(f"no record {record_id} in the results store {self.path}; `kerneljudge history` "
                             "lists the records")
        return _row(row)

    def runs(self, limit: int = 50) -> list[dict[str, Any]]:
        """The batch runs in the store, newest first: run id, first and last record time, record count and
        how many passed."""
        sql = ("SELECT run_id, MIN(created_at) AS started_at, MAX(created_at) AS finished_at, COUNT(*) AS records,"
               " SUM(verdict = 'pass') AS passed FROM results WHERE run_id IS NOT NULL GROUP BY run_id"
               " ORDER BY MAX(id) DESC LIMIT ?")
        conn = self._connect()
        try:
            return [dict(r) for r in conn.execute(sql, (max(0, int(limit)),)).fetchall()]
        except sqlite3.Error as exc:
            raise self._error("read", exc) from exc
        finally:
            conn.close()

    def count(self) -> int:
        """How many records the store holds."""
        conn = self._connect()
        try:
            return int(conn.execute("SELECT COUNT(*) FROM results").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._error("read", exc) from exc
        finally:
            conn.close()


def journal_paths(path: Path) -> tuple[Path, ...]:
    """The files SQLite keeps beside a store: its WAL, its shared memory and a rollback journal."""
    return tuple(path.with_name(path.name + end) for end in ("-wal", "-shm", "-journal"))


class HeldOpen:
    """The judge's connections to results stores, open while a worker lives. A worker's view covers each store
    and its journal files (sandbox/launch.py), but only a path that exists when it starts can be covered, and
    SQLite deletes a store's WAL file at its last connection's close and makes a new one at the next open: a
    worker started between two recordings read another evaluation's records (other candidates' sources) in a
    WAL file made after it started. While one of the judge's connections is open no close is the last, so
    every record goes to the files that were covered when the worker started; a store not there yet is made
    first (a run's store, or the default one at $KERNELJUDGE_STORE, is made at its next record anyway)."""

    def __init__(self, paths: tuple[Path, ...]):
        self.connections: list[sqlite3.Connection] = []
        for path in paths:
            try:  # (a store that cannot be made holds nothing to read; the run's record stage says so)
                made = Store(path)
                # (closed by whichever thread ends the worker: a batch lane's, or its pool's at the end)
                connection = sqlite3.connect(made.path, check_same_thread=False)
            except (StoreError, sqlite3.Error):
                continue
            self.connections.append(connection)
            try:
                connection.execute("PRAGMA user_version").fetchall()  # a read: the WAL and its index opened
            except sqlite3.Error:
                continue

    def close(self) -> None:
        for connection in self.connections:
            connection.close()
        self.connections.clear()


def _dumps(value: Any) -> str | None:
    """Strict JSON (no NaN/Infinity), or NULL for a missing value."""
    return None if value is None else json.dumps(jsonsafe(value), allow_nan=False, sort_keys=False)


def _row(row: sqlite3.Row) -> dict[str, Any]:
    data = dict(row)
    for name in _JSON_COLUMNS:
        if data.get(name) is not None:
            data[name] = json.loads(data[name])
    if "correct" in data:
        data["correct"] = bool(data["correct"])
    return data


def _like_prefix(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _long_name(problem: str) -> str:
    """`l2/51` -> `level2/51` so short names find built-in problems' records."""
    if problem[:1] in "lL" and not problem.lower().startswith("level"):
        head, sep, tail = problem.partition("/")
        if sep and head[1:].isdigit():
            return f"level{head[1:]}/{tail}"
    return problem
