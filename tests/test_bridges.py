"""The bridges to lhotse and Hugging Face `datasets`: `corpus index --kind lhotse|hf` on sets those
libraries wrote themselves, `manifest build --format lhotse` read back by lhotse and by the lhotse
reader (the round trip keeps ids, speakers, genders and segments), and one bad input per bridge
giving exit code 2 with one stderr line."""
from __future__ import annotations

import logging
import os

import numpy as np
import pandas as pd
import pytest
import soundfile as sf

from cli_helpers import run_lines as run
from corpora.readers import AudioCheck, read_hf, read_lhotse
from corpora.table import read_table
from manifest_fixtures import write_corpus

QUIET = AudioCheck(progress=False)
SR = 16000


def _wav(path, seconds, seed=0):
    x = 0.1 * np.random.default_rng(seed).standard_normal(int(seconds * SR))
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x.astype(np.float32), SR, subtype="PCM_16")
    return path


def _one_error(capsys, *argv):
    capsys.readouterr()   # what building the fixtures printed (datasets' progress bars) is not the command's
    rc, _, err = run(capsys, *argv)
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("gendergap: error: "), err
    return err[0]


# ---------------------------------------------------------------- lhotse in

def _lhotse_set(tmp_path):
    """Two recordings written with soundfile, described by lhotse: three segments of one 5 s talk and a
    2 s clip; gender as "F", as "male", in custom, and missing."""
    from lhotse import Recording, RecordingSet, SupervisionSegment, SupervisionSet

    recs = RecordingSet.from_recordings([Recording.from_file(_wav(tmp_path / "audio/talk.wav", 5.0)),
                                         Recording.from_file(_wav(tmp_path / "audio/clip.wav", 2.0, seed=1))])
    sups = SupervisionSet.from_segments([
        SupervisionSegment("talk-0", "talk", start=0.5, duration=1.25, speaker="ana", gender="F", text="bonjour",
                           language="fr"),
        SupervisionSegment("talk-1", "talk", start=2.0, duration=1.5, speaker="ben", gender="male", text="au revoir",
                           language="fr"),
        SupervisionSegment("talk-2", "talk", start=3.75, duration=1.0, speaker="cy", text="merci", language="fr"),
        SupervisionSegment("clip-0", "clip", start=0.0, duration=2.0, speaker="dee", text="salut", language="fr",
                           custom={"gender": "female", "tgt_text_en": "hi", "age": 31}),
    ])
    return recs, sups


def test_lhotse_cutset_one_row_per_supervision(tmp_path, caplog):
    from lhotse import CutSet

    recs, sups = _lhotse_set(tmp_path)
    cuts = CutSet.from_manifests(recordings=recs, supervisions=sups)
    cuts.to_file(tmp_path / "cuts.jsonl.gz")
    with caplog.at_level(logging.WARNING):
        t = read_lhotse(tmp_path / "cuts.jsonl.gz", check=QUIET).set_index("id")
    assert list(t.index) == ["talk-0", "talk-1", "talk-2", "clip-0"]
    assert t.loc["talk-1", "audio"] == t.loc["talk-0", "audio"] == str(tmp_path / "audio/talk.wav")
    assert (t.loc["talk-0", "offset"], t.loc["talk-0", "duration"]) == (0.5, 1.25)
    assert (t.loc["talk-1", "offset"], t.loc["talk-1", "duration"]) == (2.0, 1.5)
    assert list(t.loc[["talk-0", "talk-1", "talk-2", "clip-0"], "gender"]) == ["F", "M", "U", "F"]
    assert t.loc["talk-1", "gender_raw"] == "male" and t.loc["clip-0", "gender_raw"] == "female"
    assert t.loc["clip-0", "tgt_text_en"] == "hi" and t.loc["clip-0", "age"] == "31"
    assert t.loc["talk-1", "text"] == "au revoir" and t.loc["talk-0", "lang"] == "fr" and set(t["sample_rate"]) == {SR}
    assert set(t["corpus"]) == {"lhotse"} and set(t["split"]) == {""}
    warned = [r.getMessage() for r in caplog.records if "carry no gender" in r.getMessage()]
    assert len(warned) == 1 and "1 of 4 supervision(s)" in warned[0]
    # Cuts trimmed to their supervisions start inside the recording: offset = cut start + supervision start;
    # a supervision two overlapping cuts both hold is one row.
    cuts.trim_to_supervisions().to_file(tmp_path / "trimmed.jsonl.gz")
    t2 = read_lhotse(tmp_path / "trimmed.jsonl.gz", splits=["dev"], check=QUIET).set_index("id")
    assert t2.loc[t.index, ["offset", "duration", "gender"]].equals(t[["offset", "duration", "gender"]])
    assert set(t2["split"]) == {"valid"}


