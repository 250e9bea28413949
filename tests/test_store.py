"""The results store: concurrent writers, killed writers, bad DB paths."""
import multiprocessing as mp
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from analysis.store import ResultsStore
from corpora.base.errors import UserError


def _row(i, gender="F", metric="wer", value=10.0):
    return {"checkpoint": f"ck{i}", "task": "asr-e2e", "gender": gender, "metric": metric, "value": value,
            "ci_low": value - 1, "ci_high": value + 1, "n_utts": 10, "n_speakers": 2, "signature": "wer|norm:none"}


def _writer(db, worker, n_runs):
    store = ResultsStore(db)
    for j in range(n_runs):
        rid = store.start_run("test", {"worker": worker, "j": j}, seed=j)
        store.add_scores(rid, [_row(f"{worker}-{j}", g, value=float(j)) for g in ("F", "M", "all")], finish=True)
    store.close()


def test_roundtrip_and_provenance(tmp_path):
    store = ResultsStore(tmp_path / "r.db")
    rid = store.start_run("asr-finetune", {"lr": 1e-3, "ckpt": "F-tiny"}, seed=7, inputs=[{"path": "/x", "size": 1}])
    assert store.find_done({"lr": 1e-3, "ckpt": "F-tiny"}) is None  # still running
    store.add_scores(rid, [_row(1, "F", value=24.3), _row(1, "M", value=20.1)], finish=True)
    assert store.find_done({"ckpt": "F-tiny", "lr": 1e-3}) == rid  # key order does not matter
    runs = store.runs()
    assert runs.loc[0, "status"] == "done" and runs.loc[0, "seed"] == 7
    assert runs.loc[0, "git_sha"] and "torch" in runs.loc[0, "versions"]
    scores = store.scores(checkpoint="ck1")
    assert sorted(scores["value"]) == [20.1, 24.3]
    # Re-scoring the same run replaces rows instead of duplicating them.
    store.add_scores(rid, [_row(1, "F", value=25.0)])
    assert len(store.scores(checkpoint="ck1")) == 2
    assert store.scores(checkpoint="ck1", gender="F")["value"].item() == 25.0


def test_non_finite_score_is_refused(tmp_path):
    store = ResultsStore(tmp_path / "r.db")
    rid = store.start_run("x", {})
    with pytest.raises(UserError, match="finite"):
        store.add_scores(rid, [_row(1, value=float("nan"))])
    assert len(store.scores()) == 0  # nothing half-written


def test_concurrent_writers_lose_no_rows(tmp_path):
    db = tmp_path / "r.db"
    ResultsStore(db).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(db), w, 15)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = ResultsStore(db)
    assert len(store.runs()) == 4 * 15
    assert (store.runs()["status"] == "done").all()
    assert len(store.scores()) == 4 * 15 * 3


