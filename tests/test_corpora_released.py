"""Corpora exactly as released: the layouts and defects of the real downloads (MuST-Speakers
lists, 48 kHz Common Voice with a zero-byte clip, mTEDx segments past the end of a talk,
U+2028 in transcripts, MuST-SHE v1.2's tsv/ + wav/, WinoST's gzipped wavs and __MACOSX
litter, Kaldi pipes, LeBenchmark JSONs without speakers, VoxPopuli TSVs without paths) and
`corpus stats` on mixed tables. Each test builds the layout on disk and runs the real reader
or the CLI; numbers are asserted, not just exit codes."""
import json
import logging

import pytest
import soundfile as sf

from cli_helpers import run_lines as run
from corpora.base.errors import UserError
from corpora.readers import AudioCheck, read_lebenchmark, read_mtedx, read_speaker_genders, read_winost
from corpora.table import read_table
from fixtures_corpora import (
    CV_HEADER,
    MUSTSHE_HEADER,
    make_kaldi,
    make_mtedx,
    make_mustc,
    make_mustshe,
    make_winost,
    write_audio,
)

QUIET = AudioCheck(progress=False)


def user_error(capsys, out_file, argv, *needles):
    rc, _, err = run(capsys, *argv)
    assert rc == 2 and len(err) == 1, err
    for n in needles:
        assert n in err[0], err[0]
    assert not out_file.exists() and not list(out_file.parent.glob(f".{out_file.name}.*"))
    return err[0]


# ------------------------------------------------------------------ 1. MuST-Speakers as distributed

def must_speakers(path, rows):
    """FBK's MuST-Speakers list: header line, TALK-ID (bare talk number), TED-PRONOUN."""
    path.write_text("TALK-ID\tTED-PRONOUN\n" + "".join(f"{t}\t{p}\n" for t, p in rows), encoding="utf-8")
    return path


def test_must_speakers_list_keyed_by_talk_number(tmp_path, capsys):
    root, _ = make_mustc(tmp_path)
    spk = must_speakers(tmp_path / "MuST-Speakers.tsv", [("1", "Multi-She"), ("2", "He"), ("767", "They")])
    assert read_speaker_genders(spk) == {"1": ("Multi-She", 2), "2": ("He", 3), "767": ("They", 4)}
    out = tmp_path / "mustc.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "mustc", "--root", str(root), "--tgt-lang", "de",
                     "--speaker-genders", str(spk), "--out", str(out))
    assert rc == 0, err
    t = read_table(out).set_index("id")
    # ted_1 (spk.1) <- 1: Multi-She counts as She (as FBK's script maps it); ted_2 <- 2: He.
    assert list(t.loc[["ted_1_0", "ted_1_1", "ted_2_0"], "gender"]) == ["F", "F", "M"]
    assert t.loc["ted_1_0", "gender_raw"] == "Multi-She"
    assert t.loc["ted_3_0", "gender"] == "U"                       # talk 3 is not in the list
    warn = [line for line in err if "speaker list" in line]
    assert len(warn) == 1 and "2 of 3 talk(s) matched" in warn[0] and "e.g. ted_3" in warn[0]
    out2 = tmp_path / "strict.tsv"
    user_error(capsys, out2, ["corpus", "index", "--kind", "mustc", "--root", str(root), "--tgt-lang", "de",
                              "--speaker-genders", str(spk), "--out", str(out2), "--strict"],
               "talk 'ted_3' is not in the speaker list", "tst-COMMON.yaml:1:")


def test_speaker_list_matching_nothing_is_said_loudly(tmp_path, capsys):
    root, _ = make_mustc(tmp_path)
    spk = must_speakers(tmp_path / "names.tsv", [("Jane Doe", "She"), ("John Roe", "He")])
    out = tmp_path / "o.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "mustc", "--root", str(root), "--tgt-lang", "de",
                     "--speaker-genders", str(spk), "--out", str(out))
    assert rc == 0 and set(read_table(out)["gender"]) == {"U"}
    warn = [line for line in err if "speaker list" in line]
    assert len(warn) == 1 and "0 of 3 talk(s) matched" in warn[0] and "NONE matched" in warn[0]


# ------------------------------------------------------------------ 2. Common Voice as released

