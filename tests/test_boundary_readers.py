"""The boundary's readers and writes (issue 47): every handed JSON, YAML and line file is parsed one
way, lock files never follow a planted link, and outputs never delete what they did not write.

Each reader's hostile cases -- a FIFO, a huge or deeply nested file, non-standard JSON (NaN), a key
given twice, the wrong shape -- are refused in one UserError line naming the file; the commands that
use them are exercised in test_hostile_inputs.py."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel

from corpora.base.boundary import MAX_DEPTH, check_label, locked, parse_json, read_json, read_state_json
from corpora.base.errors import UserError
from corpora.base.strict_yaml import read_hyperpyyaml_keys
from corpora.base.textfile import read_delimited, read_lines, read_utf8

REPO = Path(__file__).resolve().parent.parent


class Facts(BaseModel):
    hours: float
    name: str


@pytest.mark.parametrize("text,words", [
    ('{"a": NaN}', "NaN is not standard JSON"),
    ('{"a": -Infinity}', "-Infinity is not standard JSON"),
    ('{"a": 1, "a": 2}', "given twice"),
    ("[" * 100_000 + "]" * 100_000, f"nests more than {MAX_DEPTH} levels"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nests more than {MAX_DEPTH} levels"),
    ('{"a": ', "not valid JSON (Expecting value)"),
    ("[1, 2]", "is a JSON array, not a JSON object"),
])
def test_read_json_refuses_in_one_line(tmp_path, text, words):
    p = tmp_path / "x.json"
    p.write_text(text)
    with pytest.raises(UserError) as e:
        read_json(p, "registry", shape=dict)
    assert words in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)
    assert read_state_json(p, "registry") is None   # a state file that fails any check: the work is redone


def test_read_json_checks_a_declared_shape(tmp_path):
    p = tmp_path / "facts.json"
    p.write_text('{"hours": "lots", "name": "F"}')
    with pytest.raises(UserError, match=r"'hours' is wrong: .*number.*\(got 'lots'\)"):
        read_json(p, "facts", shape=Facts)
    p.write_text('{"hours": 3.5, "name": "F"}')
    assert read_json(p, "facts", shape=Facts) == Facts(hours=3.5, name="F")


def test_special_and_oversized_files_are_refused_before_reading(tmp_path):
    fifo = tmp_path / "vocab.txt"
    os.mkfifo(fifo)
    for read in (lambda: read_lines(fifo, "vocabulary"), lambda: read_json(fifo, "run.json")):
        with pytest.raises(UserError, match="not a regular file"):   # would block for ever if opened
            read()
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(UserError, match="2,048 bytes"):
        read_json(big, "profile", max_bytes=1024)


def test_read_lines_keeps_a_last_line_without_newline_and_unicode_separators(tmp_path):
    p = tmp_path / "labels.txt"
    p.write_bytes("a\u2028b\nc".encode())
    assert read_lines(p) == ["a\u2028b", "c"]
    p.write_bytes(b"\xff\n")
    with pytest.raises(UserError, match="not UTF-8"):
        read_lines(p)


def test_read_lines_names_the_line_of_a_bad_byte_and_of_a_nul(tmp_path):
    """The one line reader: a BOM and a \r before each \n dropped; a bad byte or (for text to be scored) a NUL
    is one line naming the file and its line; ``fix`` is the advice every error gives."""
    p = tmp_path / "hyps.txt"
    p.write_bytes("\ufeffa\r\nb\x1cc\n".encode())
    assert read_lines(p) == ["a", "b\x1cc"] and read_utf8(p) == "a\r\nb\x1cc\n"
    p.write_bytes(b"ok\nfatigu\xe9\n")
    with pytest.raises(UserError) as e:
        read_lines(p, "hypotheses", fix="write it again")
    assert str(e.value).startswith(f"{p}:2: hypotheses is not UTF-8 (byte 0xe9)") and e.value.fix == "write it again"
    p.write_bytes(b"ok\nok\nn\x00l\n")
    assert read_lines(p)[2] == "n\x00l"
    with pytest.raises(UserError, match="NUL byte in the hypotheses") as e:
        read_lines(p, "hypotheses", refuse_nul=True)
    assert e.value.line == 3
    with pytest.raises(UserError, match="speakers not found"):
        read_lines(tmp_path / "none.txt", "speakers")
    p.write_bytes(b"x" * 2048)
    with pytest.raises(UserError, match="2,048 bytes"):
        read_lines(p, "speaker list", max_bytes=1024)


def test_read_delimited_hostile_tables(tmp_path):
    """The one table reader: rows with their lines; a FIFO, a short row, an unbalanced quote, a bad byte,
    an empty file are each one line naming the file (and the line)."""
    p = tmp_path / "t.tsv"
    p.write_text('id\ttext\n\nu1\t"quoted" as is\n  \t \nu2\tb\n', encoding="utf-8")
    header, rows = read_delimited(p, "\t")   # a blank line is skipped; a row of blank fields is a row
    assert (header == ["id", "text"] and [line for line, _ in rows] == [3, 4, 5]
            and rows[1][1] == {"id": "  ", "text": " "})
    assert read_delimited(p, "\t", skip_blank=True)[1] == [(3, {"id": "u1", "text": '"quoted" as is'}),
                                                           (5, {"id": "u2", "text": "b"})]   # quotes are text
    p.write_text("id\ttext\nu1\ta\tb\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        read_delimited(p, "\t", what="MuST-SHE TSV")
    assert str(e.value).startswith(f"{p}:2: 3 fields, the header has 2")
    c = tmp_path / "t.csv"
    c.write_text('id,text\nu1,"open\nu2,b\nu3,c\n', encoding="utf-8")
    with pytest.raises(UserError, match="unbalanced quote") as e:
        read_delimited(c, ",", csv.QUOTE_MINIMAL)
    assert e.value.line == 2
    c.write_bytes(b"id,text\nu1,caf\xe9\n")
    with pytest.raises(UserError, match="SpeechBrain CSV is not UTF-8") as e:
        read_delimited(c, ",", csv.QUOTE_MINIMAL, what="SpeechBrain CSV")
    assert e.value.line == 2
    c.write_text(" \n", encoding="utf-8")
    with pytest.raises(UserError, match="empty feature index"):
        read_delimited(c, "\t", what="feature index")
    fifo = tmp_path / "fifo.tsv"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):   # would block for ever if opened
        read_delimited(fifo, "\t")


def test_a_lock_file_planted_as_a_symlink_is_refused_and_its_target_kept(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    lock = tmp_path / "lock"
    lock.symlink_to(victim)
    with pytest.raises(UserError, match="lock file is a symlink"):
        with locked(lock):
            pass
    assert victim.read_text() == "the user's file\n"
    with locked(tmp_path / "own.lock") as got:   # a fresh lock: created, held, not truncating
        assert got is True
        with locked(tmp_path / "own.lock", blocking=False) as again:   # flock is per open file: not ours twice
            assert again is False


def test_a_sweep_job_lock_planted_as_a_symlink_keeps_its_target(tmp_path):
    """The sweep asks whether a job's lock is held before it re-runs anything: a planted link at that
    name is refused in one line, never opened for writing (which emptied its target before)."""
    from gendergap.sweep import _lock_held
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "lock").symlink_to(victim)
    with pytest.raises(UserError, match="symlink"):
        _lock_held(tmp_path / "job")
    assert victim.read_text() == "the user's file\n"


def test_check_label_refuses_control_and_bidi_characters():
    assert check_label("F-tiny+random-init") == "F-tiny+random-init"
    for bad in ("F\x1b[2J", "F\u202ex", "F\nforged row"):
        with pytest.raises(UserError, match="control or bidi"):
            check_label(bad, "checkpoint name")


def test_hyperpyyaml_keys_are_listed_without_building_anything(tmp_path):
    p = tmp_path / "hyperparams.yaml"
    p.write_text("sample_rate: 16000\nencoder: !new:os.system\n  command: touch MARKER\nmodules:\n"
                 "  encoder: !ref <encoder>\n")
    keys = read_hyperpyyaml_keys(p)
    assert keys == {"sample_rate": 16000, "encoder": None, "modules": {"encoder": None}}
    assert not list(tmp_path.glob("MARKER*"))
    p.write_text("- a\n- b\n")
    with pytest.raises(UserError, match="not a mapping"):
        read_hyperpyyaml_keys(p)


def test_convert_never_deletes_a_folder_it_did_not_write(tmp_path):
    """`ckpt convert --out DIR`: a folder of the user's own files is refused (it was deleted before);
    an earlier conversion is replaced whole; a planted link at the old fixed temporary name is never
    written through (the temporary folder has a fresh name now)."""
    from test_ssl_convert import fairseq_large_style
    _model, pt = fairseq_large_style(tmp_path)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    cmd = [sys.executable, "-m", "gendergap.cli", "ckpt", "convert", str(pt), "--out", str(mine)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and "not an earlier conversion" in r.stderr and "Traceback" not in r.stderr
    assert (mine / "notes.txt").read_text() == "mine\n"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("keep\n")
    out = tmp_path / "hf"
    (tmp_path / ".hf.tmp").symlink_to(victim)   # the name the conversion used to write through
    for _ in range(2):   # a new folder, then an earlier conversion replaced
        r = subprocess.run(cmd[:-1] + [str(out)], capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert json.loads((out / "gendergap_source.json").read_text())["num_updates"] == 0
    assert sorted(p.name for p in victim.iterdir()) == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.") and p.name != ".hf.tmp"]


def test_a_selection_report_with_no_audio_or_nan_is_one_line(tmp_path):
    from manifests.build import make_up
    report = tmp_path / "selection_report.json"
    report.write_text(json.dumps({"splits": {"train": {"F": {"seconds": 0.0}, "M": {"seconds": 0.0}}}}))
    with pytest.raises(UserError, match="no audio"):
        make_up(report)
    report.write_text('{"splits": {"train": {"F": {"seconds": NaN}}}}')
    with pytest.raises(UserError, match="NaN is not standard JSON"):
        make_up(report)
    report.write_text(json.dumps({"splits": {"train": {"F": {"seconds": -3600}, "M": {"seconds": 7200}}}}))
    with pytest.raises(UserError, match="seconds -3600"):
        make_up(report)
    report.write_text(json.dumps({"splits": {"train": {"F": {"seconds": 3600}, "M": {"seconds": 10800}}}}))
    assert make_up(report) == {"hours": 4.0, "male_pct": 75.0, "female_pct": 25.0, "unknown_pct": 0.0}
    report.unlink()
    os.mkfifo(report)   # there, but not a file: said as such, not as missing
    with pytest.raises(UserError, match="selection report .*FIFO"):
        make_up(report)


def test_parse_json_names_the_line_of_a_json_lines_file(tmp_path):
    with pytest.raises(UserError) as e:
        parse_json('{"ids": [1,', "partial transcripts", path=tmp_path / "p.jsonl", line=7)
    assert ":7:" in str(e.value)


def test_audio_is_bounded_before_it_is_decoded(tmp_path):
    """A 1 Hz header (resampling to 16 kHz would allocate 16,000 samples per stored one) and a
    segment hours long are refused before any sample is read."""
    import numpy as np
    import soundfile as sf

    from ssl_pretrain.features import read_segment
    slow = tmp_path / "slow.wav"
    sf.write(slow, np.zeros(100, dtype=np.float32), 1, subtype="FLOAT")
    with pytest.raises(UserError, match="sample rate 1 Hz is outside 1000-384000 Hz"):
        read_segment(str(slow), 0.0, 0.0, 16000)
    ok = tmp_path / "ok.wav"
    sf.write(ok, np.zeros(8000, dtype=np.float32), 8000, subtype="FLOAT")
    assert read_segment(str(ok), 0.0, 1.0, 16000).shape == (16000,)
    with pytest.raises(UserError, match="one utterance of 7,200 s"):
        read_segment(str(ok), 0.0, 7200.0, 16000)


@pytest.mark.timeout(60)
def test_a_wide_table_is_read_in_time_linear_in_its_columns_up_to_a_bound(tmp_path):
    """1,900 extra columns are read (each column coerced once into a new frame: assigned one by one,
    the frame's blocks were copied per column); 30,000 are refused at the header in one line (every
    later pandas operation costs a little per column: 100k columns made `manifest build` take 2 min)."""
    import time

    from corpora.table import MAX_COLUMNS
    from corpora.utterances import UtteranceTable
    from manifest_fixtures import write_corpus
    path = write_corpus(tmp_path / "c", speakers={"f0": "F", "m0": "M"}, utts_per_speaker=2, long_recording=False)
    lines = path.read_text(encoding="utf-8").splitlines()

    def widened(extra: int) -> Path:
        wide = tmp_path / "c" / f"wide{extra}.tsv"
        wide.write_text("\n".join([lines[0] + "".join(f"\tx{i}" for i in range(extra))]
                                  + [row + "\t7" * extra for row in lines[1:]]) + "\n", encoding="utf-8")
        return wide

    rows = UtteranceTable.load(widened(1_900)).rows
    assert rows.shape[1] >= 1_900 and (rows["x1899"] == "7").all() and rows["duration"].dtype == float
    started = time.monotonic()
    with pytest.raises(UserError,
                       match=rf"wide30000.tsv:1: the table has 30,0\d\d columns; .* at most {MAX_COLUMNS:,}"):
        UtteranceTable.load(widened(30_000))
    assert time.monotonic() - started < 5


def test_every_reader_of_the_boundary_has_hostile_cases():
    """Each public reader of the boundary (a function that opens or parses a handed file) is exercised
    by a hostile test: a new reader fails here until a case names it."""
    import ast

    import corpora.base.boundary as boundary
    import corpora.base.registry_file as registry_file
    import corpora.base.strict_yaml as strict_yaml
    import corpora.base.textfile as textfile
    readers = {name for module in (boundary, strict_yaml, registry_file, textfile)
               for name, node in ((n.name, n) for n in ast.parse(Path(module.__file__).read_text()).body
                                  if isinstance(n, ast.FunctionDef))
               if not name.startswith("_") and (name.startswith(("read_", "parse_")) or name in (
                   "listed_file", "locked", "regular_file", "inside", "no_custom_code", "folder_files"))}
    assert {"read_json", "parse_json", "read_lines", "read_delimited", "read_yaml", "read_registry",
            "locked"} <= readers
    suites = "".join(p.read_text(encoding="utf-8") for p in Path(__file__).parent.glob("test_*.py")
                     if p.name.startswith(("test_hostile", "test_boundary", "test_security")))
    # a reader is covered when a hostile suite calls it, or runs a command whose input goes through it
    through_commands = {"read_registry": "config-registry-", "read_yaml": "config-", "inside": "st-vocab-traversal",
                        "regular_file": "fifo-arg-", "no_custom_code": "auto_map", "folder_files": "symlinked_dir",
                        "listed_file": "shard_outside", "read_hyperpyyaml_keys": "read_hyperpyyaml_keys(",
                        "read_state_json": "read_state_json("}
    missing = sorted(r for r in readers if f"{r}(" not in suites and through_commands.get(r, "\0") not in suites)
    assert not missing, f"boundary readers without a hostile case: {missing}"


def test_a_dry_run_says_when_a_real_corpus_meets_the_toy_st_preset(tmp_path, capsys, monkeypatch):
    """ST's `tiny` preset is sized for the built-in corpus: on a larger one the dry run says so in
    one note (the bound lowered here so a small real table stands for a large one)."""
    import gendergap.steps.st as st_steps
    from gendergap.cli import main
    from manifest_fixtures import write_corpus
    split_of = {"f0": "train", "m0": "train", "f1": "train", "m1": "train", "f2": "valid", "m2": "valid",
                "f3": "test", "m3": "test"}
    table = write_corpus(tmp_path / "c", utts_per_speaker=4, long_recording=False, corpus="mine", split_of=split_of)
    lines = table.read_text(encoding="utf-8").splitlines()
    table.write_text("\n".join([lines[0] + "\ttgt_text_en"] + [row + "\tsome words" for row in lines[1:]]) + "\n",
                     encoding="utf-8")
    cfg = tmp_path / "study.yaml"
    cfg.write_text(f"name: s\ncorpus: {{table: {table}}}\ncheckpoints:\n  FBANK: {{baseline: fbank}}\n"
                   "tasks:\n  st: {corpus: mine, pairs: [fr-en], preset: tiny}\n", encoding="utf-8")
    monkeypatch.setattr(st_steps, "TOY_PRESET_MAX_TRAIN", 3)
    assert main(["sweep", "--config", str(cfg), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "note: task 'st' trains the ST preset `tiny`" in out and "preset: xs" in out
    monkeypatch.setattr(st_steps, "TOY_PRESET_MAX_TRAIN", 10_000)
    assert main(["sweep", "--config", str(cfg), "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert "preset `tiny`" not in capsys.readouterr().out
