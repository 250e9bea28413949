"""Issue 29, analysis/audio/error paths: hostile or broken inputs made here, each refused in one line
(exit 2, no traceback) with the old files intact, or read safely (a marker file never appears)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli_helpers import one_error_line
from cli_helpers import run_text as run
from scoring_data import make_corpus, write_inputs


@pytest.fixture()
def perfect(tmp_path):
    """A corpus whose hypotheses equal the references (WER 0, BLEU 100) and the three files."""
    ids, refs, _, spk, gen = make_corpus(n_utts=40, n_speakers=4, seed=1)
    write_inputs(tmp_path, ids, refs, refs, spk, gen)
    return ids, refs, tmp_path


# --- item 6: a decoder's third column is refused, or read when named ------------------------------------
def test_hypotheses_with_a_score_column_are_refused_at_the_line(perfect, capsys):
    ids, refs, d = perfect
    (d / "scored.tsv").write_text("".join(f"{i}\t{t}\t0.93\n" for i, t in zip(ids, refs)), encoding="utf-8")
    for kind in ("asr", "st"):
        rc, out, err = run(capsys, "score", kind, "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                           "--speakers", d / "utts.tsv", "--bootstrap", 0, "--json", d / f"{kind}.json")
        line = one_error_line(err)
        assert rc == 2 and "scored.tsv:1: 3 tab-separated fields" in line and "--hyp-column" in line
        assert not (d / f"{kind}.json").exists()


def test_hyp_column_reads_the_named_field_and_scores_perfectly(perfect, capsys):
    ids, refs, d = perfect
    (d / "scored.tsv").write_text("".join(f"{i}\t{t}\t0.93\n" for i, t in zip(ids, refs)), encoding="utf-8")
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0, "--hyp-column", 2, "--json", d / "a.json")
    assert rc == 0, err
    assert json.loads((d / "a.json").read_text())["all"] == 0.0
    rc, out, err = run(capsys, "score", "st", "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0, "--hyp-column", 2, "--json", d / "b.json")
    assert rc == 0, err
    assert json.loads((d / "b.json").read_text())["all"] == pytest.approx(100.0)
    # column 3 is the score: a different number, so the option really chooses the field
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0, "--hyp-column", 3, "--json", d / "c.json")
    assert rc == 0 and json.loads((d / "c.json").read_text())["all"] > 80


def test_mustshe_hypotheses_with_a_third_field_are_refused(tmp_path):
    from types import SimpleNamespace

    from analysis.mustshe import read_hypotheses
    from corpora.base.errors import UserError

    rows = [SimpleNamespace(id=f"s{i}") for i in range(3)]
    p = tmp_path / "hyp.tsv"
    p.write_text("ID\tTEXT\ns0\tbonjour\ns1\tmerci\t0.5\ns2\tau revoir\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        read_hypotheses(p, rows)
    assert str(e.value).startswith(f"{p}:3: 3 tab-separated fields")
    p.write_text("s0\tbonjour\ns1\tmerci\ns2\tau revoir\n", encoding="utf-8")
    assert read_hypotheses(p, rows) == ["bonjour", "merci", "au revoir"]


# --- item 13: NUL bytes in hypotheses --------------------------------------------------------------------
def test_nul_bytes_in_hypotheses_are_refused_at_the_line(perfect, capsys):
    ids, refs, d = perfect
    lines = [f"{i}\t{t}\n" for i, t in zip(ids, refs)]
    lines[4] = f"{ids[4]}\t{refs[4]}\x00\x00\n"
    (d / "nul.tsv").write_text("".join(lines), encoding="utf-8")
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "nul.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0)
    assert rc == 2 and "nul.tsv:5: NUL byte in the hypotheses file" in one_error_line(err)


# --- item 7: the report is all new or all old ------------------------------------------------------------
def _results_db(path, bump=0.0):
    from analysis.store import ResultsStore

    def r(ck, task, g, metric, v, lp=""):
        return {"checkpoint": ck, "task": task, "lang_pair": lp, "subset": "test", "gender": g, "metric": metric,
                "value": v, "ci_low": v - 2, "ci_high": v + 2, "n_utts": 50, "n_speakers": 6}
    with ResultsStore(path) as store:
        rid = store.start_run("score-wer", {"ck": "F", "bump": bump}, seed=1)
        store.add_scores(rid, [r(ck, "asr-e2e", g, "wer", v + bump) for ck in ("F-tiny", "M-tiny")
                               for g, v in (("F", 17.0), ("M", 21.0), ("all", 19.0), ("delta_rel", -21.0))]
                         + [r("F-tiny", "st", g, "bleu", v + bump, "fr-en")
                            for g, v in (("F", 15.7), ("M", 14.3), ("all", 15.0), ("delta_rel", 9.3))], finish=True)
    return path


def _snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


CLI = [sys.executable, "-c", "import sys; from gendergap.cli import main; sys.exit(main())"]


def test_report_killed_mid_way_leaves_the_old_report_whole_and_the_next_run_cleans_up(tmp_path):
    import resource
    import signal

    old_db, new_db, out = _results_db(tmp_path / "old.db"), _results_db(tmp_path / "new.db", 5.0), tmp_path / "rep"
    assert subprocess.run(CLI + ["report", "--db", old_db, "--out", out], capture_output=True).returncode == 0
    (out / "notes.txt").write_text("my notes")   # the user's own file in the report folder
    before = _snapshot(out)
    assert {"report.md", "table4_asr.md", "delta_rel.png"} <= set(before)

    # A real kill mid-way: with a 4 kB file-size limit the kernel's SIGXFSZ ends the process at its first
    # larger file (a PNG), after the small tables are written. Python ignores SIGXFSZ: restore the default.
    killable = [sys.executable, "-c", "import signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "
                                      "from gendergap.cli import main; sys.exit(main())"]
    proc = subprocess.run(killable + ["report", "--db", new_db, "--out", out], capture_output=True,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
    assert proc.returncode == -signal.SIGXFSZ, proc.stderr.decode()[-2000:]
    assert _snapshot(out) == before   # not one new table next to the old report.md
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".rep.")]
    assert leftovers and all(n.endswith(".partial") for n in leftovers)   # the killed run's staging dir
    (out / ".report.md.x1y2.tmp").write_text("half")                      # an older version's temp file

    proc = subprocess.run(CLI + ["report", "--db", new_db, "--out", out], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    after = _snapshot(out)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".rep.")] == []
    assert ".report.md.x1y2.tmp" not in after and after["notes.txt"] == b"my notes"
    assert after["table4_asr.md"] != before["table4_asr.md"] and "26.0" in after["table4_asr.md"].decode()


def _in_tiny_tmpfs(tmp_path, script: str, size: str = "1m"):
    """Run ``script`` (sh) with a tmpfs of ``size`` mounted at tmp_path/fs, in a private mount namespace
    (unshare -rm: root in a user namespace, nothing mounted outside it). Skips where that is refused."""
    import shutil
    # A full or read-only disk can only be shown honestly on a real small file system; faking ENOSPC in
    # Python would test the fake. util-linux's unshare is on Debian (these tests run in make test); a
    # machine without it, or whose kernel refuses user namespaces, cannot make one, hence the skips.
    if not shutil.which("unshare"):
        # util-linux is essential on Debian (always there in make test); another OS may lack unshare(1),
        # and without it no small real file system can be made to fill
        pytest.skip("no unshare(1): cannot make a small file system to fill")
    fs = tmp_path / "fs"
    fs.mkdir()
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {fs}"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        # the kernel or a container policy refuses unprivileged user namespaces (the reason is the mount's
        # own message); this machine allows them, so the tests run in make test
        pytest.skip(f"cannot mount a tmpfs in a user namespace here ({probe.stderr.strip()})")
    import os
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}  # this checkout's gendergap
    return subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size={size} tmpfs {fs} && {script}"],
                          capture_output=True, text=True, cwd=tmp_path, env=env)


def test_report_on_a_full_disk_is_one_line_and_the_old_report_stays(tmp_path):
    old_db, new_db = _results_db(tmp_path / "old.db"), _results_db(tmp_path / "new.db", 5.0)
    cli = " ".join(f"'{a}'" for a in CLI)
    # the first report fits; then the disk is filled to 12 kB short: the new report's PNGs do not fit
    script = (f"{cli} report --db {old_db} --out fs/rep >/dev/null 2>&1 && cp -r fs/rep before && "
              f"(dd if=/dev/zero of=fs/fill bs=4k 2>/dev/null; truncate -s -12k fs/fill); "
              f"{cli} -q report --db {new_db} --out fs/rep; echo rc=$?; cp -r fs/rep after; ls -a fs > listing")
    proc = _in_tiny_tmpfs(tmp_path, script, size="2m")
    assert "rc=2" in proc.stdout, proc.stdout + proc.stderr
    line = one_error_line(proc.stderr)
    assert "fs/rep: No space left on device -- free space" in line
    assert _snapshot(tmp_path / "after") == _snapshot(tmp_path / "before")
    assert sorted((tmp_path / "listing").read_text().split()) == [".", "..", "fill", "rep"]   # no temp dir left


# --- item 10: FIFOs, devices and directories in the audio column -------------------------------------------
GENERIC_MAP = "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur"


@pytest.mark.parametrize("special", ["fifo", "directory", "device"])
def test_special_files_in_the_audio_column_are_refused_before_any_open(tmp_path, special):
    import os

    from fixtures_corpora import make_generic
    csv = make_generic(tmp_path)
    short = csv.parent / "wav" / "short.wav"
    short.unlink()
    if special == "fifo":
        os.mkfifo(short)           # nobody writes to it: opening it would block for ever
    elif special == "directory":
        short.mkdir()
    else:
        short.symlink_to("/dev/zero")   # a character device; reading it never ends
    out = tmp_path / "o.tsv"
    out.write_text("an older table\n")
    # in a subprocess with a timeout: the old code hangs here (and ignores Ctrl-C) instead of failing
    proc = subprocess.run(CLI + ["-q", "corpus", "index", "--kind", "generic", "--root", csv, "--map", GENERIC_MAP,
                                 "--out", out, "--workers", "2"], capture_output=True, text=True, timeout=60)
    line = one_error_line(proc.stderr)
    kind = {"fifo": "a FIFO (named pipe)", "directory": "a directory", "device": "a device"}[special]
    assert proc.returncode == 2 and f"{csv}:4:" in line and f"is {kind}, not a regular file" in line, line
    assert out.read_text() == "an older table\n"


def test_corpus_index_on_a_full_disk_is_one_line_and_keeps_the_old_table(tmp_path):
    from fixtures_corpora import make_generic
    csv = make_generic(tmp_path)
    cli = " ".join(f"'{a}'" for a in CLI)
    script = (f"echo 'an older table' > fs/t.tsv && (dd if=/dev/zero of=fs/fill bs=4k 2>/dev/null; true) && "
              f"{cli} -q corpus index --kind generic --root {csv} --map {GENERIC_MAP} --out fs/t.tsv; echo rc=$?; "
              f"cat fs/t.tsv; ls -a fs > listing")
    proc = _in_tiny_tmpfs(tmp_path, script, size="64k")
    assert "rc=2" in proc.stdout and "an older table" in proc.stdout, proc.stdout + proc.stderr
    assert "No space left on device -- free space" in one_error_line(proc.stderr)
    assert sorted((tmp_path / "listing").read_text().split()) == [".", "..", "fill", "t.tsv"]


# --- item 11: a DB from a newer gendergap; item 12: a DB locked by another writer ---------------------------
def test_a_db_from_a_newer_schema_is_named_as_such(tmp_path, capsys):
    import sqlite3
    db = _results_db(tmp_path / "new.db")
    with sqlite3.connect(db) as c:   # what a later version might do: a renamed column, a higher version
        c.execute("ALTER TABLE scores RENAME COLUMN value TO score")
        c.execute("PRAGMA user_version = 7")
    before = db.read_bytes()
    rc, out, err = run(capsys, "report", "--db", db, "--out", tmp_path / "rep")
    assert rc == 2 and "this DB was written by a newer gendergap (schema 7 > 1)" in one_error_line(err)
    ids, refs, d = _perfect_files(tmp_path)
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "hyp.tsv", "--speakers",
                       d / "utts.tsv", "--bootstrap", 0, "--db", db, "--checkpoint", "X")
    assert rc == 2 and "schema 7 > 1" in one_error_line(err) and db.read_bytes() == before   # not altered
    with sqlite3.connect(db) as c:   # the same renamed column without a version: named, not a KeyError
        c.execute("PRAGMA user_version = 0")
    rc, out, err = run(capsys, "report", "--db", db, "--out", tmp_path / "rep")
    assert rc == 2 and "scores table has no column(s) value" in one_error_line(err)


def _perfect_files(tmp_path):
    d = tmp_path / "inputs"
    d.mkdir()
    ids, refs, _, spk, gen = make_corpus(n_utts=20, n_speakers=4, seed=2)
    write_inputs(d, ids, refs, refs, spk, gen)
    return ids, refs, d


HOLD_LOCK = ("import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
             "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(float(sys.argv[2])); "
             "c.execute('COMMIT')")


def _hold_lock(db, seconds):
    proc = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(db), str(seconds)], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_locked_db_waits_with_a_message_then_says_locked_never_move_it_away(tmp_path, caplog):
    from analysis.store import ResultsStore
    from corpora.base.errors import UserError

    db = _results_db(tmp_path / "r.db")
    before = db.read_bytes()
    holder = _hold_lock(db, 30)
    try:
        with pytest.raises(UserError) as e, caplog.at_level("WARNING"):
            ResultsStore(db, timeout=3)
        msg = str(e.value)
        assert "locked by another process" in msg and "move it away" not in msg and "not a gendergap" not in msg
        assert "waiting for the results DB" in caplog.text and "locked by another process" in caplog.text
        with pytest.raises(UserError) as e:
            ResultsStore(db, timeout=3, readonly=True)
        assert "locked by another process" in str(e.value)
    finally:
        holder.kill()
        holder.wait()
    assert db.read_bytes() == before
    # a lock released while we wait: the write goes through after the message
    caplog.clear()
    holder = _hold_lock(db, 3)
    with caplog.at_level("WARNING"), ResultsStore(db, timeout=30) as store:
        store.store_run("score-wer", {"late": 1}, [], name="late")
    holder.wait()
    assert "waiting for the results DB" in caplog.text
    with ResultsStore(db, readonly=True) as store:
        assert "late" in set(store.runs()["name"])


# --- item 11: hostile or edited checkpoints: one line, nothing runs --------------------------------------
SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped" / "tiny-female.safetensors"


class RunsACommand:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os
        return os.system, (f"touch {self.marker}",)


def _hf_folder(tmp_path, extra=None):
    """A transformers folder converted from the shipped checkpoint, its weights as pytorch_model.bin."""
    import torch
    from safetensors.torch import load_file

    from ssl_pretrain.convert import convert_checkpoint
    hf = tmp_path / "hf"
    convert_checkpoint(SHIPPED, hf)
    weights = load_file(hf / "model.safetensors")
    (hf / "model.safetensors").unlink()
    torch.save({**weights, **(extra or {})}, hf / "pytorch_model.bin")
    return hf


def test_a_transformers_folder_with_a_crafted_pytorch_model_bin_runs_nothing(tmp_path, capsys):
    marker = tmp_path / "pwned"
    hf = _hf_folder(tmp_path, {"x": RunsACommand(marker)})
    from asr_helpers import write_corpus
    table = write_corpus(tmp_path / "data")["table"]
    capsys.readouterr()   # the conversion's progress bar
    reg = tmp_path / "r.json"
    for argv in (["ckpt", "--registry", reg, "add", "x", hf],
                 ["ckpt", "features", hf, "--table", table, "--feature-store", tmp_path / "fs"]):
        rc, out, err = run(capsys, *argv)
        line = one_error_line(err)
        assert rc == 2 and f"{hf / 'pytorch_model.bin'}: refusing to unpickle posix.system" in line, line
    assert not marker.exists() and not reg.exists()


def test_a_genuine_pytorch_model_bin_is_accepted(tmp_path, capsys):
    from ssl_pretrain.checkpoints import CheckpointRef
    hf = _hf_folder(tmp_path)
    capsys.readouterr()
    rc, out, err = run(capsys, "ckpt", "--registry", tmp_path / "r.json", "add", "x", hf)
    assert rc == 0, err
    assert CheckpointRef.resolve(hf).load().model.config.model_type == "wav2vec2"


@pytest.mark.parametrize("edit, said", [
    (lambda cfg: "{not json", "packed checkpoint is not valid JSON"),
    (lambda cfg: None, "has no fairseq_cfg metadata"),
    (lambda cfg: json.dumps([cfg]), "has no `model` section"),
    (lambda cfg: json.dumps({**cfg, "model": {**cfg["model"], "encoder_layers": "many"}}),
     "fairseq_cfg.model is not a wav2vec 2.0 config (ValueError"),
    (lambda cfg: json.dumps({**cfg, "model": {k: v for k, v in cfg["model"].items() if k != "encoder_embed_dim"}}),
     "fairseq_cfg.model is not a wav2vec 2.0 config (KeyError"),
])
def test_a_packed_release_with_edited_metadata_is_one_line(tmp_path, capsys, edit, said):
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(SHIPPED), framework="pt") as f:
        meta, weights = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    new = edit(json.loads(meta["fairseq_cfg"]))
    if new is None:
        del meta["fairseq_cfg"]
    else:
        meta["fairseq_cfg"] = new
    bad = tmp_path / "bad.safetensors"
    save_file(weights, str(bad), metadata=meta)
    reg = tmp_path / "r.json"
    rc, out, err = run(capsys, "ckpt", "--registry", reg, "add", "x", bad)
    line = one_error_line(err)
    assert rc == 2 and (f"{bad}: packed checkpoint" in line or f"{bad}: the fairseq_cfg" in line) and said in line, line
    assert not reg.exists()


@pytest.mark.parametrize("edit, said", [
    (lambda r: r.__setitem__("n_frames", str(int(r["n_frames"]) * 50)), ":2: feature-store shard index: member 0/0 "
                                                                         "does not fit its shard"),
    (lambda r: r.__setitem__("data_offset", "abc"), ":2: feature-store shard index: data_offset = 'abc' is not"),
    (lambda r: r.pop("dim"), ":1: feature-store shard index has no column(s) dim"),
])
def test_an_edited_feature_store_shard_index_is_one_line(tmp_path, capsys, edit, said):
    import csv

    from asr_helpers import write_corpus
    table = write_corpus(tmp_path / "data")["table"]
    argv = ["-q", "ckpt", "features", "FBANK", "--table", table, "--feature-store", tmp_path / "fs"]
    rc, out, err = run(capsys, *argv)
    assert rc == 0, err
    [index] = (tmp_path / "fs").rglob("shard-00000.tsv")
    with open(index, newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    edit(rows[0])
    with open(index, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t", extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    rc, out, err = run(capsys, *argv, "--out", tmp_path / "npy")
    line = one_error_line(err)
    assert rc == 2 and f"{index}{said}" in line and "delete" in line, line
    assert not (tmp_path / "npy").exists()


# --- item 11: outputs on a read-only file system, or under a file -----------------------------------------
def test_report_and_score_json_on_a_read_only_file_system_are_one_line(tmp_path):
    db = _results_db(tmp_path / "r.db")
    ids, refs, d = _perfect_files(tmp_path)
    cli = " ".join(f"'{a}'" for a in CLI)
    score = f"{cli} -q score asr --refs {d}/ref.tsv --hyps {d}/hyp.tsv --speakers {d}/utts.tsv --bootstrap 0"
    # a real read-only mount (root is refused too): the old report and JSON are there before it turns read-only
    script = (f"{cli} -q report --db {db} --out fs/rep >/dev/null 2>&1 && {score} --json fs/a.json >/dev/null && "
              f"cp -r fs/rep before && mount -o remount,ro fs && "
              f"{cli} -q report --db {db} --out fs/rep 2>err1; echo rc1=$?; "
              f"{score} --json fs/a.json 2>err2 >/dev/null; echo rc2=$?; cp -r fs/rep after; cp fs/a.json a.json")
    proc = _in_tiny_tmpfs(tmp_path, script, size="4m")
    assert "rc1=2" in proc.stdout and "rc2=2" in proc.stdout, proc.stdout + proc.stderr
    line = one_error_line((tmp_path / "err1").read_text())
    assert "Read-only file system -- that file system is read-only" in line and "fs/rep" in line, line
    line = one_error_line((tmp_path / "err2").read_text())
    assert "fs/a.json: Read-only file system" in line, line
    assert _snapshot(tmp_path / "after") == _snapshot(tmp_path / "before")
    assert json.loads((tmp_path / "a.json").read_text())["all"] == 0.0


def test_report_and_score_json_under_a_file_are_one_line(tmp_path, capsys):
    db = _results_db(tmp_path / "r.db")
    ids, refs, d = _perfect_files(tmp_path)
    blocker = tmp_path / "plain-file"
    blocker.write_text("not a directory")
    rc, out, err = run(capsys, "report", "--db", db, "--out", blocker / "sub" / "rep")
    assert rc == 2 and "a part of that path is a file, not a directory" in one_error_line(err)
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "hyp.tsv", "--speakers",
                       d / "utts.tsv", "--bootstrap", 0, "--json", blocker / "a.json")
    line = one_error_line(err)
    assert rc == 2 and f"{blocker / 'a.json'}: Not a directory" in line, line
    assert blocker.read_text() == "not a directory"


# --- item 13: control characters in checkpoint names --------------------------------------------------------
def test_a_newline_in_a_checkpoint_name_is_refused_or_escaped(tmp_path, capsys):
    import sqlite3
    reg = tmp_path / "r.json"
    rc, out, err = run(capsys, "ckpt", "--registry", reg, "add", "F\n| injected | row |", SHIPPED)
    assert rc == 2 and "holds a control character '\\n'" in one_error_line(err) and not reg.exists()
    ids, refs, d = _perfect_files(tmp_path)
    db = tmp_path / "r.db"
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "hyp.tsv", "--speakers",
                       d / "utts.tsv", "--bootstrap", 0, "--db", db, "--checkpoint", "F\nx")
    assert rc == 2 and "checkpoint name 'F\\nx' holds a control character" in one_error_line(err)
    assert not db.exists()   # refused with the options, before a DB (or half a run) is written
    # a DB written another way (an older version, by hand): the tables escape the name, one row per line
    _results_db(db)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE scores SET checkpoint = 'F\n| injected | row |' WHERE checkpoint = 'F-tiny'")
    rc, out, err = run(capsys, "report", "--db", db, "--out", tmp_path / "rep")
    assert rc == 0, err
    md = (tmp_path / "rep" / "table4_asr.md").read_text()
    rows = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert any("F\\n\\| injected \\| row \\|" in ln for ln in rows), md
    assert all(ln.endswith("|") and not ln.startswith("| injected") for ln in rows)
    assert "F\\textbackslash{}n" in (tmp_path / "rep" / "table4_asr.tex").read_text()
