"""`gendergap corpus index|stats|synth` through the CLI: good runs, and every kind of bad input
giving exit code 2, one line on stderr naming the file (and line), and no output file."""
import numpy as np
import pytest
import soundfile as sf

from cli_helpers import run_lines as run
from corpora.table import read_table
from fixtures_corpora import (
    make_commonvoice,
    make_generic,
    make_kaldi,
    make_lebenchmark,
    make_mls,
    make_mtedx,
    make_mustshe,
    write_audio,
)
from gendergap import cli

GENERIC_MAP = "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur"


def assert_user_error(capsys, out_file, argv, *needles):
    rc, _, err = run(capsys, *argv)
    assert rc == 2, err
    assert len(err) == 1, err
    assert err[0].startswith("gendergap: error: ")
    for n in needles:
        assert n in err[0], err[0]
    assert not out_file.exists()
    assert not list(out_file.parent.glob(f".{out_file.name}.*"))   # no temp file left behind
    return err[0]


def test_index_then_stats(tmp_path, capsys):
    root, genders = make_mtedx(tmp_path)
    out = tmp_path / "tables" / "mtedx.tsv"
    rc, _, _ = run(capsys, "corpus", "index", "--kind", "mtedx", "--root", str(root), "--lang", "fr",
                   "--tgt-lang", "en", "--speaker-genders", str(genders), "--out", str(out), "--relative")
    assert rc == 0
    df = read_table(out)
    assert len(df) == 4 and "tgt_text_en" in df.columns and not df["audio"].iloc[0].startswith("/")
    assert (out.parent / df["audio"].iloc[0]).resolve().is_file()
    rc, text, _ = run(capsys, "corpus", "stats", str(out), "--format", "markdown", "--by", "split")
    assert rc == 0
    lines = text.splitlines()
    assert lines[0].startswith("| Dataset") and "Duration (M / F / U)" in lines[0]
    train = next(line for line in lines if "| train" in line)
    assert "0:00 / 0:00 / 0:00" in train and "| 1 / 1 / 0" in train   # 1 M speaker, 1 F speaker
    rc, csv_text, _ = run(capsys, "corpus", "stats", str(out), "--format", "csv")
    header = csv_text.splitlines()[0].split(",")
    row = dict(zip(header, csv_text.splitlines()[-1].split(",")))
    assert row["corpus"] == "TOTAL" and float(row["seconds_F"]) == pytest.approx(4.5)
    assert float(row["seconds_M"]) == pytest.approx(1.5) and row["speakers_all"] == "3"


def test_index_style_and_corpus_overrides(tmp_path, capsys):
    out = tmp_path / "k.tsv"
    rc, _, _ = run(capsys, "-q", "corpus", "index", "--kind", "kaldi", "--root", str(make_kaldi(tmp_path)),
                   "--out", str(out), "--style", "spontaneous", "--corpus", "ESLO2", "--lang", "fr")
    assert rc == 0
    df = read_table(out)
    assert set(df["style"]) == {"spontaneous"} and set(df["corpus"]) == {"ESLO2"} and set(df["lang"]) == {"fr"}


def test_unknown_gender_label_reported_and_mapped_to_u(tmp_path, capsys):
    csv = make_generic(tmp_path)
    csv.write_text(csv.read_text().replace("B,Male", "B,Frau"))
    out = tmp_path / "t.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "generic", "--root", str(csv), "--map", GENERIC_MAP,
                     "--out", str(out))
    assert rc == 0
    warn = [line for line in err if "unknown gender label 'Frau'" in line]
    assert len(warn) == 1 and str(csv) in warn[0]
    df = read_table(out).set_index("id")
    assert len(df) == 3 and df.loc["u3", "gender"] == "U" and df.loc["u3", "gender_raw"] == "Frau"


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing written

def _generic_with(tmp_path, edit):
    csv = make_generic(tmp_path)
    edit(csv)
    return ["corpus", "index", "--kind", "generic", "--root", str(csv), "--map", GENERIC_MAP], csv


def test_missing_audio(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: (c.parent / "wav" / "short.wav").unlink())
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "short.wav does not exist")