def make_cv_release(root, rows):
    """A locale dir with 48 kHz mp3 clips (as every release ships them) and one train.tsv."""
    d = root / "cv-corpus-17.0-2024-03-15" / "fr"
    lines = [CV_HEADER]
    for cid, name, gender, seconds in rows:
        clip = d / "clips" / name
        if seconds == 0:
            clip.parent.mkdir(parents=True, exist_ok=True)
            clip.write_bytes(b"")                          # the zero-byte clips some releases ship
        else:
            write_audio(clip, seconds, sr=48000, fmt="MP3")
        lines.append(f"{cid}\t{name}\tUne phrase.\t2\t0\tthirties\t{gender}\t\t\tfr\t")
    (d / "train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def test_commonvoice_48k_zero_byte_clip_and_per_speaker_gender(tmp_path, capsys):
    # Common Voice ships mp3: reading it is a capability of the installed libsndfile (>= 1.1), not of
    # our code. The pinned soundfile wheel bundles one that has it, so through `make test` this skip
    # never fires (run_tests.sh would print it if it did).
    if "MP3" not in sf.available_formats():
        pytest.skip("the system libsndfile is older than 1.1 and cannot decode mp3 (a library capability, not "
                    "gendergap's; the pinned soundfile wheel has it)")
    root = make_cv_release(tmp_path, [
        ("a", "common_voice_fr_1.mp3", "female_feminine", 1.0), ("a", "common_voice_fr_2.mp3", "", 1.0),
        ("b", "common_voice_fr_3.mp3", "male", 1.0), ("b", "common_voice_fr_4.mp3", "female", 1.0),
        ("c", "common_voice_fr_5.mp3", "", 1.0), ("d", "common_voice_fr_6.mp3", "male", 0)])
    out = tmp_path / "cv_fr.tsv"
    # The manual's example (docs/corpora.md), with no --sample-rates: 48 kHz accepted and recorded.
    rc, _, err = run(capsys, "corpus", "index", "--kind", "commonvoice", "--root", str(root), "--split", "train",
                     "--out", str(out))
    assert rc == 0, err
    t = read_table(out).set_index("id")
    assert len(t) == 5 and set(t["sample_rate"]) == {48000}
    assert "common_voice_fr_6" not in t.index                      # the zero-byte clip: skipped...
    skipped = [line for line in err if "skipped" in line]
    assert len(skipped) == 1 and "1 row(s) skipped: zero-byte or empty audio" in skipped[0]
    assert "train.tsv:7" in skipped[0] and "--strict" in skipped[0]   # ...counted, and where
    # Speaker a: female on one row, blank on the other -> F on both (never F and U at once).
    assert list(t.loc[["common_voice_fr_1", "common_voice_fr_2"], "gender"]) == ["F", "F"]
    assert list(t.loc[["common_voice_fr_1", "common_voice_fr_2"], "gender_source"]) == ["row", "speaker"]
    # Speaker b: male and female -> U on both rows; c has no label anywhere -> U.
    assert list(t.loc[["common_voice_fr_3", "common_voice_fr_4"], "gender"]) == ["U", "U"]
    assert t.loc["common_voice_fr_3", "gender_source"] == "conflict" and t.loc["common_voice_fr_5", "gender"] == "U"
    per_speaker = t.groupby("speaker")["gender"].nunique()
    assert (per_speaker == 1).all()
    assert any("gender resolved per client_id: 1 row(s)" in line and "2 row(s) of 1 speaker(s)" in line for line in err)
    out2 = tmp_path / "strict.tsv"
    user_error(capsys, out2, ["corpus", "index", "--kind", "commonvoice", "--root", str(root), "--out", str(out2),
                              "--strict"], f"{root / 'train.tsv'}:7:", "is empty")


# ------------------------------------------------------------------ 3. mTEDx segment past the end

def test_mtedx_segment_past_end_is_trimmed(tmp_path, caplog):
    root, genders = make_mtedx(tmp_path)
    yml = root / "fr-en" / "data" / "train" / "txt" / "train.yaml"
    yml.write_text(yml.read_text().replace("duration: 2.5, offset: 3.0", "duration: 4.5, offset: 3.0"))
    with caplog.at_level(logging.WARNING):
        t = read_mtedx(root, lang="fr", tgt_lang="en", speaker_genders=genders, check=QUIET).set_index("id")
    assert (t.loc["a1_1", "offset"], t.loc["a1_1", "duration"]) == (3.0, 3.0)   # cut at the talk's 6.0 s
    assert "1 segment(s) trimmed at the end of their recording (first: " in caplog.text
    assert f"{yml}:2" in caplog.text
    with pytest.raises(UserError, match="3.00-7.50 s runs past the end"):
        read_mtedx(root, lang="fr", tgt_lang="en", speaker_genders=genders, splits=["train"],
                   check=AudioCheck(progress=False, strict=True))
    # A segment that starts after the end cannot be trimmed: still an error.
    yml.write_text(yml.read_text().replace("duration: 4.5, offset: 3.0", "duration: 1.0, offset: 6.5"))
    with pytest.raises(UserError, match="6.50-7.50 s runs past the end"):
        read_mtedx(root, lang="fr", tgt_lang="en", speaker_genders=genders, check=QUIET)


# ------------------------------------------------------------------ 4. Unicode line breaks in text

@pytest.mark.parametrize("sep", ["\u2028", "\u0085", "\u2029", "\x0c"])
def test_unicode_line_separators_inside_transcripts_keep_alignment(tmp_path, sep):
    root, genders = make_mtedx(tmp_path)
    fr = root / "fr-en" / "data" / "train" / "txt" / "train.fr"
    lines = fr.read_text(encoding="utf-8").split("\n")
    lines[0] = f"premier{sep}morceau"
    fr.write_text("\n".join(lines), encoding="utf-8")
    t = read_mtedx(root, lang="fr", tgt_lang="en", speaker_genders=genders, check=QUIET).set_index("id")
    assert t.loc["a1_0", "text"] == "premier morceau"
    assert t.loc["a1_1", "text"] == "phrase numéro 1" and t.loc["b2_0", "text"] == "phrase numéro 2"


def test_kaldi_text_with_u2028(tmp_path, capsys):
    d = make_kaldi(tmp_path)
    (d / "text").write_text("s1-rec1-000 bon\u2028jour\ns1-rec1-001 au revoir\ns2-rec2-000 merci\ns3-rec2-001 oui\n",
                            encoding="utf-8")
    out = tmp_path / "k.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out))
    assert rc == 0, err
    t = read_table(out).set_index("id")
    assert t.loc["s1-rec1-000", "text"] == "bon jour" and t.loc["s1-rec1-001", "text"] == "au revoir"
    assert len(out.read_text(encoding="utf-8").split("\n")) == 4 + 2   # header, 4 rows, final newline


# ------------------------------------------------------------------ 5. MuST-SHE v1.2 layout

def test_mustshe_v12_release_layout_needs_no_flags(tmp_path, capsys):
    flat = make_mustshe(tmp_path)                        # MuST-SHE_v1.2/{MONOLINGUAL...tsv, wav/}
    (flat / "tsv").mkdir()
    (flat / "MONOLINGUAL.fr_v1.2.tsv").rename(flat / "tsv" / "MONOLINGUAL.fr_v1.2.tsv")
    (flat / "tsv" / "MONOLINGUAL.it_v1.2.tsv").write_text(MUSTSHE_HEADER + "\n", encoding="utf-8")
    for root in (flat, flat / "tsv"):                    # the release dir, or its tsv/ dir
        out = tmp_path / f"mustshe_{root.name}.tsv"
        rc, _, err = run(capsys, "corpus", "index", "--kind", "mustshe", "--root", str(root), "--tgt-lang", "fr",
                         "--out", str(out))
        assert rc == 0, err
        t = read_table(out).set_index("id")
        assert list(t.index) == ["fr-0001", "fr-0002", "fr-0003"]
        assert t.loc["fr-0001", "audio"] == str(flat / "wav" / "fr-0001.wav")
        assert t.loc["fr-0001", "duration"] == pytest.approx(1.5)
    out = tmp_path / "two.tsv"
    user_error(capsys, out, ["corpus", "index", "--kind", "mustshe", "--root", str(flat), "--out", str(out)],
               "found 2 MuST-SHE TSV file(s)", "--tgt-lang")


# ------------------------------------------------------------------ 6. WinoST as downloaded

APPLE_DOUBLE = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + b"\x00" * 4000


def make_winost_download(tmp_path):
    """wav/0001.wav.. (zero-padded) with AppleDouble ._ files beside them and in __MACOSX/."""
    root = make_winost(tmp_path)
    for i in (1, 2, 3):
        (root / "wav" / f"{i}.wav").rename(root / "wav" / f"{i:04d}.wav")
        (root / "wav" / f"._{i:04d}.wav").write_bytes(APPLE_DOUBLE)
    mac = tmp_path / "winost" / "__MACOSX" / "wav"
    mac.mkdir(parents=True)
    for i in (1, 2, 3):
        (mac / f"._{i:04d}.wav").write_bytes(APPLE_DOUBLE)
    return root


def test_winost_ignores_macos_resource_forks(tmp_path):
    root = make_winost_download(tmp_path)
    t = read_winost(root, check=AudioCheck(sample_rates=(48000,), progress=False)).set_index("id")
    assert [p.rsplit("/", 1)[1] for p in t["audio"]] == ["0001.wav", "0002.wav", "0003.wav"]
    assert t.loc["winost_0003", "duration"] == pytest.approx(1.3)


def test_winost_gzipped_wavs_are_indexed_as_downloaded(tmp_path, capsys):
    import gzip
    root = make_winost_download(tmp_path)
    for i in (1, 2, 3):
        wav = root / "wav" / f"{i:04d}.wav"
        (root / "wav" / f"{i:04d}.wav.gz").write_bytes(gzip.compress(wav.read_bytes()))
        wav.unlink()
    out = tmp_path / "w.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "winost", "--root", str(root), "--sample-rates", "48000",
                     "--out", str(out))
    assert rc == 0, err   # tests/test_winost_gz.py reads them further (durations, the feature store)
    t = read_table(out).set_index("id")
    assert [p.rsplit("/", 1)[1] for p in t["audio"]] == ["0001.wav.gz", "0002.wav.gz", "0003.wav.gz"]
    assert t.loc["winost_0003", "duration"] == pytest.approx(1.3)


