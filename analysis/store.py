"""The results store: one SQLite file (default ``runs/results.db``) holding runs and scores.

Every score row points at a run; every run records its config (JSON and hash), git sha,
package versions, seed, input files, status and log path, so any number can be traced back.
A run made by a study step (gendergap/steps) also records the step's key, and the ``steps``
table holds that step's kind, name and typed fields: score -> run -> step, one hop each.

Concurrency: a sweep's jobs write to one DB at once, from processes on several cluster nodes,
and the DB usually lives on the cluster's shared file system (NFS, Lustre, GPFS). So the store
uses SQLite's rollback journal (``journal_mode=DELETE``), not WAL: WAL keeps its index in a
shared-memory file (``-shm``) that only processes on one host can share, and SQLite documents
that WAL does not work over a network file system -- writers on two nodes could both commit and
corrupt the file. With the rollback journal, every write is one ``BEGIN IMMEDIATE`` transaction
(it takes the file's write lock before reading, so two writers never deadlock upgrading a read
lock) and a busy timeout makes a writer wait its turn instead of failing with "database is
locked". That relies on the file system's POSIX locks (NFSv4 and Lustre with flock/localflock
have them). Writes are short (one run's rows), so serialising them costs little. A killed
writer leaves the database readable: the hot journal rolls the half-done transaction back.
A folder whose file system gives no POSIX locks (NFS without lockd, Lustre mounted without
flock) is refused before the DB is first written there (``check_posix_locks``).
"""
from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import sqlite3
import tempfile
import time
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from corpora.base.boundary import check_label, parse_json, printable
from corpora.base.errors import UserError
from corpora.base.provenance import canonical_json, config_hash, engine_versions, git_sha

log = logging.getLogger(__name__)
DEFAULT_DB = Path("runs") / "results.db"

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT NOT NULL,          -- e.g. asr-finetune, st-train, probe, score-asr
    name         TEXT NOT NULL DEFAULT '',
    config       TEXT NOT NULL,          -- canonical JSON
    config_hash  TEXT NOT NULL,
    git_sha      TEXT NOT NULL,
    versions     TEXT NOT NULL,          -- JSON {package: version}
    seed         INTEGER,
    inputs       TEXT NOT NULL DEFAULT '[]',  -- JSON list of input files (path, size, mtime)
    status       TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
    started_at   REAL NOT NULL,
    ended_at     REAL,
    log_path     TEXT NOT NULL DEFAULT '',
    step_key     TEXT                    -- the study step that made it (steps.key), if any
);
CREATE TABLE IF NOT EXISTS steps (
    key          TEXT PRIMARY KEY,       -- hash of the step's kind, fields and its inputs' keys
    kind         TEXT NOT NULL,          -- e.g. asr-frozen, st, probes, seeds
    name         TEXT NOT NULL,          -- its node in the study graph, e.g. st:F-tiny:fr-en
    fields       TEXT NOT NULL           -- canonical JSON of its typed fields
);
CREATE INDEX IF NOT EXISTS runs_by_hash ON runs(config_hash, status);
CREATE TABLE IF NOT EXISTS scores (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    checkpoint   TEXT NOT NULL,
    task         TEXT NOT NULL,          -- e.g. asr-e2e, asr-frozen, st, mustshe, probe
    lang_pair    TEXT NOT NULL DEFAULT '',
    subset       TEXT NOT NULL DEFAULT 'test',
    gender       TEXT NOT NULL CHECK (gender IN ('F', 'M', 'all', 'delta_rel', 'n/a')),
    metric       TEXT NOT NULL,          -- wer, bleu, delta_rel, coverage, accuracy, f1, ...
    value        REAL NOT NULL,
    ci_low       REAL,
    ci_high      REAL,
    n_utts       INTEGER,
    n_speakers   INTEGER,
    signature    TEXT NOT NULL DEFAULT '',  -- how the number was made (sacrebleu-style)
    UNIQUE (run_id, checkpoint, task, lang_pair, subset, gender, metric)
);
"""

# The study step running in this process (set by the sweep's job runner): runs started while it is
# set point to it. A ContextVar, so nothing outside the step's own call sees it.
_CURRENT_STEP: ContextVar[dict | None] = ContextVar("gendergap_step", default=None)


@contextmanager
def recording_step(step: dict) -> Iterator[None]:
    """Runs started inside this block record ``step`` ({key, kind, name, fields}) as their maker."""
    token = _CURRENT_STEP.set(step)
    try:
        yield
    finally:
        _CURRENT_STEP.reset(token)


RUN_FIELDS = ("id", "kind", "config", "config_hash", "status")
SCHEMA_VERSION = 1   # PRAGMA user_version of a DB this code creates; raise it when the schema changes
WAIT_NOTICE_S = 2.0  # a lock held longer than this is announced ("waiting for the results DB...")


def _locked(e: Exception) -> bool:
    return "locked" in str(e) or "busy" in str(e)


SCORE_FIELDS = ("checkpoint", "task", "lang_pair", "subset", "gender", "metric", "value",
                "ci_low", "ci_high", "n_utts", "n_speakers", "signature")


_LOCKING_FOLDERS: set[str] = set()   # folders whose POSIX locks this process has seen work


def check_posix_locks(folder: str | os.PathLike) -> None:
    """Refuse a folder whose file system gives no POSIX advisory locks: SQLite serialises writers with
    them, and without them two jobs writing the DB at once can corrupt it. Takes and drops one lock on a
    temporary file of its own in ``folder``, once per folder and process."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key in _LOCKING_FOLDERS:
        return
    fd, name = tempfile.mkstemp(prefix=".gendergap-lock-check-", dir=folder)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_UN)
    except OSError as e:
        raise UserError(f"this file system gives no POSIX locks ({e.strerror}), which SQLite needs: jobs writing the "
                        "results DB at once could corrupt it", path=folder,
                        fix="put the DB on a disk with locks (--db, or a sweep's --out, on a local disk or a home "
                            "directory), or have the file system mounted with them (NFS: lockd; Lustre: -o flock)"
                        ) from None
    finally:
        os.close(fd)
        os.unlink(name)
    _LOCKING_FOLDERS.add(key)


