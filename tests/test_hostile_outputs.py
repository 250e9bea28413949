"""A command owns only what it wrote (issue 60, part 2): `report --out` and `corpus synth --out` into a
folder that already holds the user's files, hidden ones and ones named like the command's outputs, and
pretraining's repair of a cut-short checkpoint_last.pt beside a user's checkpoint_last.pt.partial."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.conditions_report import _stem
from analysis.report import write_report
from analysis.store import ResultsStore
from cli_helpers import run_lines
from corpora.base.errors import UserError

RECORD = ".gendergap-outputs.json"   # corpora.base.owned_outputs.RECORD (imported in the tests: not in the baseline)


def read_record(folder, command):
    from corpora.base.owned_outputs import read_record
    return read_record(folder, command)

# the user's own files: hidden ones, a folder, and names the report's and the corpus's files have
USER_FILES = {".git/HEAD": b"ref: refs/heads/main\n", ".git/objects/ab/cdef": b"blob", ".gitignore": b"*.png\n",
              "notes.md": b"my notes", "table1_mine.md": b"| my | table |", "trend_x.png": b"not a plot",
              "conditions_y.csv": b"a,b\n1,2\n", "sub/.foo.tmp": b"mine", ".foo.tmp": b"mine too"}


def _plant(folder: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _db(path: Path, bump: float = 0.0, st: bool = True) -> Path:
    def r(ck, task, g, metric, v, lp=""):
        return {"checkpoint": ck, "task": task, "lang_pair": lp, "subset": "test", "gender": g, "metric": metric,
                "value": v, "ci_low": v - 2, "ci_high": v + 2, "n_utts": 50, "n_speakers": 6}
    with ResultsStore(path) as store:
        rid = store.start_run("score-wer", {"bump": bump}, seed=1)
        rows = [r(ck, "asr-e2e", g, "wer", v + bump) for ck in ("F-tiny", "M-tiny")
                for g, v in (("F", 17.0), ("M", 21.0), ("all", 19.0), ("delta_rel", -21.0))]
        rows += [r("F-tiny", "st", g, "bleu", v + bump, "fr-en")
                 for g, v in (("F", 15.7), ("M", 14.3), ("all", 15.0), ("delta_rel", 9.3))] if st else []
        rows += [r("F-tiny", "asr-e2e", "all", "cer", 7.0)]   # -> other_scores.csv
        store.add_scores(rid, rows, finish=True)
    return path


# --- report --------------------------------------------------------------------------------------------

def test_report_keeps_the_users_files_whatever_their_names(tmp_path, capsys):
    out = tmp_path / "rep"
    assert run_lines(capsys, "report", "--db", _db(tmp_path / "a.db"), "--out", out)[0] == 0
    first = _tree(out)
    _plant(out, USER_FILES)
    rc, _, err = run_lines(capsys, "report", "--db", _db(tmp_path / "b.db", 5.0), "--out", out)
    assert rc == 0, err
    after = _tree(out)
    assert {k: after.get(k) for k in USER_FILES} == USER_FILES      # every one kept, byte for byte
    assert after["table4_asr.md"] != first["table4_asr.md"] and b"26.0" in after["table4_asr.md"]
    assert set(read_record(out, "gendergap report")) == {n for n in after if "/" not in n} - set(USER_FILES) - {RECORD}


def test_report_drops_its_own_stale_tables_and_temp_files_only(tmp_path, capsys):
    out = tmp_path / "rep"
    assert run_lines(capsys, "report", "--db", _db(tmp_path / "a.db"), "--out", out)[0] == 0
    assert (out / "table5_st.md").is_file()
    _plant(out, {".report.md.k2j4x9ab.tmp": b"half", ".notes.md.k2j4x9ab.tmp": b"not the report's"})
    assert run_lines(capsys, "report", "--db", _db(tmp_path / "b.db", st=False), "--out", out)[0] == 0
    names = set(os.listdir(out))
    assert "table5_st.md" not in names and ".report.md.k2j4x9ab.tmp" not in names    # the report's own
    assert (out / ".notes.md.k2j4x9ab.tmp").read_bytes() == b"not the report's"


def test_report_refuses_a_folder_it_did_not_write(tmp_path, capsys):
    out = tmp_path / "mine"
    _plant(out, USER_FILES)
    rc, _, err = run_lines(capsys, "report", "--db", _db(tmp_path / "a.db"), "--out", out)
    assert rc == 2 and len(err) == 1, err
    assert str(out) in err[0] and "holds no record of an earlier `gendergap report`" in err[0]
    assert "pass --out a new or empty folder" in err[0]
    assert _tree(out) == USER_FILES and not (out / "report.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "mine"]        # no staging folder left


def test_report_refuses_to_replace_a_users_file_named_as_its_own(tmp_path, capsys):
    out = tmp_path / "rep"
    assert run_lines(capsys, "report", "--db", _db(tmp_path / "a.db", st=False), "--out", out)[0] == 0
    before = {**_tree(out), "table5_st.md": b"my own ST table"}
    (out / "table5_st.md").write_bytes(b"my own ST table")    # a name the first report did not write
    rc, _, err = run_lines(capsys, "report", "--db", _db(tmp_path / "b.db"), "--out", out)
    assert rc == 2 and len(err) == 1 and "table5_st.md" in err[0] and "did not write" in err[0], err
    assert _tree(out) == before


def test_a_report_folder_of_the_previous_version(tmp_path, capsys):
    """No record yet: accepted when it holds report.md and only files named as the report's (then
    recorded), refused when it holds anything else -- the report cannot tell that version's files
    from the user's."""
    db = _db(tmp_path / "a.db")
    for extra in ("notes.md", ".gitignore", "table1_mine.md"):
        folder = tmp_path / f"old-{extra}"
        _plant(folder, {"report.md": b"# old", "table4_asr.md": b"old", extra: b"mine"})
        snapshot = _tree(folder)
        rc, _, err = run_lines(capsys, "report", "--db", db, "--out", folder)
        assert rc == 2 and len(err) == 1 and extra in err[0] and "move" in err[0], err
        assert _tree(folder) == snapshot
    old = tmp_path / "old"
    _plant(old, {"report.md": b"# old", "table4_asr.md": b"old", "table5_st.tex": b"old", "delta_rel.png": b"old",
                 ".report.md.ab12cd34.tmp": b"half"})
    assert run_lines(capsys, "report", "--db", db, "--out", old)[0] == 0
    assert (old / "report.md").read_bytes() != b"# old" and ".report.md.ab12cd34.tmp" not in os.listdir(old)
    assert "report.md" in read_record(old, "gendergap report")


