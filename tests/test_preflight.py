"""A sweep checks every job's inputs against the data before anything runs: a table with
duplicate ids, a task naming a corpus the table lacks, a split too small for the ST preset's
batching, unreadable audio, ungendered test speakers... each is one line naming the config line
and the fix, `sweep --dry-run` (and a real sweep) exit 2, and nothing is submitted."""
from __future__ import annotations

from pathlib import Path

from corpora.table import new_table, write_table
from gendergap.cli import main
from gendergap.config import CONFIG_DIR
from st_helpers import toy_rows, write_wavs_for

SPLITS = (("train", 16, ("f1", "m1")), ("valid", 8, ("f2", "m2")), ("test", 8, ("f3", "f4", "m3", "m4")))


def study(tmp_path: Path, rows: list[dict] | None = None, tasks: str | None = None) -> Path:
    """A table of real wav files (toy corpus) and a config whose tasks read it: the line numbers
    below (5: corpus.table, 9: asr-frozen, 10: st) are this text's."""
    rows = rows if rows is not None else toy_rows(SPLITS)
    write_wavs_for(tmp_path, rows)
    write_table(new_table(rows), tmp_path / "table.tsv", validate=False)
    cfg = tmp_path / "study.yaml"
    cfg.write_text(
        "name: t\n"
        "# the toy corpus: fr speech with en/es translations\n"
        "seed: 0\n"
        "corpus:\n"
        "  table: table.tsv\n"
        "checkpoints:\n"
        "  F-tiny: {shipped: tiny-female}\n"
        "tasks:\n"
        + (tasks or "  asr-frozen: {corpus: toy}\n"
                    "  st: {corpus: toy, pairs: [fr-en], preset: xs}\n"), encoding="utf-8")
    return cfg


def sweep(cfg: Path, out: Path, capsys, dry: bool = True) -> tuple[int, list[str], str]:
    """Exit code, the lines naming the config (each problem, or the one error), stdout."""
    rc = main(["sweep", "--config", str(cfg), "--out", str(out)] + (["--dry-run"] if dry else []))
    said = capsys.readouterr()
    lines = [x.removeprefix("gendergap: error: ") for x in said.err.splitlines()]
    return rc, [x for x in lines if x.startswith(str(cfg))], said.out


def test_a_good_config_passes(tmp_path, capsys):
    cfg = study(tmp_path)
    rc, problems, out = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 0 and problems == [], problems
    assert "inputs checked: no problem found" in out and "st:F-tiny:fr-en" in out
    assert not (tmp_path / "o").exists()


def test_duplicate_ids_are_one_line_on_the_table_key(tmp_path, capsys):
    rows = toy_rows(SPLITS)
    rows[5]["id"] = rows[4]["id"]
    cfg = study(tmp_path, rows)
    for dry in (True, False):   # the dry run, and a real sweep before its first job
        rc, lines, _ = sweep(cfg, tmp_path / "o", capsys, dry)
        # one problem (the table cannot be read, so nothing else is checked): the error line itself
        assert rc == 2 and len(lines) == 1, lines
    assert f"{cfg}:5: corpus.table: utterance table {tmp_path / 'table.tsv'}:7: row id='train-004': duplicate id" \
        in lines[0] and "-- ids must be unique" in lines[0], lines
    assert not (tmp_path / "o").exists()   # no job state, no output folder


def test_a_missing_corpus_names_the_task_line(tmp_path, capsys):
    cfg = study(tmp_path, tasks="  asr-frozen: {corpus: toy}\n  st: {corpus: mtedx-fr-en, pairs: [fr-en]}\n")
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"{cfg}:10: task 'st': corpus 'mtedx-fr-en' has no rows in table.tsv "
                           "(its corpora: toy)"), line
    assert "set the task's corpus to one of those" in line
    assert not (tmp_path / "o").exists()


def test_a_split_too_small_for_the_xs_preset_gives_the_override(tmp_path, capsys):
    small = (("train", 5, ("f1", "m1")),) + SPLITS[1:]
    cfg = study(tmp_path, toy_rows(small))
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and len(lines) == 1, lines   # exactly one line
    err = lines[0]
    assert err.startswith(f"{cfg}:10: task 'st': the train split's 5 utterance(s) fit in one batch")
    assert "required-batch-size-multiple (8)" in err and "The dataset is empty" in err
    assert "add the override required-batch-size-multiple=1" in err
    # the override it names fixes it
    text = cfg.read_text().replace("preset: xs}", "preset: xs, overrides: [required-batch-size-multiple=1]}")
    cfg.write_text(text)
    rc, problems, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 0 and problems == []