class ResultsStore:
    """Thin API over the SQLite file. Open one per process; it is cheap."""

    def __init__(self, path: str | os.PathLike = DEFAULT_DB, timeout: float = 60.0, readonly: bool = False):
        """Open (creating if needed) the DB. ``readonly=True`` is for readers such as reports.

        A DB file without write permission bits is treated as read-only even for root: users
        protect a finished study's results that way, and writing to it must fail loudly.
        """
        self.path = Path(path)
        self.readonly = readonly
        if readonly and not self.path.is_file():
            raise UserError("no results DB here", path=self.path,
                            fix="run a scoring command or a sweep first, or pass --db the right file")
        if not readonly and self.path.is_file() and not (self.path.stat().st_mode & 0o222):
            raise UserError("the results DB is read-only", path=self.path,
                            fix="make it writable (chmod u+w) or pass --db another path")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the directory for the results DB ({e.strerror})",
                            path=self.path, fix="pass --db a path in a writable directory") from None
        self.timeout = timeout
        if not readonly:
            check_posix_locks(self.path.parent)
        try:
            self._waiting(self._open)
            self._check_schema()
        except sqlite3.DatabaseError as e:
            msg = str(e)
            if _locked(e):  # another job holds the file (a sweep's writer): never advise moving it away
                raise UserError(f"the results DB is locked by another process (waited {timeout:g} s)", path=self.path,
                                fix="wait for the other job to finish writing and run again, or pass --db another "
                                    "file") from None
            if "no such table" in msg:
                fix = "this SQLite file is not a gendergap results DB: pass --db the right file"
            elif "readonly" in msg or "unable to open" in msg:
                fix = "make the file and its directory writable, or pass --db another path"
            else:
                fix = "this is not a gendergap results DB (or it is corrupt): pass --db another path"
            raise UserError(f"cannot use the results DB ({msg})", path=self.path, fix=fix) from None

    def _open(self) -> None:
        if getattr(self, "conn", None) is not None:
            self.conn.close()
        if self.readonly:
            self.conn = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True, timeout=self.timeout,
                                        isolation_level=None)
            self._check_objects()
            self.conn.execute("SELECT count(*) FROM runs").fetchone()
            return
        self.conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        self.conn.execute("PRAGMA busy_timeout = %d" % int(self.timeout * 1000))
        self.conn.execute("PRAGMA foreign_keys = ON")
        self._check_objects()   # before any statement that a trigger or view could act on
        # rollback journal, not WAL: see the module docstring (network file systems)
        self.conn.execute("PRAGMA journal_mode = DELETE").fetchone()
        c = self.conn
        c.execute("BEGIN IMMEDIATE")  # two processes opening a new DB at once: one creates it
        try:
            new = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
            self._check_version()  # before anything below alters a newer DB
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    c.execute(statement)
            if "step_key" not in {row[1] for row in c.execute("PRAGMA table_info(runs)")}:
                c.execute("ALTER TABLE runs ADD COLUMN step_key TEXT")  # a DB written before steps
            if new:
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        c.execute("COMMIT")

    def _check_objects(self) -> None:
        """Only the project's own tables and indexes: a handed DB's trigger (one that empties ``scores`` on
        insert) or view (a ``scores`` that forges values) would act on every later read or write."""
        own = {("table", "runs"), ("table", "steps"), ("table", "scores"), ("index", "runs_by_hash"),
               ("table", "sqlite_sequence")}
        for kind, name, table in self.conn.execute("SELECT type, name, tbl_name FROM sqlite_master"):
            auto = kind == "index" and name.startswith("sqlite_autoindex_") and table in ("runs", "steps", "scores")
            if (kind, name) not in own and not auto and not name.startswith("sqlite_stat"):
                raise UserError(f"not a gendergap results DB: it holds a{'n' if kind == 'index' else ''} {kind} "
                                f"{printable(name)[:60]!r} that gendergap never "
                                "creates: refusing to open it", path=self.path,
                                fix=f"export the rows (sqlite3 {self.path} .dump > rows.sql), delete the CREATE "
                                    f"{kind.upper()} statement from rows.sql, load it into a new DB (sqlite3 NEW.db "
                                    "< rows.sql) and pass --db NEW.db")

    def _check_version(self) -> None:
        version = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise UserError(f"this DB was written by a newer gendergap (schema {version} > {SCHEMA_VERSION})",
                            path=self.path, fix="upgrade gendergap (pip install -U gendergap) to read it, or pass "
                                                "--db a DB this version wrote")

    def _check_schema(self) -> None:
        """A DB from a newer gendergap (or a hand-edited one) is named as such, before a query fails
        on a renamed column deep inside a report."""
        self._check_version()
        for table, needed in (("runs", RUN_FIELDS), ("scores", ("run_id", *SCORE_FIELDS))):
            have = {row[1] for row in self.conn.execute(f"PRAGMA table_info({table})")}
            missing = [c for c in needed if c not in have]
            if missing:
                raise UserError(f"the results DB's {table} table has no column(s) {', '.join(missing)}: written by "
                                f"another gendergap version or edited", path=self.path,
                                fix="open it with the gendergap that wrote it, or pass --db a DB this version wrote")

    def _waiting(self, fn):
        """Run ``fn``; if the DB is locked, say so once and wait up to the timeout (then it raises)."""
        full = self.timeout
        self.timeout = min(full, WAIT_NOTICE_S)
        try:
            return fn()
        except sqlite3.OperationalError as e:
            if not _locked(e) or full <= WAIT_NOTICE_S:
                raise
            log.warning("waiting for the results DB %s, locked by another process (up to %g s)", self.path, full)
        finally:
            self.timeout = full
        return fn()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        # BEGIN IMMEDIATE takes the write lock up front, so two writers never deadlock on upgrade.
        try:
            self._begin()
        except sqlite3.OperationalError as e:
            if not _locked(e):
                raise
            raise UserError(f"the results DB is locked by another process (waited {self.timeout:g} s)",
                            path=self.path, fix="wait for the other job to finish writing and run again, or pass "
                                                "--db another file") from None
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _begin(self) -> None:
        self.conn.execute("PRAGMA busy_timeout = %d" % int(min(self.timeout, WAIT_NOTICE_S) * 1000))
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as e:
            if not _locked(e) or self.timeout <= WAIT_NOTICE_S:
                raise
            log.warning("waiting for the results DB %s, locked by another process (up to %g s)", self.path,
                        self.timeout)
        finally:
            self.conn.execute("PRAGMA busy_timeout = %d" % int(self.timeout * 1000))
        self.conn.execute("BEGIN IMMEDIATE")

    # --- runs -------------------------------------------------------------------------
    def start_run(self, kind: str, config: dict, *, name: str = "", seed: int | None = None,
                  inputs: Iterable[dict] = (), log_path: str = "") -> int:
        step = _CURRENT_STEP.get()
        with self.transaction() as c:
            if step is not None:
                c.execute("INSERT OR IGNORE INTO steps (key, kind, name, fields) VALUES (?, ?, ?, ?)",
                          (step["key"], step["kind"], step["name"], canonical_json(step["fields"])))
            cur = c.execute(
                "INSERT INTO runs (kind, name, config, config_hash, git_sha, versions, seed, inputs,"
                " status, started_at, log_path, step_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                (kind, name, canonical_json(config), config_hash(config), git_sha(),
                 json.dumps(engine_versions()), seed, json.dumps(list(inputs)), time.time(), str(log_path),
                 step["key"] if step else None))
            return int(cur.lastrowid)

    def store_run(self, kind: str, config: dict, rows: Iterable[dict], *, name: str = "", seed: int | None = None,
                  inputs: Iterable[dict] = ()) -> int:
        """Store ``rows`` as one finished run of ``kind``; returns its id. A finished run with the
        same config gets its rows replaced instead: scoring the same thing again never adds a
        second run."""
        rows = list(rows)
        for r in rows:  # before the run is started: a refused row leaves no half-made run behind
            self._check_names(r)
        run_id = self.find_done(config, kind=kind)
        if run_id is None:
            run_id = self.start_run(kind, config, name=name, seed=seed, inputs=inputs)
        else:
            self._relink(run_id)
        self.add_scores(run_id, rows, finish=True)
        return run_id

    def _relink(self, run_id: int) -> None:
        """A run stored again by another study step now points to that step (the one whose output
        its rows are): the run -> step link always names the step that last wrote the rows."""
        step = _CURRENT_STEP.get()
        if step is None:
            return
        with self.transaction() as c:
            c.execute("INSERT OR IGNORE INTO steps (key, kind, name, fields) VALUES (?, ?, ?, ?)",
                      (step["key"], step["kind"], step["name"], canonical_json(step["fields"])))
            c.execute("UPDATE runs SET step_key = ? WHERE id = ?", (step["key"], int(run_id)))

    def step_of(self, run_id: int) -> dict | None:
        """The study step that made a run: {key, kind, name, fields}, or None (a command run by hand)."""
        row = self.conn.execute("SELECT s.key, s.kind, s.name, s.fields FROM runs r JOIN steps s ON s.key = r.step_key "
                                "WHERE r.id = ?", (int(run_id),)).fetchone()
        return None if row is None else {"key": row[0], "kind": row[1], "name": row[2],
                                         "fields": parse_json(row[3], f"run {run_id}'s step", path=self.path)}

    def find_done(self, config: dict | str, kind: str | None = None) -> int | None:
        """The id of a finished run with this config (dict or hash), or None: the skip key of sweeps."""
        h = config if isinstance(config, str) else config_hash(config)
        q = "SELECT id FROM runs WHERE config_hash = ? AND status = 'done'"
        args: list = [h]
        if kind:
            q += " AND kind = ?"
            args.append(kind)
        row = self.conn.execute(q + " ORDER BY id DESC LIMIT 1", args).fetchone()
        return int(row[0]) if row else None

    # --- scores -----------------------------------------------------------------------
    def add_scores(self, run_id: int, rows: Iterable[dict], *, finish: bool = False) -> int:
        """Insert score rows in one transaction (all or none); optionally mark the run done."""
        values = []
        for r in rows:
            v = r["value"]
            if v is None or (isinstance(v, float) and not math.isfinite(v)):
                raise UserError(f"score {r.get('metric')} for {r.get('checkpoint')}/{r.get('task')}/"
                                f"{r.get('gender')} is {v!r}", path=self.path,
                                fix="a score must be a finite number; check the inputs that produced it")
            self._check_names(r)
            values.append((run_id, *[r.get(k, _DEFAULTS.get(k)) for k in SCORE_FIELDS]))
        with self.transaction() as c:
            # Replacing makes a re-scored run overwrite, never duplicate, its rows.
            c.executemany(f"INSERT OR REPLACE INTO scores (run_id, {', '.join(SCORE_FIELDS)}) "
                          f"VALUES ({', '.join('?' * (len(SCORE_FIELDS) + 1))})", values)
            if finish:
                c.execute("UPDATE runs SET status = 'done', ended_at = ? WHERE id = ?", (time.time(), run_id))
        return len(values)

    def _check_names(self, r: dict) -> None:
        for k in ("checkpoint", "task", "lang_pair"):  # they head table rows: one printable line each
            check_label(r.get(k) or "", f"{k} name", path=self.path,
                        fix=f"name the {k} with printable characters (e.g. --checkpoint F-tiny)")

    # --- reading ----------------------------------------------------------------------
    def runs(self) -> pd.DataFrame:
        return pd.read_sql_query("SELECT * FROM runs ORDER BY id", self.conn)

    def scores(self, **where) -> pd.DataFrame:
        """Score rows joined with their run's kind/status/config hash; filters by column=value."""
        q = ("SELECT s.*, r.kind AS run_kind, r.status AS run_status, r.config_hash, r.git_sha "
             "FROM scores s JOIN runs r ON r.id = s.run_id")
        if where:
            q += " WHERE " + " AND ".join(f"s.{k} = ?" for k in where)
        df = pd.read_sql_query(q + " ORDER BY s.id", self.conn, params=list(where.values()))
        bad = df["value"].isna() if len(df) else pd.Series(dtype=bool)
        if bad.any():
            raise UserError(f"score row id={int(df['id'][bad].iloc[0])} has no value (NaN/NULL)",
                            path=self.path, fix="re-run the job that wrote it, or delete the row")
        return df


_DEFAULTS = {"lang_pair": "", "subset": "test", "signature": "", "ci_low": None, "ci_high": None,
             "n_utts": None, "n_speakers": None}
