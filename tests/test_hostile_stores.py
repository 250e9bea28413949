"""Hostile stores (issue 37): a results DB handed with --db and a prepared-audio cache left on disk are
data, not trusted by existence. Real SQLite and real FLAC files, the real CLI run in-process as a fresh
process would show it (tests/cli_helpers.run_fresh); no mocks."""
from __future__ import annotations

import csv
import hashlib
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_helpers import run_fresh  # noqa: E402
from scoring_data import make_corpus, write_inputs  # noqa: E402

# ----------------------------------------------------------------------------------------- results DBs

# each: what a crafted DB adds to a genuine one, and the object kind the refusal must name
DB_CASES = [
    ("trigger-empties-scores", "CREATE TRIGGER wipe AFTER INSERT ON scores BEGIN DELETE FROM scores; END", "trigger"),
    ("scores-is-a-view", "DROP TABLE scores; CREATE VIEW scores AS SELECT id, id AS run_id, 'F' AS checkpoint, "
                         "'asr' AS task, '' AS lang_pair, 'test' AS subset, 'all' AS gender, 'wer' AS metric, "
                         "0.0 AS value, NULL AS ci_low, NULL AS ci_high, 1 AS n_utts, 1 AS n_speakers, "
                         "'' AS signature FROM runs", "view"),
    ("unknown-table", "CREATE TABLE notes (x TEXT)", "table"),
    ("unknown-index", "CREATE INDEX by_value ON scores(value)", "index"),
]
DB_COMMANDS = {
    "score-asr": lambda d, db: ["score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "hyp.tsv", "--speakers",
                                d / "utts.tsv", "--db", db, "--checkpoint", "F-tiny"],
    "trace": lambda d, db: ["trace", "--db", db, "--run", 1],
}


def _genuine_db(path: Path) -> None:
    from analysis.store import ResultsStore
    with ResultsStore(path) as store:
        store.store_run("score-asr", {"x": 1}, [{"checkpoint": "F-tiny", "task": "asr", "gender": "all",
                                                 "metric": "wer", "value": 12.5}])


def _files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("command", sorted(DB_COMMANDS))
@pytest.mark.parametrize("case,sql,kind", DB_CASES, ids=[c[0] for c in DB_CASES])
@pytest.mark.timeout(60)
def test_a_crafted_results_db_is_refused_in_one_line(tmp_path, capfd, monkeypatch, case, sql, kind, command):
    write_inputs(tmp_path, *make_corpus(n_utts=16, n_speakers=4, seed=1))
    db = tmp_path / "crafted.db"
    _genuine_db(db)
    with sqlite3.connect(db) as c:
        c.executescript(sql)
    before = _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_fresh(capfd, "-q", *DB_COMMANDS[command](tmp_path, db))
    assert rc == 2 and len(err) == 1, err[-40:]
    assert out == ""                       # refused before any work: no score printed, then refused
    assert f"holds a{'n' if kind == 'index' else ''} {kind}" in err[0] and ".dump" in err[0], err[0]
    assert _files(tmp_path) == before      # the DB untouched (no trigger fired), nothing else written


@pytest.mark.timeout(60)
def test_the_genuine_db_still_opens(tmp_path, capfd, monkeypatch):
    # the refusal above must come from the crafted object, not from any DB
    db = tmp_path / "ok.db"
    _genuine_db(db)
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_fresh(capfd, "trace", "--db", db, "--run", 1, "--json")
    assert rc == 0, err[-40:]


# ------------------------------------------------------------------------------- prepared-audio cache

def _truncate(cache, files, index):
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2])   # the FLAC header still says the full length


def _symlink_to_another(cache, files, index):
    files[0].unlink()
    files[0].symlink_to(files[1])                   # another speaker's copy under this key


def _edit_frames(cache, files, index):
    rows = list(csv.DictReader(index.open(newline=""), delimiter="\t"))
    for r in rows:
        r["frames"] = str(int(r["frames"]) + 4000)
    with index.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def _truncate_unindexed(cache, files, index):
    index.unlink()                                  # as a run killed before its index merge leaves it
    _truncate(cache, files, index)


CACHE_CASES = [_truncate, _symlink_to_another, _edit_frames, _truncate_unindexed]


@pytest.mark.parametrize("tamper", CACHE_CASES, ids=[f.__name__.strip("_") for f in CACHE_CASES])
def test_a_tampered_cache_entry_is_rebuilt_not_used(tmp_path, tamper):
    from corpora.prepared_audio import AudioCache, Source, Target
    rng = np.random.default_rng(0)
    srcs = []
    for i, sec in enumerate((0.7, 1.1, 0.9)):
        p = tmp_path / "src" / f"spk{i}.wav"
        p.parent.mkdir(exist_ok=True)
        sf.write(p, (0.2 * rng.standard_normal(int(sec * 48000))).astype(np.float32), 48000)
        srcs.append(Source(str(p)))
    cache = AudioCache(tmp_path / "cache", Target(16000, "flac"))
    first = cache.prepare(srcs, jobs=1)
    truth = {s: sf.read(first[s].path, dtype="int16")[0] for s in srcs}
    tamper(cache, [Path(first[s].path) for s in srcs], cache.index_path)
    again = cache.prepare(srcs, jobs=1)
    for s in srcs:
        p = Path(again[s].path)
        assert not p.is_symlink() and again[s].frames == len(truth[s]), s
        assert np.array_equal(sf.read(p, dtype="int16")[0], truth[s]), s   # decodes whole, its own samples
    rows = list(csv.DictReader(cache.index_path.open(newline=""), delimiter="\t"))
    assert sorted(int(r["frames"]) for r in rows) == sorted(len(t) for t in truth.values())