def test_a_record_names_only_what_the_report_writes(tmp_path):
    """A planted record listing the user's files makes the report drop none of them; a damaged one is
    no record (the folder is then refused); the names the report gives its files all count as its own."""
    from analysis.report import REPORT_FILES
    out = tmp_path / "rep"
    written = write_report(_db(tmp_path / "a.db"), out)
    assert written and all(REPORT_FILES.fullmatch(n) for n in written)
    assert REPORT_FILES.fullmatch(_stem("asr-frozen", "fr-en") + ".tex")
    assert REPORT_FILES.fullmatch("trend_" + _stem("st", "fr-en")[len("conditions_"):] + ".png")
    _plant(out, {"notes.md": b"mine", ".gitignore": b"mine"})
    record = json.loads((out / RECORD).read_text())
    (out / RECORD).write_text(json.dumps({**record, "files": record["files"] + ["notes.md", ".gitignore"]}))
    write_report(tmp_path / "a.db", out)
    assert (out / "notes.md").read_bytes() == b"mine" and (out / ".gitignore").read_bytes() == b"mine"
    for bad in (json.dumps({**record, "files": ["../a.db"]}), "{not json",
                json.dumps({**record, "command": "gendergap corpus synth"})):
        (out / RECORD).write_text(bad)
        with pytest.raises(UserError, match=r"record \(.*\) is not one `gendergap report` wrote"):
            write_report(tmp_path / "a.db", out)
        assert (tmp_path / "a.db").is_file() and (out / "notes.md").read_bytes() == b"mine"


