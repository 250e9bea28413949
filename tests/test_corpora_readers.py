"""Each corpus reader on a tiny corpus in its real layout: segments, unknown gender, quirks;
header reading (once per file, in parallel); the statistics table."""
import json
import logging
import threading

import pytest
import soundfile as sf

from corpora import audio_info
from corpora.audio_info import AudioInfo, HeaderError, probe_headers
from corpora.base.errors import UserError
from corpora.readers import (
    READERS,
    AudioCheck,
    read_commonvoice,
    read_generic,
    read_kaldi,
    read_lebenchmark,
    read_mls,
    read_mtedx,
    read_mustc,
    read_mustshe,
    read_speaker_genders,
    read_winost,
)
from corpora.stats import gender_summary, hours_minutes, render
from corpora.table import COLUMNS, validate_table
from fixtures_corpora import (
    make_commonvoice,
    make_generic,
    make_kaldi,
    make_lebenchmark,
    make_mls,
    make_mtedx,
    make_mustc,
    make_mustshe,
    make_winost,
    write_audio,
)

QUIET = AudioCheck(progress=False)


def by_id(df):
    return df.set_index("id")


def test_registry_names_every_kind():
    assert set(READERS) == {"mls", "mtedx", "commonvoice", "mustc", "mustshe", "winost", "kaldi",
                            "lebenchmark", "generic", "covost2", "fleurs", "voxpopuli", "lhotse", "hf"}