def test_lhotse_recipe_folder_and_recordings_with_supervisions(tmp_path, monkeypatch):
    from lhotse import Recording, RecordingSet

    recs, sups = _lhotse_set(tmp_path)
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    # what `lhotse prepare` writes: <corpus>_<role>_<split>.jsonl.gz, sources relative to where it ran
    monkeypatch.chdir(tmp_path)
    rel = RecordingSet.from_recordings([Recording.from_file("audio/talk.wav"), Recording.from_file("audio/clip.wav")])
    rel.to_file(manifests / "mini_recordings_train.jsonl.gz")
    sups.filter(lambda s: s.recording_id == "talk").to_file(manifests / "mini_supervisions_train.jsonl.gz")
    rel.to_file(manifests / "mini_recordings_dev.jsonl.gz")
    sups.filter(lambda s: s.recording_id == "clip").to_file(manifests / "mini_supervisions_dev.jsonl.gz")
    rel.to_file(manifests / "noise_recordings_all.jsonl.gz")          # no supervisions: skipped, said so
    monkeypatch.chdir(tmp_path / "manifests")                           # elsewhere: --audio-dir says where
    df = read_lhotse(manifests, audio_dir=tmp_path, check=QUIET)
    assert sorted(zip(df["id"], df["split"], df["corpus"])) == [
        ("clip-0", "valid", "mini"), ("talk-0", "train", "mini"), ("talk-1", "train", "mini"),
        ("talk-2", "train", "mini")]
    assert set(df["audio"]) == {str(tmp_path / "audio/talk.wav"), str(tmp_path / "audio/clip.wav")}
    assert list(read_lhotse(manifests, splits=["dev"], audio_dir=tmp_path, check=QUIET)["id"]) == ["clip-0"]
    # a RecordingSet as --root with its SupervisionSet beside it; --speaker-genders fills the one missing
    recs.to_file(tmp_path / "recs.jsonl")
    sups.to_file(tmp_path / "sups.jsonl")
    (tmp_path / "spk.tsv").write_text("speaker\tgender\ncy\tf\n")
    t = read_lhotse(tmp_path / "recs.jsonl", supervisions=tmp_path / "sups.jsonl", splits=["test"],
                    speaker_genders=tmp_path / "spk.tsv", check=QUIET).set_index("id")
    assert t.loc["talk-2", "gender"] == "F" and set(t["split"]) == {"test"} and len(t) == 4


def test_lhotse_cli_index_and_a_url_recording_is_one_line(tmp_path, capsys):
    from lhotse import AudioSource, CutSet, Recording, RecordingSet, SupervisionSegment, SupervisionSet

    recs, sups = _lhotse_set(tmp_path)
    CutSet.from_manifests(recordings=recs, supervisions=sups).to_file(tmp_path / "cuts.jsonl.gz")
    out = tmp_path / "t.tsv"
    rc, _, _ = run(capsys, "-q", "corpus", "index", "--kind", "lhotse", "--root", tmp_path / "cuts.jsonl.gz",
                   "--corpus", "mini", "--split", "train", "--out", out)
    assert rc == 0 and len(read_table(out)) == 4 and set(read_table(out)["corpus"]) == {"mini"}
    url = Recording(id="remote", sources=[AudioSource(type="url", channels=[0], source="https://example.org/a.wav")],
                    sampling_rate=SR, num_samples=SR, duration=1.0)
    RecordingSet.from_recordings([url]).to_file(tmp_path / "remote_recs.jsonl.gz")
    SupervisionSet.from_segments([SupervisionSegment("r0", "remote", start=0.0, duration=0.5, speaker="x")]).to_file(
        tmp_path / "remote_sups.jsonl.gz")
    bad = tmp_path / "bad.tsv"
    line = _one_error(capsys, "corpus", "index", "--kind", "lhotse", "--root", tmp_path / "remote_recs.jsonl.gz",
                      "--supervisions", tmp_path / "remote_sups.jsonl.gz", "--out", bad)
    assert "recording 'remote' is a 'url' source, not a file" in line and "remote_sups.jsonl.gz:1" in line
    assert not bad.exists()


# ---------------------------------------------------------------- Hugging Face datasets in