def test_metadata_row_points_to_missing_file(tmp_path, capsys):
    root = make_commonvoice(tmp_path)
    tsv = root / "dev.tsv"
    tsv.write_text(tsv.read_text() + "c9\tcommon_voice_fr_99.mp3\tPhrase.\t1\t0\t\tmale\t\t\tfr\t\n")
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "commonvoice", "--root", str(root), "--out", str(out)],
                      f"{tsv}:3:", "common_voice_fr_99.mp3 does not exist")


def test_corrupt_audio(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: (c.parent / "wav" / "short.wav").write_bytes(b"RIFF garbage" * 10))
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "cannot read the audio header")


def test_empty_audio(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: (c.parent / "wav" / "short.wav").write_bytes(b""))
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "is empty")


def test_zero_length_audio(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path,
                              lambda c: sf.write(c.parent / "wav" / "short.wav", np.zeros(0, "float32"), 16000))
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "is empty (0 samples)")


def test_unsupported_sample_rate_then_accepted_with_option(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: write_audio(c.parent / "wav" / "short.wav", 1.0, sr=8000))
    out = tmp_path / "o.tsv"
    line = assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "8000 Hz, accepted: 16000 Hz")
    assert "--sample-rates 8000" in line and "resample" in line
    rc, _, _ = run(capsys, *argv, "--out", str(out), "--sample-rates", "16000,8000")
    assert rc == 0 and sorted(set(read_table(out)["sample_rate"])) == [8000, 16000]


def test_unsupported_channels(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: write_audio(c.parent / "wav" / "short.wav", 1.0, channels=2))
    out = tmp_path / "o.tsv"
    line = assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "2 channels")
    assert "--max-channels 2" in line and "--resample 16000" in line and "mono" in line and "sox" not in line


def test_duplicate_ids(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: c.write_text(c.read_text().replace("u3,", "u1,")))
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, argv + ["--out", str(out)], f"{csv}:4:", "duplicate id 'u1'", f"{csv}:2")


def test_duplicate_ids_in_kaldi_file(tmp_path, capsys):
    d = make_kaldi(tmp_path)
    (d / "utt2spk").write_text((d / "utt2spk").read_text() + "s1-rec1-000 s1\n")
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out)],
                      f"{d / 'utt2spk'}:5:", "duplicate id 's1-rec1-000'")


def test_non_utf8_text(tmp_path, capsys):
    root = make_mls(tmp_path, conflict=False)
    trans = root / "train" / "transcripts.txt"
    trans.write_bytes(trans.read_text(encoding="utf-8").encode("latin-1"))
    out = tmp_path / "o.tsv"
    line = assert_user_error(capsys, out, ["corpus", "index", "--kind", "mls", "--root", str(root), "--out", str(out)],
                             f"{trans}:1:", "not UTF-8")
    assert "iconv" in line


def test_segment_past_end_of_recording(tmp_path, capsys):
    # mTEDx segments past the end are trimmed by default (test_mtedx_segment_past_end_is_trimmed);
    # --strict refuses them. --split train: the test split's talk c3 is not in the speaker list,
    # which --strict would refuse first.
    root, genders = make_mtedx(tmp_path)
    yml = root / "fr-en" / "data" / "train" / "txt" / "train.yaml"
    yml.write_text(yml.read_text().replace("duration: 2.5, offset: 3.0", "duration: 4.5, offset: 3.0"))
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "mtedx", "--root", str(root), "--lang", "fr",
                                    "--tgt-lang", "en", "--speaker-genders", str(genders), "--out", str(out),
                                    "--strict", "--split", "train"],
                      f"{yml}:2:", "3.00-7.50 s runs past the end", "(6.00 s)")


def test_text_not_aligned_with_yaml(tmp_path, capsys):
    root, genders = make_mtedx(tmp_path)
    en = root / "fr-en" / "data" / "train" / "txt" / "train.en"
    en.write_text("only one line\n")
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "mtedx", "--root", str(root / "fr-en"),
                                    "--speaker-genders", str(genders), "--out", str(out)],
                      f"{en}:2:", "1 lines but train.yaml has 3 segments")