# ------------------------------------------------------------------ 7. Kaldi pipes, recipe-relative paths

def test_kaldi_pipes_kept_as_given_and_never_run(tmp_path, capsys):
    d = make_kaldi(tmp_path)
    marker = tmp_path / "RAN"
    # A sox pipe (rate in the command) and a flac pipe (no rate: the accepted 16 kHz is assumed).
    (d / "wav.scp").write_text(f"rec1 touch {marker}; sox audio/rec1.wav -t wav -r 16000 - |\n"
                               "rec2 flac -d -c -s audio/rec2.flac |\n", encoding="utf-8")
    out = tmp_path / "k.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out))
    assert rc == 0, err
    assert not marker.exists()                           # nothing was run while indexing
    t = read_table(out).set_index("id")
    assert t.loc["s1-rec1-001", "audio"] == f"touch {marker}; sox audio/rec1.wav -t wav -r 16000 - |"
    assert (t.loc["s1-rec1-001", "offset"], t.loc["s1-rec1-001", "duration"]) == (2.0, 2.75)   # from segments
    assert t.loc["s2-rec2-000", "audio"] == "flac -d -c -s audio/rec2.flac |"
    assert set(t["sample_rate"]) == {16000} and set(t["audio_cwd"]) == {str(tmp_path.resolve())}
    assert any("1 piped recording(s) name no rate (e.g. rec2): assumed 16000 Hz" in line for line in err)
    assert any("4 row(s) read from piped commands" in line and "none run" in line for line in err)