def test_hf_save_to_disk_with_paths_and_a_classlabel(tmp_path):
    from datasets import ClassLabel, Dataset, DatasetDict

    def part(names, clients, genders, sentences):
        return Dataset.from_dict({"path": [f"clips/{n}.wav" for n in names], "client_id": clients,
                                  "sentence": sentences, "gender": genders, "locale": ["fr"] * len(names),
                                  "up_votes": [2] * len(names)}).cast_column(
            "gender", ClassLabel(names=["male", "female", "other"]))

    root = tmp_path / "cv_saved"
    DatasetDict(train=part(["a", "b"], ["c1", "c2"], [1, 0], ["un", "deux"]),
                validation=part(["c"], ["c3"], [-1], ["trois"])).save_to_disk(str(root))
    for name, sec in (("a", 1.0), ("b", 0.5), ("c", 1.5)):
        _wav(root / "clips" / f"{name}.wav", sec)
    t = read_hf(root, audio_column="path", check=QUIET).set_index("id")
    assert list(t.index) == ["a", "b", "c"]                       # the clips' file names (no id column)
    assert list(t["gender"]) == ["F", "M", "U"] and list(t["gender_raw"]) == ["female", "male", ""]
    assert list(t["speaker"]) == ["c1", "c2", "c3"] and list(t["text"]) == ["un", "deux", "trois"]
    assert list(t["split"]) == ["train", "train", "valid"] and set(t["lang"]) == {"fr"}
    assert list(t["duration"]) == [1.0, 0.5, 1.5] and t.loc["a", "audio"] == str(root / "clips/a.wav")
    assert set(t["up_votes"]) == {"2"}
    assert list(read_hf(root, splits=["validation"], audio_column="path", check=QUIET)["id"]) == ["c"]


def _embedded(tmp_path):
    """FLEURS-like rows with the audio's bytes inside (an id repeated per sentence, a path per clip)."""
    from datasets import Audio, ClassLabel, Dataset

    clips = {n: _wav(tmp_path / "src" / f"{n}.wav", s, seed=i).read_bytes()
             for i, (n, s) in enumerate((("1001", 1.0), ("1002", 0.75), ("1003", 1.25)))}
    ds = Dataset.from_dict({"id": [7, 7, 8], "path": [f"{n}.wav" for n in clips],
                            "audio": [{"bytes": b, "path": f"{n}.wav"} for n, b in clips.items()],
                            "raw_transcription": ["Un", "Un", "Deux"], "transcription": ["un", "un", "deux"],
                            "gender": [1, 0, 2]})
    ds = ds.cast_column("audio", Audio()).cast_column("gender", ClassLabel(names=["male", "female", "other"]))
    return ds, clips


def test_hf_embedded_audio_is_written_once_under_audio_dir(tmp_path, capsys):
    ds, clips = _embedded(tmp_path)
    pq = tmp_path / "fleurs_pq"
    (pq / "data").mkdir(parents=True)
    ds.to_parquet(str(pq / "data" / "validation-00000-of-00001.parquet"))
    before = sorted(p.name for p in pq.rglob("*"))
    t = read_hf(pq, audio_dir=tmp_path / "wav", speaker_column="path", check=QUIET).set_index("id")
    assert list(t.index) == ["1001", "1002", "1003"] and set(t["split"]) == {"valid"}
    assert list(t["gender"]) == ["F", "M", "U"] and list(t["gender_raw"]) == ["female", "male", "other"]
    assert list(t["orig_id"]) == ["7", "7", "8"] and list(t["text"]) == ["Un", "Un", "Deux"]
    assert list(t["transcription"]) == ["un", "un", "deux"] and list(t["duration"]) == [1.0, 0.75, 1.25]
    for uid, data in clips.items():
        assert (tmp_path / "wav" / f"{uid}.wav").read_bytes() == data and t.loc[uid, "audio"] == str(
            tmp_path / "wav" / f"{uid}.wav")
    assert sorted(p.name for p in pq.rglob("*")) == before          # nothing written into the dataset
    stamp = (tmp_path / "wav/1001.wav").stat().st_mtime_ns
    read_hf(pq, audio_dir=tmp_path / "wav", speaker_column="path", check=QUIET)
    assert (tmp_path / "wav/1001.wav").stat().st_mtime_ns == stamp   # the same bytes: kept, not rewritten
    # the same rows saved with save_to_disk, through the CLI; without --audio-dir: one line, nothing written
    ds.save_to_disk(str(tmp_path / "fleurs_saved"))
    out = tmp_path / "f.tsv"
    rc, _, _ = run(capsys, "-q", "corpus", "index", "--kind", "hf", "--root", tmp_path / "fleurs_saved", "--split",
                   "test", "--audio-dir", tmp_path / "wav2", "--speaker-column", "path", "--out", out)
    assert rc == 0 and list(read_table(out)["split"]) == ["test"] * 3 and len(os.listdir(tmp_path / "wav2")) == 3
    line = _one_error(capsys, "corpus", "index", "--kind", "hf", "--root", pq, "--speaker-column", "path",
                      "--out", tmp_path / "g.tsv")
    assert "the audio is embedded in the dataset" in line and "--audio-dir" in line
    assert not (tmp_path / "g.tsv").exists()