def test_mls_reads_metainfo_transcripts_segments(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        df = read_mls(make_mls(tmp_path), check=QUIET)
    validate_table(df)
    assert list(df.columns[: len(COLUMNS)]) == COLUMNS
    t = by_id(df)
    assert len(t) == 4 and set(t["split"]) == {"train", "valid"} and set(t["lang"]) == {"fr"}
    assert t.loc["1840_1234_000001", "gender"] == "F" and t.loc["2506_5678_000000", "gender"] == "M"
    assert t.loc["2506_5678_000000", "duration"] == pytest.approx(1.2, abs=1e-4)   # from the flac header
    assert t.loc["2506_5678_000000", "sample_rate"] == 16000
    assert t.loc["1840_1234_000002", "text"] == "il fait beau"
    # A title with `|` inside, and the LibriVox source position from segments.txt.
    assert t.loc["1840_1234_000001", "title"] == "Contes | du lundi | (Tome 1)"
    assert float(t.loc["1840_1234_000001", "source_start"]) == 10.5
    # Speaker 3001 is listed as F and as M: U, with the raw labels kept and a warning.
    assert t.loc["3001_9999_000003", "gender"] == "U" and t.loc["3001_9999_000003", "gender_raw"] == "F/M"
    assert "3001" in caplog.text


def test_mls_split_selection(tmp_path):
    df = read_mls(make_mls(tmp_path), splits=["dev"], check=QUIET)
    assert list(df["split"]) == ["valid"]


def test_mtedx_segments_translations_and_speaker_file(tmp_path, caplog):
    root, genders = make_mtedx(tmp_path)
    df = read_mtedx(root, lang="fr", tgt_lang="en", speaker_genders=genders, check=QUIET)
    t = by_id(df)
    assert len(t) == 4
    # Two segments of the same long recording (the yaml says a1.wav, the file is a1.flac).
    assert t.loc["a1_0", "audio"] == t.loc["a1_1", "audio"] and t.loc["a1_1", "audio"].endswith("a1.flac")
    assert (t.loc["a1_1", "offset"], t.loc["a1_1", "duration"]) == (3.0, 2.5)
    assert t.loc["a1_0", "gender"] == "F" and t.loc["b2_0", "gender"] == "M"
    assert t.loc["c3_0", "gender"] == "U"        # not in the speaker file
    # The text files are line-aligned with the yaml.
    assert t.loc["b2_0", "text"] == "phrase numéro 2" and t.loc["b2_0", "tgt_text_en"] == "sentence number 2"
    assert set(t["split"]) == {"train", "test"}
    # The pair directory itself works as --root, and the split can be chosen.
    with caplog.at_level(logging.WARNING):
        df2 = read_mtedx(root / "fr-en", splits=["test"], check=QUIET)
    assert list(df2["id"]) == ["c3_0"] and list(df2["gender"]) == ["U"]
    assert "no gender information" in caplog.text      # no speaker file, no gender field: said so
    with pytest.raises(UserError, match="fr-es not found"):
        read_mtedx(root, lang="fr", tgt_lang="es", check=QUIET)


def test_mtedx_gender_field_in_yaml(tmp_path):
    root, _ = make_mtedx(tmp_path)
    yml = root / "fr-en" / "data" / "test" / "txt" / "test.yaml"
    yml.write_text(yml.read_text().replace("wav: c3.wav}", "wav: c3.wav, gender: female}"))
    df = read_mtedx(root / "fr-en", splits=["test"], check=QUIET)
    assert list(df["gender"]) == ["F"] and list(df["gender_raw"]) == ["female"]


def test_mustc_speaker_list_by_speaker_or_talk(tmp_path):
    root, genders = make_mustc(tmp_path)
    t = by_id(read_mustc(root, tgt_lang="de", speaker_genders=genders, check=QUIET))
    assert set(t["split"]) == {"dev", "tst-COMMON"} and set(t["lang"]) == {"en"}
    assert t.loc["ted_1_1", "speaker"] == "spk.1" and t.loc["ted_1_1", "gender"] == "F"   # keyed by talk
    assert t.loc["ted_2_0", "gender"] == "M"                                             # keyed by speaker
    assert t.loc["ted_3_0", "gender"] == "U"
    assert t.loc["ted_1_1", "tgt_text_de"] == "deutsche Zeile 1" and t.loc["ted_1_1", "offset"] == 2.5


def test_commonvoice_both_gender_spellings_quotes_and_converted_clips(tmp_path):
    t = by_id(read_commonvoice(make_commonvoice(tmp_path), check=QUIET))
    assert len(t) == 6 and set(t["split"]) == {"train", "valid", "test"}
    assert t.loc["common_voice_fr_1", "text"] == 'Il a dit "oui".'
    assert t.loc["common_voice_fr_1", "gender"] == "F" and t.loc["common_voice_fr_3", "gender"] == "F"
    assert t.loc["common_voice_fr_2", "gender"] == "M" and t.loc["common_voice_fr_5", "gender"] == "M"
    assert t.loc["common_voice_fr_4", "gender"] == "U" and t.loc["common_voice_fr_6", "gender"] == "U"
    assert t.loc["common_voice_fr_6", "gender_raw"] == "do_not_wish_to_say"
    assert t.loc["common_voice_fr_1", "speaker"] == t.loc["common_voice_fr_3", "speaker"] == "c1"
    assert t.loc["common_voice_fr_1", "audio"].endswith("common_voice_fr_1.wav")


def test_commonvoice_mp3_headers(tmp_path):
    # Only a system libsndfile older than 1.1 lacks mp3; the pinned soundfile wheel bundles one that
    # reads it, so this skip never fires through `make test` (run_tests.sh would print it if it did).
    if "MP3" not in sf.available_formats():
        pytest.skip("the system libsndfile is older than 1.1 and cannot decode mp3 (a library capability, not "
                    "gendergap's; the pinned soundfile wheel has it)")
    root = make_commonvoice(tmp_path, clip_fmt="mp3")
    t = by_id(read_commonvoice(root, splits=["test"], check=QUIET))
    assert t.loc["common_voice_fr_5", "audio"].endswith(".mp3")
    assert t.loc["common_voice_fr_5", "duration"] == pytest.approx(1.0, abs=0.1)


def test_commonvoice_validated_overlap_is_duplicate(tmp_path):
    root = make_commonvoice(tmp_path)
    (root / "validated.tsv").write_text((root / "train.tsv").read_text())
    with pytest.raises(UserError, match="duplicate id 'common_voice_fr_1'") as e:
        read_commonvoice(root, splits=["train", "validated"], check=QUIET)
    assert e.value.path.endswith("validated.tsv") and e.value.line == 2


def test_mustshe_reference_and_categories(tmp_path):
    t = by_id(read_mustshe(make_mustshe(tmp_path), check=QUIET))
    assert t.loc["fr-0001", "gender"] == "F" and t.loc["fr-0002", "gender"] == "M"
    assert (t.loc["fr-0001", "tgt_text_fr"] == "Je suis fatiguée."
            and t.loc["fr-0001", "wrong_ref_fr"] == "Je suis fatigué.")
    assert t.loc["fr-0002", "category"] == "1M" and t.loc["fr-0001", "gender_terms"] == "fatiguée fatigué"
    assert t.loc["fr-0003", "speaker"] == "1003"          # no SPEAKER: the talk stands in
    assert t.loc["fr-0003", "text"] == 'She said "hello".'
    assert set(t["lang"]) == {"en"}


def test_winost_entity_gender_is_not_speaker_gender(tmp_path):
    root = make_winost(tmp_path)
    with pytest.raises(UserError, match="48000 Hz, accepted: 16000 Hz"):
        read_winost(root, check=QUIET)
    t = by_id(read_winost(root, check=AudioCheck(sample_rates=(48000,), progress=False)))
    assert len(t) == 3 and set(t["gender"]) == {"F"} and t["speaker"].nunique() == 1
    assert list(t["entity_gender"]) == ["male", "female", "neutral"]
    assert t.loc["winost_0002", "entity"] == "clerk" and t.loc["winost_0002", "entity_index"] == "5"
    assert t.loc["winost_0003", "duration"] == pytest.approx(1.3, abs=1e-4)   # line 3 <-> 3.wav


def test_kaldi_segments_spk2gender(tmp_path, caplog):
    t = by_id(read_kaldi(make_kaldi(tmp_path), lang="fr", check=QUIET))
    assert len(t) == 4 and set(t["split"]) == {"train"}
    assert (t.loc["s1-rec1-001", "offset"], t.loc["s1-rec1-001", "duration"]) == (2.0, 2.75)
    assert t.loc["s1-rec1-000", "gender"] == "F" and t.loc["s2-rec2-000", "gender"] == "M"
    assert t.loc["s3-rec2-001", "gender"] == "U"          # speaker not in spk2gender
    assert t.loc["s2-rec2-000", "audio"].endswith("audio/rec2.flac") and ".." not in t.loc["s2-rec2-000", "audio"]
    assert t.loc["s1-rec1-001", "text"] == "au revoir"


def test_kaldi_without_segments_and_piped_wav_scp(tmp_path):
    d = make_kaldi(tmp_path)
    (d / "segments").unlink()
    (d / "utt2spk").write_text("rec1 s1\nrec2 s2\n")
    t = by_id(read_kaldi(d, check=QUIET))
    assert t.loc["rec1", "duration"] == pytest.approx(5.0) and t.loc["rec2", "offset"] == 0.0
    (d / "wav.scp").write_text("rec1 sox x.wav -t wav - |\nrec2 ../../audio/rec2.flac\n")
    with pytest.raises(UserError, match="piped command") as e:
        read_kaldi(d, check=QUIET)
    assert e.value.line == 1


def test_lebenchmark_json_path_quirks(tmp_path):
    t = by_id(read_lebenchmark(make_lebenchmark(tmp_path), check=QUIET))
    assert list(t["gender"]) == ["F", "M", "U"] and set(t["corpus"]) == {"att_hack"}
    assert t.loc["F01_a", "audio"].endswith("att_hack/wavs/F01_a.wav")   # "/wavs/..." relative to the JSON
    assert t.loc["M01_a", "duration"] == pytest.approx(1.2)


def test_generic_csv_mapping_segments_and_extras(tmp_path):
    m = "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur"
    t = by_id(read_generic(make_generic(tmp_path), mapping=m, corpus="mine", check=QUIET))
    assert t.loc["u1", "text"] == "oui, bien sûr" and t.loc["u2", "offset"] == 2.0
    assert list(t["gender"]) == ["F", "F", "M"] and t.loc["u3", "age"] == "41"
    assert set(t["corpus"]) == {"mine"}
    # Without offset/duration/id: whole files, ids from the file stem.
    t2 = read_generic(make_generic(tmp_path / "b"), mapping="audio=path,speaker=spk", check=QUIET)
    assert list(t2["id"]) == ["long", "long_1", "short"] and list(t2["gender"]) == ["U"] * 3
    with pytest.raises(UserError, match="unknown --map key 'sex'"):
        read_generic(make_generic(tmp_path / "c"), mapping="audio=path,speaker=spk,sex=sex", check=QUIET)
    with pytest.raises(UserError, match="'nope'.*not in the header"):
        read_generic(make_generic(tmp_path / "d"), mapping="audio=nope,speaker=spk", check=QUIET)


def test_unknown_gender_label_is_u_and_reported(tmp_path, caplog):
    root = make_kaldi(tmp_path)
    (root / "spk2gender").write_text("s1 f\ns2 Frau\n")
    with caplog.at_level(logging.WARNING):
        t = by_id(read_kaldi(root, check=QUIET))
    assert t.loc["s2-rec2-000", "gender"] == "U" and t.loc["s2-rec2-000", "gender_raw"] == "Frau"
    assert "unknown gender label 'Frau'" in caplog.text and "spk2gender" in caplog.text


def test_speaker_gender_file_formats(tmp_path):
    f = tmp_path / "g.tsv"
    f.write_text("# comment\nspeaker\tgender\na\tF\nb\tmale\n")
    assert read_speaker_genders(f) == {"a": ("F", 3), "b": ("male", 4)}
    f.write_text("a F\na M\n")
    with pytest.raises(UserError, match="listed twice") as e:
        read_speaker_genders(f)
    assert e.value.line == 2


def test_headers_read_once_per_file_in_parallel(tmp_path, monkeypatch):
    long = write_audio(tmp_path / "long.wav", 2.0)
    other = write_audio(tmp_path / "b.flac", 0.5, fmt="FLAC")
    many = [str(write_audio(tmp_path / f"s{i}.wav", 0.01 * (i + 1))) for i in range(60)]
    calls, threads = [], set()
    real = audio_info._read_chunk

    def spy(chunk):  # the real reader, recording what it was asked and on which thread
        calls.extend(chunk)
        threads.add(threading.get_ident())
        return real(chunk)

    monkeypatch.setattr(audio_info, "_read_chunk", spy)
    paths = [str(long)] * 50 + [str(other), str(tmp_path / "missing.wav")] + many + many
    infos = probe_headers(paths, workers=4, progress=False)
    assert sorted(calls) == sorted({str(long), str(other), str(tmp_path / "missing.wav"), *many})
    assert threading.get_ident() not in threads          # read by the pool's threads
    assert [round(infos[p].duration, 3) for p in many] == [round(0.01 * (i + 1), 3) for i in range(60)]
    # The fast path agrees with soundfile.info field by field.
    ref = sf.info(str(other))
    assert (infos[str(other)].format, infos[str(other)].subtype) == (ref.format, ref.subtype)
    assert isinstance(infos[str(long)], AudioInfo) and infos[str(long)].duration == pytest.approx(2.0)
    assert infos[str(other)].frames == 8000 and infos[str(other)].sample_rate == 16000
    assert isinstance(infos[str(tmp_path / "missing.wav")], HeaderError)
    assert infos[str(tmp_path / "missing.wav")].kind == "missing"


def test_header_errors_corrupt_and_empty(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "junk.wav").write_bytes(b"RIFF not really a wav file at all" * 4)
    infos = probe_headers([str(tmp_path / "empty.wav"), str(tmp_path / "junk.wav")], workers=1, progress=False)
    assert infos[str(tmp_path / "empty.wav")].kind == "empty"
    assert infos[str(tmp_path / "junk.wav")].kind == "corrupt"


def test_stats_table1_layout(tmp_path):
    df = read_mls(make_mls(tmp_path), check=QUIET)
    s = gender_summary(df, by="split")
    train = s[(s["corpus"] == "mls") & (s["split"] == "train")].iloc[0]
    assert train["seconds_F"] == pytest.approx(1.8) and train["seconds_M"] == pytest.approx(1.2)
    assert (train["speakers_F"], train["speakers_M"], train["utterances_F"]) == (1, 1, 2)
    total = s[s["corpus"] == "TOTAL"].iloc[0]
    assert total["utterances_all"] == 4 and total["speakers_U"] == 1
    md = render(s, "markdown")
    assert "| Dataset" in md and "Duration (M / F / U)" in md and "| TOTAL" in md
    csv_text = render(s, "csv")
    assert csv_text.splitlines()[0].startswith("corpus,split,duration_M,seconds_M")
    assert hours_minutes(3723) == "1:02" and hours_minutes(1006 * 3600 + 59 * 60) == "1,006:59"


def test_lebenchmark_entry_errors_name_their_line(tmp_path):
    path = make_lebenchmark(tmp_path)
    data = json.loads(path.read_text())
    del data["M01_a"]["spk_id"]
    path.write_text(json.dumps(data, indent=4))
    with pytest.raises(UserError, match="entry 'M01_a' lacks spk_id") as e:
        read_lebenchmark(path, check=QUIET)
    assert path.read_text().splitlines()[e.value.line - 1].strip().startswith('"M01_a"')


def test_mtedx_yaml_entry_without_wav(tmp_path):
    root, genders = make_mtedx(tmp_path)
    yml = root / "fr-en" / "data" / "test" / "txt" / "test.yaml"
    yml.write_text(yml.read_text().replace(", wav: c3.wav", ""))
    with pytest.raises(UserError, match="segment #1 has no duration/offset/wav"):
        read_mtedx(root / "fr-en", check=QUIET)


def test_generic_multiline_quoted_cells_are_flattened(tmp_path):
    csv_path = make_generic(tmp_path)
    csv_path.write_text(csv_path.read_text().replace('"oui, bien sûr"', '"oui,\n\tbien sûr"')
                        .replace(",41\n", ",\"4\t1\"\n"))
    t = by_id(read_generic(csv_path,
                           mapping="id=utt_id,audio=path,speaker=spk,text=transcript,offset=start,duration=dur",
                           check=QUIET))
    assert t.loc["u1", "text"] == "oui, bien sûr" and t.loc["u3", "age"] == "4 1"
    assert t.loc["u3", "sex"] == "Male" and t.loc["u3", "gender"] == "U"   # unmapped: kept as an extra


@pytest.mark.parametrize("name,fmt,sr,channels", [("a.wav", "WAV", 16000, 1), ("b.flac", "FLAC", 22050, 2),
                                                  ("c.mp3", "MP3", 16000, 1), ("d.ogg", "OGG", 48000, 1)])
def test_header_fields_match_soundfile_info(tmp_path, name, fmt, sr, channels):
    # A capability of the installed libsndfile, not of our code: the pinned soundfile wheel bundles
    # every format listed here, so through `make test` this skip never fires (it would be printed).
    if fmt not in sf.available_formats():
        pytest.skip(f"this libsndfile has no {fmt}")
    path = str(write_audio(tmp_path / name, 0.7, sr=sr, channels=channels, fmt=fmt))
    got, ref = audio_info.read_header(path), sf.info(path)
    assert (got.sample_rate, got.frames, got.channels, got.format, got.subtype) == \
        (ref.samplerate, ref.frames, ref.channels, ref.format, ref.subtype)
    assert got.duration == pytest.approx(ref.duration)