def test_kaldi_pipe_without_duration_runs_only_with_allow_pipes(tmp_path, capsys):
    d = make_kaldi(tmp_path)
    (d / "segments").unlink()
    (d / "utt2spk").write_text("rec1 s1\nrec2 s2\n")
    (d / "wav.scp").write_text("rec1 cat audio/rec1.wav |\nrec2 audio/rec2.flac\n")
    out = tmp_path / "k.tsv"
    user_error(capsys, out, ["corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out)],
               f"{d / 'wav.scp'}:1:", "piped command", "--allow-pipes", "utt2dur")
    (d / "utt2dur").write_text("rec1 5.0\n")            # utils/data/get_utt2dur.sh output: enough
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out))
    assert rc == 0, err
    assert read_table(out).set_index("id").loc["rec1", "duration"] == 5.0
    (d / "utt2dur").unlink()
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out),
                     "--allow-pipes")
    assert rc == 0, err
    t = read_table(out).set_index("id")
    assert t.loc["rec1", "duration"] == pytest.approx(5.0) and t.loc["rec1", "sample_rate"] == 16000
    assert any("1 command(s) run (--allow-pipes)" in line for line in err)


def test_kaldi_paths_relative_to_recipe_dir_and_kaldi_root(tmp_path, capsys):
    d = make_kaldi(tmp_path)                             # wav.scp: rec2 audio/rec2.flac (recipe-relative)
    out = tmp_path / "k.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out))
    assert rc == 0, err
    assert read_table(out).set_index("id").loc["s2-rec2-000", "audio"] == str(tmp_path / "audio" / "rec2.flac")
    # A data dir copied elsewhere: --kaldi-root names the recipe dir the paths start from.
    moved = tmp_path / "elsewhere" / "train"
    moved.parent.mkdir()
    d.rename(moved)
    out2 = tmp_path / "k2.tsv"
    user_error(capsys, out2, ["corpus", "index", "--kind", "kaldi", "--root", str(moved), "--out", str(out2)],
               "rec2.flac does not exist")
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(moved), "--kaldi-root",
                     str(tmp_path), "--out", str(out))
    assert rc == 0, err
    assert read_table(out).set_index("id").loc["s2-rec2-000", "duration"] == 2.0