def test_malformed_tsv_row(tmp_path, capsys):
    root = make_mustshe(tmp_path)
    tsv = root / "MONOLINGUAL.fr_v1.2.tsv"
    tsv.write_text(tsv.read_text() + "fr-0004\ten-fr\ttoo few fields\n")
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "mustshe", "--root", str(root), "--out", str(out)],
                      f"{tsv}:5:", "3 fields, the header has 11")


def test_option_that_does_not_apply_and_bad_rates(tmp_path, capsys):
    out = tmp_path / "o.tsv"
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "mls", "--root", str(tmp_path), "--out", str(out),
                                    "--speaker-genders", "x.tsv"], "--speaker-genders does not apply to --kind mls")
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "kaldi", "--root", str(tmp_path), "--out", str(out),
                                    "--sample-rates", "16k"], "bad --sample-rates '16k'")
    assert_user_error(capsys, out, ["corpus", "index", "--kind", "kaldi", "--root", str(tmp_path / "nope"),
                                    "--out", str(out)], "wav.scp not found")


def test_existing_table_survives_a_failed_index(tmp_path, capsys):
    argv, csv = _generic_with(tmp_path, lambda c: None)
    out = tmp_path / "o.tsv"
    assert run(capsys, *argv, "--out", str(out))[0] == 0
    before = out.read_bytes()
    (csv.parent / "wav" / "short.wav").unlink()
    rc, _, err = run(capsys, *argv, "--out", str(out))
    assert rc == 2 and len(err) == 1 and out.read_bytes() == before


def help_text(capsys, *argv):
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def test_help_texts_teach_with_examples(capsys):
    text = help_text(capsys, "corpus", "index")
    for needle in ("--kind", "--sample-rates", "--speaker-genders", "--map", "examples:", "mls_french"):
        assert needle in text
    for sub in ("stats", "synth"):
        assert "examples:" in help_text(capsys, "corpus", sub)
    assert "--seed" in help_text(capsys, "corpus", "synth")


def test_synth_then_stats(tmp_path, capsys):
    # The real generator (espeak-ng), at its test size; stats read the table it wrote.
    rc, out, _ = run(capsys, "-q", "corpus", "synth", "--out", str(tmp_path / "synth"), "--size", "tiny", "--seed", "1")
    assert rc == 0
    table = tmp_path / "synth" / "utterances.tsv"
    assert str(table) in out and table.is_file()
    df = read_table(table)
    rc, csv_text, _ = run(capsys, "corpus", "stats", str(table), "--format", "csv", "--by", "split")
    assert rc == 0
    total = dict(zip(csv_text.splitlines()[0].split(","), csv_text.splitlines()[-1].split(",")))
    assert int(total["utterances_all"]) == len(df) > 0
    assert int(total["speakers_F"]) == df[df["gender"] == "F"]["speaker"].nunique() > 0
    assert float(total["seconds_M"]) == pytest.approx(df[df["gender"] == "M"]["duration"].sum(), abs=1e-3)


def test_split_name_for_single_split_kinds_and_empty_speaker(tmp_path, capsys):
    path = make_lebenchmark(tmp_path)
    out = tmp_path / "lb.tsv"
    rc, _, _ = run(capsys, "corpus", "index", "--kind", "lebenchmark", "--root", str(path), "--split", "train",
                   "--out", str(out))
    assert rc == 0 and set(read_table(out)["split"]) == {"train"}
    out2 = tmp_path / "lb2.tsv"
    assert_user_error(capsys, out2, ["corpus", "index", "--kind", "lebenchmark", "--root", str(path), "--split",
                                     "train,dev", "--out", str(out2)], "reads one split")
    path.write_text(path.read_text().replace('"spk_id": "M01"', '"spk_id": ""'))
    line = assert_user_error(capsys, out2, ["corpus", "index", "--kind", "lebenchmark", "--root", str(path),
                                            "--out", str(out2)], "row 'M01_a' has no speaker id")
    entry_line = 1 + next(i for i, t in enumerate(path.read_text().splitlines()) if t.strip().startswith('"M01_a"'))
    assert f"{path}:{entry_line}:" in line
