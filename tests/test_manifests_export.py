"""Exporters: fairseq wav2vec / s2t, SpeechBrain CSV, Kaldi dirs (+ validation), stats, and the CLI."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from corpora.base.errors import UserError
from corpora.table import new_table, read_table, write_table
from gendergap import cli
from manifest_fixtures import SR, write_corpus
from manifests.build import build_manifests
from manifests.export_fairseq import export_wav2vec, read_wav2vec_manifest
from manifests.export_kaldi import export_kaldi_dir, validate_kaldi_dir
from manifests.export_s2t import export_s2t, kaldi_num_frames
from manifests.stats import format_stats, gender_counts, table1, table2


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    return write_corpus(root, split_of={"f3": "valid", "m3": "valid", "m2": "test"})


def _sel(table):
    from corpora.utterances import UtteranceTable
    return UtteranceTable.load(table).audio_rows()


# ------------------------------------------------------------------ fairseq wav2vec

def test_wav2vec_manifest_counts_equal_soundfile_frames_and_segments_are_cut(corpus, tmp_path):
    df = _sel(corpus)
    info = export_wav2vec({"train": df[df["split"] == "train"], "valid": df[df["split"] == "valid"]}, tmp_path)
    assert info["cut"] == 3                                   # the three segments of long.wav
    for split in ("train", "valid"):
        root, rows = read_wav2vec_manifest(tmp_path / f"{split}.tsv")
        assert (tmp_path / f"{split}.tsv").read_text().splitlines()[0] == root
        for rel, n in rows:
            assert n == sf.info(os.path.join(root, rel)).frames
    root, rows = read_wav2vec_manifest(tmp_path / "train.tsv")
    cut = {Path(r).stem: n for r, n in rows if r.startswith(os.path.relpath(tmp_path / "audio", root))}
    assert set(cut) == {"f_long_0", "f_long_1", "f_long_2"}
    # The cut file holds exactly the segment's samples of the source recording.
    src, _ = sf.read(corpus.parent / "wav/long.wav", dtype="int16")
    seg, _ = sf.read(tmp_path / "audio/train/f_long_1.wav", dtype="int16")
    np.testing.assert_array_equal(seg, src[int(2.0 * SR): int(3.5 * SR)])


def test_long_utterance_ids_become_bounded_distinct_file_names(corpus, tmp_path):
    """An id of hundreds of characters (a corpus's path-like ids) made 'File name too long' once its
    atomic write's temporary name was added: file names keep the id's start and a digest of the whole."""
    df = _sel(corpus)
    train = df[df["split"] == "train"].head(2).copy()
    train["id"] = ["u" * 300 + "a", "u" * 300 + "b"]   # distinct only in their last character
    export_wav2vec({"train": train}, tmp_path, materialise="always")
    names = sorted(p.name for p in (tmp_path / "audio" / "train").iterdir())
    assert len(names) == 2 and names[0] != names[1] and all(len(n) <= len("x" * 120 + ".wav") for n in names), names
    assert all(n.startswith("u" * 100) for n in names)


def test_wav2vec_root_must_hold_every_file(corpus, tmp_path):
    df = _sel(corpus)
    whole = df[df["offset"] == 0]
    export_wav2vec({"train": whole}, tmp_path / "a", root=corpus.parent)
    root, rows = read_wav2vec_manifest(tmp_path / "a/train.tsv")
    assert root == str(corpus.parent) and all(r.startswith("wav/") for r, _ in rows)
    with pytest.raises(UserError, match="outside the manifest root"):
        export_wav2vec({"train": whole}, tmp_path / "b", root=corpus.parent / "wav" / "sub")
    with pytest.raises(UserError, match="fairseq reads whole files"):
        export_wav2vec({"train": df}, tmp_path / "c", materialise="never")


def test_wav2vec_refuses_mixed_sample_rates(corpus, tmp_path):
    df = _sel(corpus).head(3).copy()
    x = np.zeros(8000, dtype=np.float32)
    sf.write(tmp_path / "r8k.wav", x, 8000)
    df.loc[df.index[0], ["audio", "sample_rate", "duration"]] = [str(tmp_path / "r8k.wav"), 8000, 1.0]
    with pytest.raises(UserError, match="sample rate"):
        export_wav2vec({"train": df}, tmp_path / "out")


# ------------------------------------------------------------------ fairseq s2t

def test_s2t_tsv_config_and_sentencepiece_read_by_fairseq(corpus, tmp_path):
    import sentencepiece as spm
    from fairseq.data.audio.data_cfg import S2TDataConfig
    from fairseq.data.audio.speech_to_text_dataset import SpeechToTextDatasetCreator

    df = _sel(corpus)
    splits = {"train": df[df["split"] == "train"], "valid": df[df["split"] == "valid"]}
    out = tmp_path / "s2t"
    info = export_s2t(splits, out, feature_template="feats/{speaker}/{safe_id}.npy", text_column="tgt_text_en",
                      tgt_lang="en", vocab_size=40, n_frames=lambda r: int(r["duration"] * 100))
    cfg = S2TDataConfig(out / "config.yaml")
    assert Path(cfg.bpe_tokenizer["sentencepiece_model"]).is_file()       # resolved relative to the yaml
    assert (out / cfg.vocab_filename).is_file()
    samples = SpeechToTextDatasetCreator._load_samples_from_tsv(str(out), "train")
    assert [s["id"] for s in samples] == list(splits["train"]["id"])
    first = samples[0]
    assert set(first) == {"id", "audio", "n_frames", "tgt_text", "speaker", "tgt_lang"}
    assert first["audio"] == f"feats/{first['speaker']}/{first['id']}.npy"
    assert int(first["n_frames"]) == int(splits["train"]["duration"].iloc[0] * 100)
    sp = spm.SentencePieceProcessor(model_file=str(out / info["spm_model"]))
    assert sp.decode(sp.encode("hello f0 sentence 1")) == "hello f0 sentence 1"
    # fairseq's dictionary file loads and has the pieces minus the 4 special symbols.
    from fairseq.data import Dictionary
    d = Dictionary.load(str(out / cfg.vocab_filename))
    assert len(d) == sp.get_piece_size() - 4 + 4
    # n_frames from a column, and the Kaldi-frame default.
    export_s2t(splits, tmp_path / "col", n_frames="sample_rate", vocab_size=30)
    assert set(pd.read_csv(tmp_path / "col/train.tsv", sep="\t")["n_frames"]) == {SR}
    export_s2t(splits, tmp_path / "dflt", vocab_size=30)
    n = pd.read_csv(tmp_path / "dflt/train.tsv", sep="\t")["n_frames"].iloc[0]
    assert n == kaldi_num_frames(round(splits["train"]["duration"].iloc[0] * SR), SR)
    with pytest.raises(UserError, match="cannot be filled"):
        export_s2t(splits, tmp_path / "bad", feature_template="{nope}.npy", vocab_size=30)


def test_kaldi_num_frames_matches_torchaudio_fbank():
    import torch
    import torchaudio.compliance.kaldi as K
    for n in (400, 401, 16000, 23456):
        feats = K.fbank(torch.zeros(1, n) + 0.1, num_mel_bins=23, sample_frequency=SR, dither=0.0)
        assert feats.shape[0] == kaldi_num_frames(n, SR)


# ------------------------------------------------------------------ SpeechBrain

def test_speechbrain_reads_the_csv_and_the_segments(corpus, tmp_path):
    import speechbrain as sb
    from speechbrain.dataio.dataio import read_audio
    from speechbrain.dataio.dataset import DynamicItemDataset

    report = build_manifests(corpus, tmp_path / "sb", gender="any", fmt="speechbrain", seed=0)
    assert report["splits"]["train"]["all"]["rows"] > 0

    @sb.utils.data_pipeline.takes("wav", "start", "stop")
    @sb.utils.data_pipeline.provides("sig")
    def audio_pipeline(wav, start, stop):
        return read_audio({"file": wav, "start": int(start), "stop": int(stop)})

    ds = DynamicItemDataset.from_csv(str(tmp_path / "sb/train.csv"), dynamic_items=[audio_pipeline],
                                     output_keys=["id", "sig", "duration", "spk_id", "wrd"])
    table = read_table(tmp_path / "sb/selection_train.tsv").set_index("id")
    seen_segment = False
    for item in ds:
        row = table.loc[item["id"]]
        expect, _ = sf.read(row["audio"], start=round(row["offset"] * SR), frames=round(row["duration"] * SR),
                            dtype="float32")
        np.testing.assert_allclose(item["sig"].numpy(), expect, atol=1e-6)
        assert item["duration"] == pytest.approx(row["duration"], abs=1e-3) and item["wrd"] == row["text"]
        seen_segment |= row["offset"] > 0
    assert seen_segment


# ------------------------------------------------------------------ Kaldi

def test_kaldi_dirs_pass_validation_and_bad_dirs_fail(corpus, tmp_path):
    df = _sel(corpus)
    d = tmp_path / "train"
    info = export_kaldi_dir(df[df["split"] == "train"], d)
    assert info["spk2gender"] and info["recordings"] == info["utterances"] - 2     # 3 segments share long.wav
    validate_kaldi_dir(d)
    seg = (d / "segments").read_text().splitlines()
    assert any(" long 2.000 3.500" in ln for ln in seg)
    u2s = (d / "utt2spk").read_text().splitlines()
    assert u2s == sorted(u2s, key=lambda s: s.encode()) and all(ln.split()[0].startswith(ln.split()[1]) for ln in u2s)
    assert set((d / "spk2gender").read_text().split()[1::2]) == {"f", "m"}

    def broken(edit):
        bad = tmp_path / f"bad{broken.n}"
        broken.n += 1
        bad.mkdir()
        for f in d.iterdir():
            (bad / f.name).write_bytes(f.read_bytes())
        edit(bad)
        with pytest.raises(UserError) as e:
            validate_kaldi_dir(bad)
        return str(e.value)
    broken.n = 0

    def swap_lines(name):
        def edit(p):
            lines = (p / name).read_text().splitlines(keepends=True)
            lines[0], lines[1] = lines[1], lines[0]
            (p / name).write_text("".join(lines))
        return edit

    assert "sorted order" in broken(swap_lines("utt2spk"))
    assert "sorted order" in broken(swap_lines("text"))
    assert "do not match" in broken(lambda p: (p / "spk2utt").write_text(
        "".join(ln.rsplit(" ", 1)[0] + "\n" if i == 0 else ln + "\n"
                for i, ln in enumerate((p / "spk2utt").read_text().splitlines()))))
    assert "mal-formed" in broken(lambda p: (p / "spk2gender").write_text(
        (p / "spk2gender").read_text().replace(" f\n", " female\n", 1)))
    assert "differ from utt2spk" in broken(lambda p: (p / "text").write_text(
        "".join((p / "text").read_text().splitlines(keepends=True)[1:])))
    assert "end > start" in broken(lambda p: (p / "segments").write_text(
        (p / "segments").read_text().replace(" 2.000 3.500", " 2.000 1.000")))
    assert "no newline" in broken(lambda p: (p / "wav.scp").write_text((p / "wav.scp").read_text().rstrip("\n")))
    assert "illegal symbol" in broken(lambda p: (p / "text").write_text(
        (p / "text").read_text().replace("bonjour", "<s>", 1)))
    assert "Unicode whitespace" in broken(lambda p: (p / "text").write_text(
        (p / "text").read_text().replace("bonjour", "bon\u00a0jour", 1)))
    assert "sorted on speaker-id" in broken(lambda p: [
        (p / "utt2spk").write_text("a x\nb w\n"), (p / "spk2utt").write_text("w b\nx a\n")])

    def first_line(name, edit_line):
        def edit(p):
            lines = (p / name).read_text().splitlines(keepends=True)
            (p / name).write_text(edit_line(lines[0]) + "".join(lines[1:]))
        return edit

    # the rest of validate_data_dir.sh's rules, one broken file each
    assert "missing (pass no_text=True" in broken(lambda p: (p / "text").unlink())
    assert "missing (pass no_wav=True" in broken(lambda p: [(p / "segments").unlink(), (p / "wav.scp").unlink()])
    assert "segments file exists but no wav.scp" in broken(lambda p: (p / "wav.scp").unlink())
    assert "starts with ~" in broken(first_line("wav.scp", lambda ln: ln.replace(" ", " ~/", 1)))
    assert "differ from segments' recordings" in broken(first_line("wav.scp", lambda ln: "0rec" + ln[ln.index(" "):]))
    assert "value > 0" in broken(first_line("utt2dur", lambda ln: ln.split()[0] + " 0\n"))
    assert "missing (pass no_feats=True" in str(pytest.raises(UserError, validate_kaldi_dir, d, no_feats=False).value)
    (d / "feats.scp").write_text("".join(ln.split()[0] + " feats.ark:1\n" for ln in u2s[1:]))
    assert "differ from utt2spk" in str(pytest.raises(UserError, validate_kaldi_dir, d).value)
    (d / "feats.scp").write_text("".join(ln.split()[0] + " feats.ark:1\n" for ln in u2s))
    assert validate_kaldi_dir(d, no_feats=False) == {"utterances": len(u2s), "speakers": info["speakers"]}


def test_kaldi_leaves_spk2gender_out_with_unknown_speakers(corpus, tmp_path):
    df = _sel(corpus)
    df.loc[df["speaker"] == "f0", "gender"] = "U"
    assert not export_kaldi_dir(df, tmp_path / "k")["spk2gender"]
    assert not (tmp_path / "k/spk2gender").exists()


# ------------------------------------------------------------------ stats

def _stats_table():
    rows = []
    for spk, g, split, minutes in [("a", "F", "train", 45), ("b", "F", "train", 45), ("c", "M", "train", 61),
                                   ("d", "F", "valid", 30), ("e", "M", "valid", 30), ("x", "F", "train", 10),
                                   ("x", "M", "train", 5)]:
        for k in range(3):
            rows.append({"id": f"{spk}{g}{k}", "audio": "a.wav", "duration": minutes * 20.0, "sample_rate": SR,
                         "speaker": spk, "gender": g, "corpus": "mtedx", "split": split, "text": "t"})
    return new_table(rows)


def test_stats_tables_in_the_studys_layout():
    df = _stats_table()
    splits = {s: g for s, g in df.groupby("split", sort=False)}
    counts = gender_counts(splits)
    t2 = table2(counts, splits).set_index(["split", ""])
    assert t2.loc[("train", "Duration")].to_dict() == {"M": "1:01", "F": "1:30", "B": "0:15", "All": "2:46"}
    assert t2.loc[("train", "# speakers")].to_dict() == {"M": "1", "F": "2", "B": "1", "All": "4"}
    assert t2.loc[("valid", "Duration")].to_dict() == {"M": "0:30", "F": "0:30", "B": "-", "All": "1:00"}
    t1 = table1(counts).set_index("Dataset")
    assert t1.loc["mtedx", "Duration"] == "1:31 / 2:00" and t1.loc["TOTAL (M/F)", "Duration"] == "1:31 / 2:00"
    md = format_stats(splits, "markdown")
    assert "| train | Duration | 1:01 | 1:30 | 0:15 | 2:46 |" in md
    csv_text = format_stats(splits, "csv")
    assert csv_text.splitlines()[0] == "split,corpus,group,rows,seconds,speakers,hours"


# ------------------------------------------------------------------ CLI

def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "gendergap.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parent.parent)


def test_cli_build_and_stats(corpus, tmp_path, capsys):
    out = tmp_path / "bal"
    rc = cli.main(["-q", "manifest", "build", "--table", str(corpus), "--gender", "balanced", "--format", "kaldi",
                   "--valid-hours", "0.001", "--seed", "3", "--out", str(out)])
    assert rc == 0
    assert {"selection_train.tsv", "selection_valid.tsv", "selection_report.json", "train", "valid"} <= {
        p.name for p in out.iterdir()}
    report = json.loads((out / "selection_report.json").read_text())
    assert report["request"]["seed"] == 3 and report["format"] == "kaldi"
    tr, va = read_table(out / "selection_train.tsv"), read_table(out / "selection_valid.tsv")
    assert not set(tr["speaker"]) & set(va["speaker"]) and "m2" not in set(tr["speaker"]) | set(va["speaker"])
    validate_kaldi_dir(out / "train"), validate_kaldi_dir(out / "valid")
    # Same seed, same selection; the out dir must be new unless --overwrite.
    rc = cli.main(["-q", "manifest", "build", "--table", str(corpus), "--gender", "balanced", "--format", "kaldi",
                   "--valid-hours", "0.001", "--seed", "3", "--out", str(out), "--overwrite"])
    assert rc == 0 and list(read_table(out / "selection_train.tsv")["id"]) == list(tr["id"])
    capsys.readouterr()
    assert cli.main(["manifest", "stats", str(out), "--format", "markdown", "--seconds"]) == 0
    text = capsys.readouterr().out
    assert "| train | # speakers |" in text and "TOTAL (M/F)" in text


def test_cli_exclude_speakers_from_a_table(corpus, tmp_path):
    test_table = tmp_path / "test.tsv"
    df = read_table(corpus)
    write_table(df[df["speaker"].isin(["f0", "m0"])].reset_index(drop=True), test_table)
    rc = cli.main(["-q", "manifest", "build", "--table", str(corpus), "--gender", "any", "--format", "speechbrain",
                   "--exclude-speakers", str(test_table), "--out", str(tmp_path / "o")])
    assert rc == 0
    got = set(read_table(tmp_path / "o/selection_train.tsv")["speaker"])
    assert not got & {"f0", "m0"} and {"f1", "m1"} <= got


def _bad_tables(corpus, tmp_path):
    df = read_table(corpus)
    no_gender = tmp_path / "no_gender.tsv"
    df.drop(columns=["gender"]).to_csv(no_gender, sep="\t", index=False)
    mixed = tmp_path / "mixed.tsv"
    d2 = df.copy()
    d2.loc[d2["id"] == "f1_2", "gender"] = "M"
    write_table(d2, mixed)
    return {"no_gender": no_gender, "mixed": mixed}


@pytest.mark.parametrize("case,extra,expect", [
    ("empty", ["--gender", "F", "--corpus", "nope"], "selection is empty"),
    ("no_gender", ["--gender", "F"], "missing column(s) gender"),
    ("mixed", ["--gender", "balanced"], "speaker 'f1' has genders ['F', 'M']"),
    ("root", ["--gender", "F", "--root", "/nonexistent/elsewhere"], "outside the manifest root"),
    ("too_much", ["--gender", "F", "--hours", "40"], "asked for 40:00 of F speech, the pool has 0:00 of F"),
])
def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(corpus, tmp_path, case, extra, expect):
    table = _bad_tables(corpus, tmp_path).get(case, corpus)
    out = tmp_path / "out" / "m"
    proc = run_cli("manifest", "build", "--table", table, "--format", "fairseq", "--out", out, *extra)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gendergap: error: ") and expect in lines[0], proc.stderr
    assert " -- " in lines[0]                                  # every error says what to do
    assert not out.exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())   # no staging left over


def test_cli_refuses_a_non_empty_out_dir_and_keeps_it(corpus, tmp_path):
    out = tmp_path / "m"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    proc = run_cli("manifest", "build", "--table", corpus, "--gender", "F", "--format", "fairseq", "--out", out)
    assert proc.returncode == 2 and "not empty" in proc.stderr and "--overwrite" in proc.stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_build_manifest_for_the_study_gives_a_summary(corpus, tmp_path):
    from manifests.build import build_manifest
    report = build_manifest(table=corpus, gender="F", fmt="fairseq", out=tmp_path / "f", splits=("train",), seed=0)
    assert report["summary"].startswith("train F ") and "valid F " in report["summary"]
    assert report["request"]["train_splits"] == ["train"]
    assert (tmp_path / "f/train.tsv").is_file() and (tmp_path / "f/valid.tsv").is_file()
