"""Hostile stores (issue 37): a results DB handed with --db and a prepared-audio cache left on disk are
data, not trusted by existence; the feature store's own files (issue 47) are checked before they are
served. Real SQLite and real FLAC files, real extractions, the real CLI run in-process as a fresh
process would show it (tests/cli_helpers.run_fresh); no mocks."""
from __future__ import annotations

import csv
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
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
    # an earlier study's variance components, read before the dry run plans anything
    "sweep-variance-from": lambda d, db: ["sweep", "--config",
                                          Path(__file__).resolve().parents[1] / "configs" / "mini.yaml",
                                          "--dry-run", "--out", d / "o", "--variance-from", db],
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


# ------------------------------------------------------------------------- feature store (issue 47)
# What the store serves is what it stored: real FBANK (or shipped tiny checkpoint) extractions, real
# files tampered with as a user could, then the next request either recomputes (the features equal a
# fresh store's, not the tampered ones) or is one line; a planted symlink never has its target written.

def _same_length_rows(root: Path, n: int = 4, sec: float = 0.6) -> pd.DataFrame:
    """``n`` wavs of one length (so the same sample count: a hash edited to another file's would make
    their segments one), each its own tone."""
    rng = np.random.default_rng(7)
    (root / "wav").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        t = np.arange(int(sec * 16000)) / 16000
        x = 0.3 * np.sin(2 * np.pi * (150 + 70 * i) * t) + 0.02 * rng.standard_normal(len(t))
        sf.write(root / "wav" / f"u{i}.wav", x.astype(np.float32), 16000, subtype="PCM_16")
        rows.append({"id": f"u{i}", "audio": str(root / "wav" / f"u{i}.wav"), "offset": 0.0, "duration": sec})
    return pd.DataFrame(rows)


def _write_table(rows: pd.DataFrame, path: Path) -> None:
    from corpora.table import new_table, write_table
    write_table(new_table([{**r, "sample_rate": 16000, "speaker": "s", "gender": "F", "corpus": "c", "lang": "fr",
                            "split": "train", "text": "a"} for r in rows.to_dict("records")]), path)


def _fresh(tmp_path: Path, rows: pd.DataFrame, extractor=None) -> dict:
    """Each row's features as a new store extracts them from the files as they are now."""
    from ssl_pretrain.feature_store import FbankExtractor, FeatureStore
    root = tmp_path / f"fresh-{len(list(tmp_path.glob('fresh-*')))}"
    view = FeatureStore(root).view(extractor or FbankExtractor(), rows, "all", progress=False)
    return {u: np.array(view.get(u)) for u in rows["id"]}


def _rewrite_keeping_mtime(path: Path, data: bytes) -> None:
    """Other bytes in place, its mtime (and atime) set back: what size + mtime cannot see."""
    st = path.stat()
    assert len(data) == st.st_size
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _member_bytes(entry: Path, view, uid: str) -> tuple[int, int]:
    _, _, _, data_offset, n = view._member(uid, 0)
    return data_offset, n * view.dim * view.dtype.itemsize


def _shard_serves_another(entry, view):
    # u0's data overwritten by u1's inside the shard (same length): the old store served u1 as u0
    data = bytearray((entry / "shard-00000.zip").read_bytes())
    (a, n), (b, _) = _member_bytes(entry, view, "u0"), _member_bytes(entry, view, "u1")
    data[a:a + n] = data[b:b + n]
    _rewrite_keeping_mtime(entry / "shard-00000.zip", bytes(data))


def _index_points_elsewhere(entry, view):
    # a well-formed index: u0's member lines swapped with u1's offsets (same lengths, same file size)
    path = entry / "shard-00000.tsv"
    lines = path.read_text().split("\n")
    head = lines[0].split("\t")
    rows = [line.split("\t") for line in lines[1:] if line]
    seg0, seg1 = view._seg["u0"], view._seg["u1"]
    by = {(r[head.index("seg")], r[head.index("layer")]): r for r in rows}
    for c in ("npy_offset", "data_offset"):
        i = head.index(c)
        r0, r1 = by[(str(seg0), "0")], by[(str(seg1), "0")]
        r0[i], r1[i] = r1[i], r0[i]
    _rewrite_keeping_mtime(path, ("\n".join(["\t".join(head), *("\t".join(r) for r in rows)]) + "\n").encode())