def test_a_kill_between_the_swaps_two_renames_loses_nothing(tmp_path, capsys):
    """The old folder moved aside, the new one not yet in place: the next run puts the old one back
    (the user's files in it) before it reports, instead of removing it as a leftover."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "rep"
    assert run_lines(capsys, "report", "--db", _db(tmp_path / "a.db"), "--out", out)[0] == 0
    _plant(out, {"notes.md": b"my notes", ".git/HEAD": b"ref"})
    aside = tmp_path / f".rep.{dead.pid}.k2j4x9ab.old"
    aside.mkdir()
    out.rename(aside / "dir")
    rc, _, err = run_lines(capsys, "report", "--db", _db(tmp_path / "b.db", 5.0), "--out", out)
    assert rc == 0, err
    assert (out / "notes.md").read_bytes() == b"my notes" and (out / ".git" / "HEAD").read_bytes() == b"ref"
    assert not aside.exists() and b"26.0" in (out / "table4_asr.md").read_bytes()


# --- corpus synth --------------------------------------------------------------------------------------

def test_synth_refuses_a_folder_with_the_users_utterance_table(tmp_path, capsys):
    out = tmp_path / "corpus"
    _plant(out, {"utterances.tsv": b"id\taudio\nmine\tmine.wav\n", "notes.md": b"mine"})
    snapshot = _tree(out)
    rc, _, err = run_lines(capsys, "corpus", "synth", "--out", out, "--size", "tiny")
    assert rc == 2 and len(err) == 1, err
    assert str(out) in err[0] and "holds no record of an earlier `gendergap corpus synth`" in err[0]
    assert _tree(out) == snapshot


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from corpora.synth import synthesize
    return synthesize(tmp_path_factory.mktemp("owned") / "corpus", size="tiny", seed=0).parent


def test_synth_again_keeps_the_users_files_and_removes_only_its_own_temps(corpus, capsys):
    from corpora.synth import synthesize
    spk = next((corpus / "audio").iterdir()).name
    wav = next((corpus / "audio" / spk).glob("*.wav")).name
    mine = {**USER_FILES, f"audio/{spk}/.foo.tmp": b"mine", f"audio/{spk}/notes.txt": b"mine",
            ".utterances.tsv.notes.md": b"mine"}
    _plant(corpus, mine)
    _plant(corpus, {".utterances.tsv.ab12cd34.tmp": b"half", f"audio/{spk}/.{wav}.ab12cd34.tmp": b"half"})
    sums = (corpus / "checksums.sha256").read_text()
    synthesize(corpus, size="tiny", seed=1)     # another seed: every file of the corpus written again
    after = _tree(corpus)
    assert {k: after.get(k) for k in mine} == mine
    assert ".utterances.tsv.ab12cd34.tmp" not in after and f"audio/{spk}/.{wav}.ab12cd34.tmp" not in after
    assert after["checksums.sha256"].decode() != sums
    assert f"audio/{spk}/{wav}" in read_record(corpus, "gendergap corpus synth")


def test_synth_refuses_to_replace_a_users_file_where_it_writes_one(corpus, capsys):
    """In its own folder too: a file of the user's at a path the corpus writes, that it never wrote."""
    from corpora.synth import synthesize
    record = json.loads((corpus / RECORD).read_text())
    (corpus / RECORD).write_text(json.dumps({**record, "files": [f for f in record["files"]
                                                                  if f != "mustshe_test.tsv"]}))
    (corpus / "mustshe_test.tsv").write_bytes(b"my own MuST-SHE rows")
    with pytest.raises(UserError, match="mustshe_test.tsv this command did not write") as e:
        synthesize(corpus, size="tiny", seed=2)
    assert "move or rename that file" in str(e.value)
    assert (corpus / "mustshe_test.tsv").read_bytes() == b"my own MuST-SHE rows"


def test_a_corpus_of_the_previous_version_is_still_the_commands(tmp_path, capsys):
    """No record, but synth_config.json as this command writes it: an earlier version's folder, its
    files the command's own (a re-run is skipped as before); without it the folder is refused."""
    from corpora.base.owned_outputs import RECORD as record_name
    from corpora.base.owned_outputs import claim
    assert record_name == RECORD
    folder = tmp_path / "old"
    _plant(folder, {"synth_config.json": json.dumps({"config": {"generator": 3, "size": "tiny"}}).encode(),
                    "utterances.tsv": b"old", "audio/s1/u1.wav": b"old", "notes.md": b"mine"})
    assert claim(folder, "gendergap corpus synth", fix="-", legacy=_earlier()) == {
        "synth_config.json", "utterances.tsv", "audio/s1/u1.wav"}
    (folder / "synth_config.json").write_text(json.dumps({"mine": True}))
    with pytest.raises(UserError, match="holds no record"):
        claim(folder, "gendergap corpus synth", fix="-", legacy=_earlier())


def _earlier():
    from corpora.synth.build import _earlier_corpus
    return _earlier_corpus


# --- pretraining's repair ------------------------------------------------------------------------------

def test_the_repair_keeps_a_users_checkpoint_last_partial(tmp_path):
    import torch

    from ssl_pretrain.run import repair_cut_short_last
    save = tmp_path / "checkpoints"
    save.mkdir()
    torch.save({"w": torch.arange(5000.0)}, save / "checkpoint_1_5.pt")
    full = (save / "checkpoint_1_5.pt").read_bytes()
    (save / "checkpoint_last.pt.partial").write_bytes(b"the user's own")
    for cut in (3000, 2000):
        (save / "checkpoint_last.pt").write_bytes(full[:cut])
        assert repair_cut_short_last(save) == "checkpoint_1_5.pt"
        assert (save / "checkpoint_last.pt").read_bytes() == full
    assert (save / "checkpoint_last.pt.partial").read_bytes() == b"the user's own"
    assert (save / "checkpoint_last.pt.partial1").read_bytes() == full[:3000]
    assert (save / "checkpoint_last.pt.partial2").read_bytes() == full[:2000]
