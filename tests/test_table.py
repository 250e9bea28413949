"""The utterance table: gender normalisation, validation errors naming the line, atomic writes."""
import pandas as pd
import pytest

from corpora.base.errors import UserError
from corpora.table import COLUMNS, new_table, normalise_gender, read_table, speaker_genders, write_table


def _rows(n=4):
    return [{"id": f"u{i}", "audio": f"a{i}.wav", "offset": 0.0, "duration": 1.5, "sample_rate": 16000,
             "speaker": f"s{i % 2}", "gender": "F" if i % 2 == 0 else "M", "corpus": "c", "lang": "fr",
             "split": "train", "text": f"bonjour {i}", "tgt_text_en": f"hello {i}"} for i in range(n)]


@pytest.mark.parametrize("raw,code,known", [
    ("female", "F", True), ("Male", "M", True), ("male_masculine", "M", True), ("female_feminine", "F", True),
    ("f", "F", True), ("H", "M", True), ("", "U", True), ("other", "U", True), (None, "U", True),
    ("robot", "U", False), ("zzz", "U", False)])
def test_normalise_gender(raw, code, known):
    assert normalise_gender(raw) == (code, known)


def test_write_read_roundtrip(tmp_path):
    df = new_table(_rows())
    assert list(df.columns[:len(COLUMNS)]) == COLUMNS
    path = write_table(df, tmp_path / "t.tsv")
    back = read_table(path)
    pd.testing.assert_frame_equal(back, df)
    assert not list(tmp_path.glob(".*tmp"))  # no temp file left behind


def test_duplicate_id_names_the_line(tmp_path):
    rows = _rows()
    rows[2]["id"] = "u1"
    with pytest.raises(UserError) as e:
        write_table(new_table(rows), tmp_path / "t.tsv")
    assert ":4:" in str(e.value) and "duplicate id" in str(e.value)
    assert not (tmp_path / "t.tsv").exists()


def test_bad_gender_and_missing_column(tmp_path):
    rows = _rows()
    rows[1]["gender"] = "female"  # not normalised
    with pytest.raises(UserError, match="not F, M or U"):
        write_table(new_table(rows), tmp_path / "t.tsv")
    (tmp_path / "bad.tsv").write_text("id\taudio\nu1\ta.wav\n")
    with pytest.raises(UserError, match="missing column"):
        read_table(tmp_path / "bad.tsv")


def test_non_utf8_names_the_line(tmp_path):
    df = new_table(_rows())
    path = write_table(df, tmp_path / "t.tsv")
    data = path.read_bytes().replace(b"bonjour 2", "bonjour \xe9".encode("latin-1"))
    path.write_bytes(data)
    with pytest.raises(UserError) as e:
        read_table(path)
    assert ":4:" in str(e.value) and "UTF-8" in str(e.value)


def test_speaker_with_two_genders_is_an_error():
    rows = _rows()
    rows[2]["gender"] = "M"  # speaker s0 is F on row 0
    with pytest.raises(UserError, match="s0"):
        speaker_genders(new_table(rows))
    assert speaker_genders(new_table(_rows())).to_dict() == {"s0": "F", "s1": "M"}


def test_tab_in_text_is_refused(tmp_path):
    rows = _rows()
    rows[0]["text"] = "a\tb"
    with pytest.raises(UserError, match="tab or newline"):
        write_table(new_table(rows), tmp_path / "t.tsv")


def test_atomic_writes_get_normal_permissions(tmp_path):
    import os

    from corpora.base.atomic import write_text
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