def _rows_segments_swapped(entry, view):
    # rows.tsv: the segment numbers of u0's and u1's rows swapped (the file keeps its size)
    path = entry / "rows.tsv"
    lines = path.read_text().split("\n")
    i0, i1 = 1 + view._seg["u0"], 1 + view._seg["u1"]
    a, b = lines[i0].split("\t"), lines[i1].split("\t")
    a[0], b[0] = b[0], a[0]
    lines[i0], lines[i1] = "\t".join(a), "\t".join(b)
    _rewrite_keeping_mtime(path, "\n".join(lines).encode())


ENTRY_TAMPERS = [_shard_serves_another, _index_points_elsewhere, _rows_segments_swapped]


@pytest.mark.parametrize("tamper", ENTRY_TAMPERS, ids=[f.__name__.strip("_") for f in ENTRY_TAMPERS])
@pytest.mark.timeout(120)
def test_a_tampered_feature_store_entry_is_extracted_again(tmp_path, caplog, tamper):
    from ssl_pretrain.feature_store import COUNTERS, FbankExtractor, FeatureStore
    rows = _same_length_rows(tmp_path)
    store = FeatureStore(tmp_path / "store")
    view = store.view(FbankExtractor(), rows, "all", progress=False)
    truth = {u: np.array(view.get(u)) for u in rows["id"]}
    assert not np.array_equal(truth["u0"], truth["u1"])
    tamper(view.dir, view)
    before = COUNTERS["utterances"]
    with caplog.at_level(logging.WARNING):
        again = store.view(FbankExtractor(), rows, "all", progress=False)
    assert COUNTERS["utterances"] > before                     # recomputed, not served
    assert again.dir == view.dir                               # repaired in place
    fresh = _fresh(tmp_path, rows)
    for u in rows["id"]:
        assert np.array_equal(again.get(u), fresh[u]) and np.array_equal(again.get(u), truth[u]), u
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "not used" in warned[0] and str(view.dir) in warned[0], warned
    caplog.clear()
    with caplog.at_level(logging.WARNING):                     # repaired: served quietly from now on
        store.view(FbankExtractor(), rows, "all", progress=False)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.timeout(180)
def test_another_models_shard_copied_into_an_entry_is_not_served(tmp_path, caplog):
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import COUNTERS, FeatureStore, SSLExtractor
    shipped = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
    male, female = (SSLExtractor(CheckpointRef.resolve(shipped / f"tiny-{g}.safetensors")) for g in ("male", "female"))
    rows = _same_length_rows(tmp_path)
    store = FeatureStore(tmp_path / "store")
    m, f = store.view(male, rows, "all", progress=False), store.view(female, rows, "all", progress=False)
    assert m.dim == f.dim and m.n_layers == f.n_layers and not np.array_equal(m.get("u0"), f.get("u0"))
    for name in ("shard-00000.zip", "shard-00000.tsv"):        # the male model's shard, index and all
        shutil.copyfile(m.dir / name, f.dir / name)
    before = COUNTERS["utterances"]
    with caplog.at_level(logging.WARNING):
        again = store.view(female, rows, "all", progress=False)
    assert COUNTERS["utterances"] - before == len(rows)
    fresh = _fresh(tmp_path, rows, female)
    for u in rows["id"]:
        assert np.array_equal(again.get(u), fresh[u]), u
    assert any("shard-00000" in r.getMessage() and "sha256" in r.getMessage() for r in caplog.records)


def _cache_line_edited(rows, cache):
    # u0's hash set to u1's: u0's rows would become u1's segments and be served u1's features
    lines = cache.read_text().split("\n")
    sha = {ln.split("\t")[0]: ln.split("\t")[-1] for ln in lines[1:] if "\t" in ln}
    u0, u1 = rows["audio"][0], rows["audio"][1]
    cache.write_text("\n".join(ln.replace(sha[u0], sha[u1]) if ln.startswith(u0 + "\t") else ln for ln in lines))