def test_kaldi_speaker_missing_from_spk2gender_is_counted(tmp_path, capsys):
    d = make_kaldi(tmp_path)                             # s3 is not in spk2gender
    out = tmp_path / "k.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out))
    assert rc == 0
    assert read_table(out).set_index("id").loc["s3-rec2-001", "gender"] == "U"
    warn = [line for line in err if "not listed" in line]
    assert len(warn) == 1 and "1 speaker(s) not listed (e.g. s3)" in warn[0]
    out2 = tmp_path / "k2.tsv"
    user_error(capsys, out2, ["corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out2), "--strict"],
               "speaker 's3' is not in spk2gender", f"{d / 'segments'}:4:")
    (d / "spk2gender").unlink()
    rc, _, err = run(capsys, "corpus", "index", "--kind", "kaldi", "--root", str(d), "--out", str(out))
    assert rc == 0 and any("no spk2gender file: all 3 speaker(s) get U" in line for line in err)


# ------------------------------------------------------------------ 8. LeBenchmark writers

def test_lebenchmark_json_without_speakers_aaf_style(tmp_path, caplog):
    # African Accented French's writer: spk_id "" everywhere, gender from the folder name.
    d = tmp_path / "African_Accented_French"
    data = {}
    for name, g in (("yaounde_f_01_a", "F"), ("yaounde_m_02_a", "M")):
        write_audio(d / "wavs" / "train" / "yaounde" / f"{name}.wav", 1.0)
        data[name] = {"path": f"./wavs/train/yaounde/{name}.wav", "trans": "bonjour", "duration": 1.0,
                      "spk_id": "", "spk_gender": g}
    (d / "data.json").write_text(json.dumps(data, indent=4), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        t = read_lebenchmark(d / "data.json", check=QUIET).set_index("id")
    assert list(t["speaker"]) == ["yaounde_f_01_a", "yaounde_m_02_a"] and list(t["gender"]) == ["F", "M"]
    assert set(t["corpus"]) == {"African_Accented_French"}
    assert "no entry has a spk_id" in caplog.text and "each of the 2 recordings is its own speaker" in caplog.text


def test_lebenchmark_mls_style_json_corpus_and_split(tmp_path):
    # MLS's writer: mls_french/train/<name>.json with './audio/<spk>/<book>/<id>.wav' paths.
    d = tmp_path / "mls_french" / "train"
    write_audio(d / "audio" / "1840" / "1234" / "1840_1234_000001.wav", 1.0)
    data = {"1840_1234_000001": {"path": "./audio/1840/1234/1840_1234_000001.wav", "trans": "bonjour",
                                 "duration": 1.0, "spk_id": "1840", "spk_gender": "F"}}
    (d / "train.json").write_text(json.dumps(data, indent=2), encoding="utf-8")
    t = read_lebenchmark(d / "train.json", check=QUIET)
    assert list(t["corpus"]) == ["mls_french"] and list(t["split"]) == ["train"] and list(t["gender"]) == ["F"]


# ------------------------------------------------------------------ 9. corpus stats on mixed tables

def test_stats_counts_every_row_and_speakers_per_corpus(tmp_path, capsys):
    from fixtures_corpora import make_generic
    csv = make_generic(tmp_path)                         # speakers A (F, 2 rows, 3.0 s), B (M, 1.0 s)
    m = "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur"
    with_style, without = tmp_path / "a.tsv", tmp_path / "b.tsv"
    assert run(capsys, "corpus", "index", "--kind", "generic", "--root", str(csv), "--map", m, "--corpus", "one",
               "--style", "read", "--out", str(with_style))[0] == 0
    # corpus two: the same speaker ids A, B on other recordings (the same speaker id on the same
    # recording in two corpora is one person: test_merge.py::test_stats_total_counts_shared_speakers_once...)
    other = make_generic(tmp_path / "b")
    for name in ("long", "short"):
        (other.parent / "wav" / f"{name}.wav").rename(other.parent / "wav" / f"{name}_b.wav")
    other.write_text(other.read_text().replace(".wav", "_b.wav"))
    assert run(capsys, "corpus", "index", "--kind", "generic", "--root", str(other), "--map", m, "--corpus", "two",
               "--out", str(without))[0] == 0
    rc, csv_text, _ = run(capsys, "corpus", "stats", str(with_style), str(without), "--format", "csv")
    assert rc == 0
    rows = [dict(zip(csv_text.splitlines()[0].split(","), line.split(","))) for line in csv_text.splitlines()[1:]]
    assert [(r["corpus"], r["style"]) for r in rows] == [("one", "read"), ("two", "(none)"), ("TOTAL", "-")]
    total = rows[-1]
    assert total["utterances_all"] == "6" and float(total["seconds_F"]) == pytest.approx(6.0)
    # Speaker A of corpus one and speaker A of corpus two are two speakers.
    assert (total["speakers_F"], total["speakers_M"], total["speakers_all"]) == ("2", "2", "4")
    rc, text, _ = run(capsys, "corpus", "stats", str(with_style), str(without), "--by", "corpus", "--format",
                      "markdown")
    lines = text.splitlines()
    assert [c.strip() for c in lines[0].split("|")[1:-1]] == ["Dataset", "Duration (M / F)", "# speakers (M / F)",
                                                              "# utterances (M / F)"]   # no group column
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["one", "two", "TOTAL"]
    assert "| 2 / 2 " in lines[-1] and "| 2 / 4 " in lines[-1]


# ------------------------------------------------------------------ 10. VoxPopuli-style TSV, path template

VOXPOPULI_HEADER = "id\traw_text\tnormalized_text\tspeaker_id\tsplit\tgender\tis_gold_transcript\taccent"


def test_generic_path_template_for_voxpopuli_tsv(tmp_path, capsys):
    # VoxPopuli ships ogg: a capability of the installed libsndfile, not of our code; the pinned
    # soundfile wheel has it, so through `make test` this skip never fires (it would be printed).
    if "OGG" not in sf.available_formats():
        pytest.skip("the system libsndfile was built without ogg/vorbis (a library capability, not gendergap's; "
                    "the pinned soundfile wheel has it)")
    d = tmp_path / "transcribed_data" / "fr"
    ids = [("20180313-0900-PLENARY-15_fr_20180313-16:08:05_3", "124737", "female", 1.5),
           ("20190415-0900-PLENARY-7_fr_20190415-17:30:11_1", "96766", "male", 2.0)]
    lines = [VOXPOPULI_HEADER]
    for uid, spk, g, sec in ids:
        write_audio(d / uid[:4] / f"{uid}.ogg", sec, fmt="OGG")
        lines.append(f"{uid}\tBonjour, Madame.\tbonjour madame\t{spk}\ttrain\t{g}\tTrue\tNone")
    (d / "asr_train.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "vp.tsv"
    argv = ["corpus", "index", "--kind", "generic", "--root", str(d / "asr_train.tsv"), "--map",
            "id=id,speaker=speaker_id,gender=gender,text=normalized_text,split=split", "--out", str(out)]
    rc, _, err = run(capsys, *argv, "--path-template", "{root}/{id[:4]}/{id}.ogg")
    assert rc == 0, err
    t = read_table(out).set_index("id")
    assert t.loc[ids[1][0], "audio"] == str(d / "2019" / f"{ids[1][0]}.ogg")
    assert list(t["duration"]) == pytest.approx([1.5, 2.0]) and list(t["gender"]) == ["F", "M"]
    argv[-1] = str(tmp_path / "vp2.tsv")
    user_error(capsys, tmp_path / "vp2.tsv", [*argv, "--path-template", "{root}/{year}/{id}.ogg"],
               "--path-template names 'year', not a column", f"{d / 'asr_train.tsv'}:1:")