def test_every_problem_is_listed_one_line_each_and_nothing_runs(tmp_path, capsys):
    rows = toy_rows((("train", 5, ("f1", "m1")), ("valid", 8, ("f2", "m2")), ("test", 8, ("f3", "x4", "m3", "m4"))))
    for r in rows:
        if r["speaker"] == "x4":
            r["gender"] = "U"        # a test speaker without gender
    rows[0]["tgt_text_en"] = ""      # a training row without its translation
    cfg = study(tmp_path, rows, tasks="  asr-frozen: {corpus: toy}\n"
                                      "  st: {corpus: toy, pairs: [fr-en, fr-pt], preset: xs}\n"
                                      "  probes: {corpus: synth-fr}\n")
    (tmp_path / rows[3]["audio"]).unlink()                        # a missing audio file
    (tmp_path / rows[6]["audio"]).write_bytes(b"RIFF....WAVEjunk")  # an unreadable one
    for dry in (True, False):
        out = tmp_path / "o"
        rc, lines, _ = sweep(cfg, out, capsys, dry)
        assert rc == 2
        text = "\n".join(lines)
        # each problem once, on its task's line (asr-frozen and st read the same rows: both named)
        assert sum("cannot be read" in x for x in lines) == 2, text   # the ASR data step's, and st's
        assert any(x.startswith(f"{cfg}:9: task 'asr-frozen': 2 audio file(s) of 2 row(s) cannot be read")
                   for x in lines), text
        assert any(x.startswith(f"{cfg}:10: task 'st': 1 of 5 train row(s) have an empty tgt_text_en")
                   for x in lines), text
        assert any(x.startswith(f"{cfg}:10: task 'st': table.tsv has no column tgt_text_pt") for x in lines), text
        assert any(f"{cfg}:10: task 'st': the train split's 5 utterance(s)" in x for x in lines), text
        assert any(x.startswith(f"{cfg}:9: task 'asr-frozen': 1 test speaker(s) have no gender (U): x4") for x in lines)
        assert any(x.startswith(f"{cfg}:11: task 'probes': corpus 'synth-fr' has no rows") for x in lines), text
        assert all(" -- " in x for x in lines)
        assert f"{len(lines) - 1} problem(s) with the study's inputs" in lines[-1] and "nothing was submitted" in text
        assert not out.exists()   # nothing submitted, no job state


def test_inputs_a_job_will_write_are_not_checked_and_mini_is_unaffected(tmp_path, capsys):
    # the built-in study generates its table in its first job: nothing to check yet, and no problem
    rc, problems, out = sweep(CONFIG_DIR / "mini.yaml", tmp_path / "mini", capsys)
    assert rc == 0 and problems == [] and "inputs checked: no problem found" in out
    assert not (tmp_path / "mini").exists()


def test_pretraining_audio_is_checked_at_any_rate(tmp_path, capsys):
    rows = toy_rows((("pretrain", 16, ("f1", "m1")),) + SPLITS)   # the probes keep train/valid/test
    for r in rows:
        r["sample_rate"] = 48000 if r["speaker"] == "f1" else 16000
    cfg = study(tmp_path, rows, tasks="  probes: {corpus: toy}\n")
    cfg.write_text(cfg.read_text().replace("checkpoints:\n  F-tiny: {shipped: tiny-female}\n",
                                           "pretraining: {sets: {female: F}}\n"
                                           "checkpoints:\n  F-tiny: {pretrain: female, updates: 2}\n"))
    # 48 kHz is fine: the study's manifest step prepares 16 kHz copies for fairseq
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 0 and lines == [], lines
    (tmp_path / rows[0]["audio"]).unlink()   # a female pretraining file gone
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{cfg}:6: pretraining: 1 audio file(s) of 1 row(s) cannot be read "
                               f"(ids {rows[0]['id']}): first, audio file {tmp_path / rows[0]['audio']} does not exist")


def test_a_task_training_on_a_selection_is_checked_too(tmp_path, capsys):
    rows = toy_rows(SPLITS)
    for r in rows:
        if r["speaker"] == "f4":
            r["gender"] = "U"
    cfg = study(tmp_path, rows, tasks="  asr-frozen: {corpus: toy, selection: bal}\n")
    cfg.write_text(cfg.read_text() + "selections:\n  bal: {corpus: toy, gender: balanced}\n")
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{cfg}:9: task 'asr-frozen': 1 test speaker(s) have no gender (U): f4"), lines


def test_selection_hours_the_corpus_cannot_give_are_refused_on_their_key_by_the_dry_run(tmp_path, capsys):
    """Boito et al.'s 34.15 h a gender asked of a smaller corpus: refused before anything runs, on
    the line of the selection's own key, not after the extractions in the run."""
    cfg = study(tmp_path, tasks="  asr-frozen: {corpus: toy, selection: bal}\n")
    cfg.write_text(cfg.read_text() + "selections:\n  bal:\n    corpus: toy\n    gender: balanced\n"
                   "    hours_per_gender: 34.15\n    valid_hours: 0.001\n")
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{cfg}:14: selection 'bal': train: asked for 34:09 of F speech, the pool has "), lines
    assert "-- ask `selections.bal.hours_per_gender` for what the corpus holds" in lines[0]
    assert not (tmp_path / "o").exists()
    # what it holds, taken whole, passes
    cfg.write_text(cfg.read_text().replace("    hours_per_gender: 34.15\n", ""))
    rc, lines, out = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 0 and lines == [] and "inputs checked: no problem found" in out, lines


def test_a_missing_mustshe_file_is_named(tmp_path, capsys):
    cfg = study(tmp_path, tasks="  gender-st: {corpus: toy, pairs: [fr-en], mustshe: nowhere.tsv}\n")
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and lines == [f"{cfg}:9: task 'gender-st': the MuST-SHE TSV {tmp_path / 'nowhere.tsv'} does not "
                                 "exist -- fix the task's `mustshe:` path (relative paths are relative to the table's "
                                 "folder)"], lines


def test_a_probe_split_with_one_gender_is_found_before_the_features_run(tmp_path, capsys):
    """The probes draw F and M utterances from each of the corpus's splits: a valid split whose men
    are all of unknown gender (a mixed panel mapped to U) failed only once extraction had run."""
    rows = toy_rows(SPLITS)
    for r in rows:
        if r["split"] == "valid" and r["gender"] == "M":
            r["gender"] = "U"
    cfg = study(tmp_path, rows, tasks="  probes: {corpus: toy, layers: '1'}\n")
    rc, lines, _ = sweep(cfg, tmp_path / "o", capsys)
    assert rc == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"{cfg}:9: task 'probes': corpus toy: the valid split (valid/dev rows) has only F "
                               "speakers"), lines[0]
    assert "a probe needs female and male speakers in every split" in lines[0]
    assert not (tmp_path / "o").exists()