def _audio_replaced_same_size(rows, cache):
    # u0.wav's bytes replaced by u1.wav's (same size), its mtime set back: the cache's size + mtime still match
    _rewrite_keeping_mtime(Path(rows["audio"][0]), Path(rows["audio"][1]).read_bytes())


CACHE_TAMPERS = [_cache_line_edited, _audio_replaced_same_size]


@pytest.mark.parametrize("tamper", CACHE_TAMPERS, ids=[f.__name__.strip("_") for f in CACHE_TAMPERS])
@pytest.mark.timeout(120)
def test_the_audio_hash_cache_serves_only_the_files_content(tmp_path, tamper):
    from corpora.segment_content import CACHE
    from ssl_pretrain.feature_store import FbankExtractor, FeatureStore
    rows = _same_length_rows(tmp_path)
    store = FeatureStore(tmp_path / "store")
    first = store.view(FbankExtractor(), rows, "all", progress=False)
    assert not np.array_equal(first.get("u0"), first.get("u1"))
    tamper(rows, tmp_path / "store" / CACHE)
    again = store.view(FbankExtractor(), rows, "all", progress=False)
    fresh = _fresh(tmp_path, rows)                           # from the files as they are now
    for u in rows["id"]:
        assert np.array_equal(again.get(u), fresh[u]), u