def test_hf_a_column_it_does_not_have_is_one_line(tmp_path, capsys):
    ds, _ = _embedded(tmp_path)
    ds.save_to_disk(str(tmp_path / "saved"))
    line = _one_error(capsys, "corpus", "index", "--kind", "hf", "--root", tmp_path / "saved", "--audio-dir",
                      tmp_path / "wav", "--gender-column", "sex", "--out", tmp_path / "t.tsv")
    assert "no column 'sex'" in line and "--gender-column" in line
    line = _one_error(capsys, "corpus", "index", "--kind", "hf", "--root", tmp_path / "saved", "--audio-dir",
                      tmp_path / "wav", "--out", tmp_path / "t.tsv")
    assert "no speaker column" in line


# ---------------------------------------------------------------- lhotse out, and back in

@pytest.fixture
def table(tmp_path):
    speakers = {"f0": "F", "f1": "F", "m0": "M", "m1": "M", "u0": "U"}   # + f_long: three segments of one file
    return write_corpus(tmp_path / "corpus", speakers=speakers, utts_per_speaker=2,
                        split_of={"f1": "valid", "m1": "valid"})


def test_manifest_build_lhotse_read_by_lhotse_and_back(table, tmp_path, capsys):
    from lhotse import CutSet, RecordingSet, SupervisionSet

    out = tmp_path / "m"
    rc, _, _ = run(capsys, "-q", "manifest", "build", "--table", table, "--gender", "any", "--keep-unknown",
                   "--format", "lhotse", "--out", out)
    assert rc == 0
    sel = {s: read_table(out / f"selection_{s}.tsv").set_index("id") for s in ("train", "valid")}
    assert set(sel["valid"]["speaker"]) == {"f1", "m1"} and "u0" in set(sel["train"]["speaker"])
    for split, rows in sel.items():
        sups = {s.id: s for s in SupervisionSet.from_file(out / split / "supervisions.jsonl.gz")}
        assert set(sups) == set(rows.index)
        assert len(RecordingSet.from_file(out / split / "recordings.jsonl.gz")) == rows["audio"].nunique()
        for uid, r in rows.iterrows():
            s = sups[uid]
            assert (s.speaker, s.text, s.language) == (r["speaker"], r["text"], "fr")
            assert s.gender == ({"F": "F", "M": "M"}.get(r["gender"]))     # U: no gender
            assert (s.start, s.duration) == (r["offset"], r["duration"])
            assert s.custom == {"corpus": "c1", "tgt_text_en": r["tgt_text_en"]}
    cuts = CutSet.from_file(out / "train" / "cuts.jsonl.gz")
    long_cut = next(c for c in cuts if any(s.id == "f_long_1" for s in c.supervisions))
    assert len(long_cut.supervisions) == 3 and long_cut.duration == 6.0
    seg = next(c for c in long_cut.trim_to_supervisions(keep_overlapping=False) if c.supervisions[0].id == "f_long_1")
    samples = seg.load_audio()
    assert samples.shape == (1, int(1.5 * SR))
    whole, _ = sf.read(table.parent / "wav/long.wav", dtype="float32")
    assert np.allclose(samples[0], whole[2 * SR:int(3.5 * SR)], atol=1e-4)
    # the round trip: the lhotse output indexed again gives the selection's rows
    back = tmp_path / "back.tsv"
    rc, _, _ = run(capsys, "-q", "corpus", "index", "--kind", "lhotse", "--root", out, "--out", back)
    assert rc == 0
    got = read_table(back).set_index("id").sort_index()
    want = pd.concat([read_table(out / f"selection_{s}.tsv") for s in ("train", "valid")]).set_index("id").sort_index()
    cols = ["speaker", "gender", "split", "corpus", "text", "tgt_text_en", "sample_rate"]
    assert got[cols].equals(want[cols]) and len(got) == 13
    # seconds as every reader writes them: to the microsecond
    assert np.allclose(got[["offset", "duration"]], want[["offset", "duration"]], rtol=0, atol=1e-6)
    assert list(got["audio"]) == [os.path.abspath(a) for a in want["audio"]]


def test_manifest_build_lhotse_bad_text_column_is_one_line(table, tmp_path, capsys):
    out = tmp_path / "m"
    line = _one_error(capsys, "manifest", "build", "--table", table, "--gender", "any", "--format", "lhotse",
                      "--text-column", "tgt_text_xx", "--out", out)
    assert "no column 'tgt_text_xx'" in line and not out.exists()
