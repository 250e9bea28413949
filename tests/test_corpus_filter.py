"""Speakers of unknown gender, decided by the user (`gendergap corpus filter`): dropped from the
splits named, kept in the others, the study's refusal naming the command."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from cli_helpers import run_lines
from corpora.checks import rows_findings
from corpora.table import new_table, read_table, write_table


@pytest.fixture()
def table(tmp_path):
    """Common Voice's shape: most speakers give a gender, some do not, in every split."""
    rows = []
    for split in ("train", "valid", "test"):
        for spk, gender in (("a", "F"), ("b", "M"), ("c", "U"), ("d", "U")):
            for i in range(2):
                audio = tmp_path / "clips" / f"{split}-{spk}-{i}.wav"
                audio.parent.mkdir(exist_ok=True)
                sf.write(audio, np.zeros(1600, dtype=np.float32), 16000)
                rows.append({"id": f"{split}-{spk}-{i}", "audio": f"clips/{audio.name}", "offset": 0.0,
                             "duration": 0.1, "sample_rate": 16000, "speaker": f"{split}-{spk}", "gender": gender,
                             "corpus": "cv", "lang": "fr", "split": split, "text": "bonjour"})
    path = tmp_path / "cv.tsv"
    write_table(new_table(rows), path)
    return path


def test_the_refusal_names_the_filter(table):
    found = rows_findings(str(table), "cv", {"train": "train", "valid": "valid", "test": "test"})
    assert any("have no gender (U)" in f.message and "gendergap corpus filter" in f.fix for f in found), found


def test_unknown_gender_is_dropped_from_the_splits_named_and_kept_elsewhere(table, tmp_path, capsys):
    out = tmp_path / "sub" / "cv.test-known.tsv"
    rc, stdout, err = run_lines(capsys, "corpus", "filter", table, "--drop-unknown-gender", "valid,test",
                                "--out", out)
    assert rc == 0 and err == []
    assert "test: 2 speaker(s), 4 row(s) of unknown gender dropped; 2 speaker(s), 4 row(s) kept" in stdout
    kept = read_table(out)
    assert set(kept.loc[kept["split"] == "test", "gender"]) == {"F", "M"}
    assert (kept.loc[kept["split"] == "train", "gender"] == "U").sum() == 4        # train keeps them
    assert len(kept) == 24 - 8
    # the audio still reads from the new table's folder
    assert sf.info(out.parent / kept["audio"].iloc[0]).frames == 1600
    assert rows_findings(str(out), "cv", {"train": "train", "valid": "valid", "test": "test"}) == []


def test_bad_requests_are_one_line_and_write_nothing(table, tmp_path, capsys):
    out = tmp_path / "x.tsv"
    rc, _, err = run_lines(capsys, "corpus", "filter", table, "--drop-unknown-gender", "dev", "--out", out)
    assert rc == 2 and len(err) == 1 and "no split 'dev'" in err[0] and not out.exists()
    rc, _, err = run_lines(capsys, "corpus", "filter", table, "--drop-unknown-gender", "test", "--out", table)
    assert rc == 2 and len(err) == 1 and "--out is the table being filtered" in err[0]
    assert len(pd.read_csv(table, sep="\t")) == 24