@pytest.mark.timeout(60)
def test_a_symlink_at_a_lock_name_keeps_its_target(tmp_path, capfd, monkeypatch):
    from corpora.base.errors import UserError
    from ssl_pretrain.feature_store import FbankExtractor, FeatureStore
    rows = _same_length_rows(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    # the audio-hash cache's lock, in a store not written yet (the CLI: one line, exit 2)
    (tmp_path / "fs").mkdir()
    (tmp_path / "fs" / ".audio-sha256.tsv.lock").symlink_to(victim)
    _write_table(rows, tmp_path / "t.tsv")
    monkeypatch.chdir(tmp_path)
    rc, out, err = run_fresh(capfd, "-q", "ckpt", "features", "FBANK", "--table", tmp_path / "t.tsv",
                             "--feature-store", tmp_path / "fs")
    assert rc == 2 and len(err) == 1 and "lock file is a symlink" in err[0], err
    assert victim.read_text() == "precious\n"
    # an entry's lock, when the entry is written again (its entry.json gone)
    view = FeatureStore(tmp_path / "store").view(FbankExtractor(), rows, "all", progress=False)
    (view.dir / "entry.json").unlink()
    (view.dir / "lock").unlink()
    (view.dir / "lock").symlink_to(victim)
    with pytest.raises(UserError, match="lock file is a symlink"):
        FeatureStore(tmp_path / "store").view(FbankExtractor(), rows, "all", progress=False)
    assert victim.read_text() == "precious\n"


@pytest.mark.timeout(60)
def test_symlinks_at_the_old_temporary_names_keep_their_targets(tmp_path):
    import kaldiio

    from ssl_pretrain.feature_store import FbankExtractor, FeatureStore, export_view
    rows = _same_length_rows(tmp_path)
    victims = {name: tmp_path / f"victim-{name.strip('.')}" for name in
               (".shard-00000.zip.tmp", ".feats.ark.tmp", ".feats.scp.tmp")}
    for v in victims.values():
        v.write_text("precious\n")
    store = FeatureStore(tmp_path / "store")
    entry = store.view(FbankExtractor(), rows, "all", progress=False).dir
    (entry / "entry.json").unlink()                           # written again, shard 0 included
    (entry / ".shard-00000.zip.tmp").symlink_to(victims[".shard-00000.zip.tmp"])
    view = store.view(FbankExtractor(), rows, "all", progress=False)
    out = tmp_path / "kaldi"
    out.mkdir()
    for name in (".feats.ark.tmp", ".feats.scp.tmp"):
        (out / name).symlink_to(victims[name])
    export_view(view, out, fmt="kaldi")
    assert all(v.read_text() == "precious\n" for v in victims.values())
    with kaldiio.ReadHelper(f"scp:{out / 'feats.scp'}") as reader:
        got = dict(reader)
    assert sorted(got) == sorted(rows["id"]) and np.allclose(got["u0"], view.get("u0")[0].astype(np.float32))
    fresh = _fresh(tmp_path, rows)
    assert all(np.array_equal(view.get(u), fresh[u]) for u in rows["id"])


META_EDITS = {
    "not-json": lambda m: "{" + json.dumps(m)[1:-1],
    "nan": lambda m: json.dumps({**m, "frame_shift_s": float("nan")}),
    "deep": lambda m: json.dumps({**m, "runtime": json.loads("[" * 200 + "]" * 200)}),
    "wrong-type": lambda m: json.dumps({**m, "dim": str(m["dim"])}),
    "duplicate-key": lambda m: json.dumps(m)[:-1] + ', "complete": true}',
    "bad-record": lambda m: json.dumps({**m, "files": {**m["files"], "rows.tsv": {"bytes": -1, "sha256": "x"}}}),
    "not-an-object": lambda m: json.dumps([m]),
}


@pytest.mark.parametrize("edit", sorted(META_EDITS))
@pytest.mark.timeout(60)
def test_a_malformed_entry_json_is_an_absent_entry(tmp_path, caplog, edit):
    from ssl_pretrain.feature_store import COUNTERS, FbankExtractor, FeatureStore
    rows = _same_length_rows(tmp_path)
    store = FeatureStore(tmp_path / "store")
    view = store.view(FbankExtractor(), rows, "all", progress=False)
    meta = view.dir / "entry.json"
    meta.write_text(META_EDITS[edit](json.loads(meta.read_text())))
    before = COUNTERS["utterances"]
    with caplog.at_level(logging.WARNING):
        again = store.view(FbankExtractor(), rows, "all", progress=False)
    assert COUNTERS["utterances"] - before == len(rows) and again.dir == view.dir
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1 and "entry.json" in warned[0] and "\n" not in warned[0], warned
    fresh = _fresh(tmp_path, rows)
    assert all(np.array_equal(again.get(u), fresh[u]) for u in rows["id"])
    assert len(json.loads(meta.read_text())["files"]) == 3        # written whole again: rows.tsv, shard 0


@pytest.mark.parametrize("uid", ["../../escape", "ABS", "a/../../escape"])
@pytest.mark.timeout(60)
def test_an_utterance_id_never_names_a_file_outside_the_export(tmp_path, capfd, monkeypatch, uid):
    uid = str(tmp_path / "abs-escape") if uid == "ABS" else uid
    rows = _same_length_rows(tmp_path, n=2).assign(id=["corpus/ok", uid])
    _write_table(rows, tmp_path / "t.tsv")
    out = tmp_path / "a" / "out"
    monkeypatch.chdir(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*") if "fs" not in p.parts)
    rc, _, err = run_fresh(capfd, "-q", "ckpt", "features", "FBANK", "--table", tmp_path / "t.tsv", "--feature-store",
                           tmp_path / "fs", "--out", out)
    err = [line for line in err if not line.startswith("features fbank")]   # the extraction's progress bar
    assert rc == 2 and len(err) == 1 and "cannot name a file inside" in err[0], err
    assert sorted(p for p in tmp_path.rglob("*") if "fs" not in p.parts) == before   # nothing written anywhere


@pytest.mark.timeout(60)
def test_a_merged_tables_corpus_slash_id_is_exported_in_a_subfolder(tmp_path):
    from ssl_pretrain.feature_store import FbankExtractor, FeatureStore, export_view
    rows = _same_length_rows(tmp_path, n=2).assign(id=["mtedx/a1_0", "plain"])
    view = FeatureStore(tmp_path / "fs").view(FbankExtractor(), rows, [0], progress=False)
    index = export_view(view, tmp_path / "out")
    exported = np.load(tmp_path / "out" / "mtedx" / "a1_0.npy")
    assert np.array_equal(exported, view.get("mtedx/a1_0")[0].astype(np.float32))
    assert (tmp_path / "out" / "plain.npy").is_file() and "mtedx/a1_0\t" in index.read_text()