def test_killed_writer_leaves_db_readable(tmp_path):
    db = tmp_path / "r.db"
    store = ResultsStore(db)
    rid = store.start_run("x", {"a": 1})
    store.add_scores(rid, [_row(0)], finish=True)
    store.close()
    # A writer that holds an open write transaction with half its rows inserted, then is SIGKILLed.
    script = textwrap.dedent(f"""
        import sys, time
        from analysis.store import ResultsStore
        s = ResultsStore({str(db)!r})
        s.conn.execute("BEGIN IMMEDIATE")
        s.conn.execute("INSERT INTO runs (kind, config, config_hash, git_sha, versions, status, started_at)"
                       " VALUES ('x', '{{}}', 'h', 's', '{{}}', 'running', 0)")
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=os.path.dirname(os.path.dirname(__file__)))
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    store = ResultsStore(db)
    assert len(store.runs()) == 1  # the uncommitted run rolled back
    assert store.scores()["value"].tolist() == [10.0]
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    rid2 = store.start_run("x", {"a": 2})  # and it is writable again
    assert rid2 > rid


def test_corrupt_db_is_a_clear_error(tmp_path):
    db = tmp_path / "r.db"
    db.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(UserError) as e:
        ResultsStore(db)
    assert str(db) in str(e.value) and "--db" in str(e.value)
    assert db.read_bytes().startswith(b"this is not sqlite")  # untouched


def test_read_only_db_refuses_writes_but_serves_reports(tmp_path):
    db = tmp_path / "r.db"
    store = ResultsStore(db)
    store.add_scores(store.start_run("x", {}), [_row(0)], finish=True)
    store.close()
    os.chmod(db, 0o444)  # the user protects a finished study (root too must respect it)
    with pytest.raises(UserError, match="read-only"):
        ResultsStore(db)
    reader = ResultsStore(db, readonly=True)
    assert reader.scores()["value"].tolist() == [10.0]
    with pytest.raises(sqlite3.OperationalError):
        reader.conn.execute("DELETE FROM scores")


def test_readonly_open_of_a_missing_db_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="no results DB"):
        ResultsStore(tmp_path / "missing.db", readonly=True)


def test_unwritable_db_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the DB's directory should be: fails even for root
    with pytest.raises(UserError, match="--db"):
        ResultsStore(blocker / "sub" / "r.db")


def test_nan_in_db_is_reported(tmp_path):
    db = tmp_path / "r.db"
    store = ResultsStore(db)
    rid = store.start_run("x", {})
    store.add_scores(rid, [_row(0)])
    # Another tool wrote the file without the NOT NULL constraint: emulate by rebuilding the table.
    c = store.conn
    c.executescript("""
        PRAGMA foreign_keys=OFF;
        CREATE TABLE s2 AS SELECT * FROM scores; DROP TABLE scores; ALTER TABLE s2 RENAME TO scores;
        UPDATE scores SET value = NULL;
    """)
    with pytest.raises(UserError, match="NaN"):
        store.scores()


def _burst_writer(db, worker, n_runs, barrier):
    """Open the store, wait for the other writer, then write as fast as possible (the worst case
    for the write lock). Each run is re-scored once: a replace, never a second row."""
    store = ResultsStore(db)
    barrier.wait(60)
    for j in range(n_runs):
        rid = store.start_run("burst", {"worker": worker, "j": j}, seed=j)
        rows = [_row(f"{worker}-{j}", g, value=float(j)) for g in ("F", "M", "all")]
        store.add_scores(rid, rows)
        store.add_scores(rid, rows, finish=True)
    store.close()


def test_two_writer_processes_on_a_new_db_lose_and_duplicate_nothing(tmp_path):
    # both processes create the DB (schema) at once, then write 150 runs x 3 rows each, twice
    db = str(tmp_path / "new.db")
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_burst_writer, args=(db, w, 150, barrier)) for w in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    store = ResultsStore(db, readonly=True)
    # the rollback journal (not WAL: unsafe on NFS/Lustre), so no -wal/-shm files beside the DB
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert not (tmp_path / "new.db-wal").exists() and not (tmp_path / "new.db-shm").exists()
    runs = store.runs()
    assert len(runs) == 300 and (runs["status"] == "done").all()
    scores = store.scores()
    got = sorted(zip(scores["checkpoint"], scores["gender"]))
    assert got == sorted((f"ck{w}-{j}", g) for w in ("a", "b") for j in range(150) for g in ("F", "M", "all"))
    assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_folder_without_posix_locks_is_refused_before_the_db_is_written(tmp_path, capsys, monkeypatch):
    """An NFS mount without lockd answers a lock with ENOLCK: the store refuses the folder in one line
    (what SQLite needs, where to put the DB), the sweep's dry run says so too, and nothing is left behind."""
    import errno
    import fcntl

    import analysis.store as store
    from gendergap.cli import main

    def no_locks(fd, op, *args):
        raise OSError(errno.ENOLCK, "No locks available")
    monkeypatch.setattr(fcntl, "lockf", no_locks)
    monkeypatch.setattr(store, "_LOCKING_FOLDERS", set())
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    with pytest.raises(UserError, match="gives no POSIX locks \\(No locks available\\), which SQLite needs"):
        ResultsStore(nfs / "results.db")
    assert list(nfs.iterdir()) == []          # neither the DB nor the probe file
    cfg = Path(__file__).resolve().parent.parent / "configs" / "mini.yaml"
    assert main(["sweep", "--config", str(cfg), "--out", str(nfs / "study"), "--dry-run"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and "--db, or a sweep's --out, on a local disk" in err[0], err
    assert list(nfs.iterdir()) == []
