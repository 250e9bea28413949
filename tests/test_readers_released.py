"""The CoVoST 2, FLEURS and VoxPopuli readers on tiny copies of each release's layout, built here with
real audio and the releases' quirks: CoVoST's escaped and raw quotes, train_covost rows, a row whose
clip is not in validated.tsv and a speaker labelled only on a clip CoVoST leaves out; FLEURS's
headerless TSVs, sentence ids shared by several readers, OTHER and a wrong sample count; VoxPopuli's
colons in ogg names, empty and conflicting genders. Each reader also runs through the CLI."""
import logging

import pytest
import soundfile as sf

from cli_helpers import run_lines as run
from corpora.base.errors import UserError
from corpora.readers import AudioCheck, read_covost2, read_fleurs, read_voxpopuli
from corpora.utterances import UtteranceTable
from fixtures_corpora import CV_HEADER, write_audio

QUIET = AudioCheck(progress=False)
ANY_RATE = AudioCheck(sample_rates=None, progress=False)


def by_id(df):
    return df.set_index("id")


def cli_error(capsys, out, *argv):
    """`gendergap corpus index ARGV --out OUT` refused: exit 2, one stderr line, no table written."""
    rc, _, err = run(capsys, "corpus", "index", *argv, "--out", out)
    assert rc == 2 and len(err) == 1 and err[0].startswith("gendergap: error: "), err
    assert not out.exists()
    return err[0]


def cli_round_trip(capsys, out, *argv):
    """`gendergap corpus index ARGV --out OUT` succeeds and writes a table the loader reads."""
    rc, _, err = run(capsys, "corpus", "index", *argv, "--out", out)
    assert rc == 0, err
    return UtteranceTable.load(out).rows.set_index("id")


# ------------------------------------------------------------------ CoVoST 2 on Common Voice

COVOST_HEADER = "path\tsentence\ttranslation\tclient_id\tsplit"
# validated.tsv: (client_id, path, sentence, gender). Clips 7 and 8 are not in CoVoST and have no audio
# here: indexing reads their labels, never their headers.
VALIDATED = [
    ("c1", "common_voice_fr_1.mp3", 'Il a dit "oui".', "female"),
    ("c1", "common_voice_fr_2.mp3", "Le chat dort.", ""),                 # c1's label is on clip 1
    ("c2", "common_voice_fr_3.mp3", "Bonjour.", ""),
    ("c3", "common_voice_fr_4.mp3", "Qui est là ?", "male"),
    ("c4", "common_voice_fr_5.mp3", "Merci bien.", ""),                   # no label anywhere: U
    ("c3", "common_voice_fr_7.mp3", "Une autre.", "female"),              # c3 labelled both ways: U
    ("c2", "common_voice_fr_8.mp3", "Pas traduite.", "male_masculine"),   # c2's only label
]
# covost_v2.fr_en.tsv rows (path, sentence, translation, client_id, split), escaped as fairseq writes
COVOST_ROWS = [
    ("common_voice_fr_1.mp3", 'Il a dit \\"oui\\".', 'He said \\"yes\\".', "c1", "train"),
    ("common_voice_fr_2.mp3", "Le chat dort.", "The cat sleeps.", "c1", "train_covost"),
    ("common_voice_fr_3.mp3", "Bonjour.", '"Hello".', "c2", "dev"),           # a raw quote
    ("common_voice_fr_4.mp3", "Qui est là ?", "Who is there?", "c3", "test"),
    ("common_voice_fr_5.mp3", "", "Thanks a lot.", "c4", "test"),              # no sentence: validated's
    ("common_voice_fr_6.mp3", "Absente.", "Missing.", "c9", "train"),          # not in validated.tsv (line 7)
]


def make_covost(root, header=COVOST_HEADER):
    """(covost_tsv/ holding covost_v2.fr_en.tsv, cv-corpus-4-2019-12-10/fr): clips converted to 48 kHz
    wav with their stems, clip i lasting 0.3 + 0.1 i s."""
    cv = root / "cv-corpus-4-2019-12-10" / "fr"
    lines = [CV_HEADER]
    for cid, path, sentence, gender in VALIDATED:
        lines.append(f"{cid}\t{path}\t{sentence}\t2\t0\tthirties\t{gender}\t\t\tfr\t")
    (cv / "clips").mkdir(parents=True)
    (cv / "validated.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for i in range(1, 6):
        write_audio(cv / "clips" / f"common_voice_fr_{i}.wav", 0.3 + 0.1 * i, sr=48000)
    d = root / "covost_tsv"
    d.mkdir()
    keep = [i for i, c in enumerate(COVOST_HEADER.split("\t")) if c in header.split("\t")]
    rows = ["\t".join(r[i] for i in keep) for r in COVOST_ROWS]
    (d / "covost_v2.fr_en.tsv").write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return d, cv


def test_covost2_joins_validated_as_fairseq_does(tmp_path, caplog):
    d, cv = make_covost(tmp_path)
    with caplog.at_level(logging.WARNING):
        t = by_id(read_covost2(d, cv_root=cv, check=ANY_RATE))
    ids = [f"common_voice_fr_{i}" for i in range(1, 6)]
    assert list(t.index) == ids                                       # clip 6 skipped: not in validated.tsv
    assert list(t["split"]) == ["train", "train", "valid", "test", "test"]
    assert list(t["covost_split"]) == ["train", "train_covost", "dev", "test", "test"]
    assert t.loc[ids[0], "text"] == 'Il a dit "oui".' and t.loc[ids[0], "tgt_text_en"] == 'He said "yes".'
    assert t.loc[ids[2], "tgt_text_en"] == '"Hello".' and t.loc[ids[4], "text"] == "Merci bien."
    assert list(t["speaker"]) == ["c1", "c1", "c2", "c3", "c4"]
    assert list(t["gender"]) == ["F", "F", "M", "U", "U"]
    assert list(t["gender_source"]) == ["row", "speaker", "speaker", "conflict", ""]
    assert t.loc[ids[2], "gender_raw"] == "male_masculine"              # from clip 8, which CoVoST leaves out
    assert set(t["lang"]) == {"fr"} and set(t["corpus"]) == {"covost2"} and set(t["sample_rate"]) == {48000}
    assert list(t["duration"]) == pytest.approx([0.4, 0.5, 0.6, 0.7, 0.8], abs=1e-4)
    assert t.loc[ids[0], "audio"].endswith("clips/common_voice_fr_1.wav")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned
    assert "1 row(s) skipped: clip not in validated.tsv (first: " in warned[0]
    assert warned[0].split("(first: ")[1].startswith(f"{d / 'covost_v2.fr_en.tsv'}:7)")
    assert "gender resolved per client_id: 2 row(s)" in warned[1] and "1 speaker(s) with conflicting" in warned[1]


def test_covost2_splits_strict_and_a_broken_row(tmp_path):
    d, cv = make_covost(tmp_path)
    t = read_covost2(d, cv_root=cv, splits=["train"], check=ANY_RATE)
    assert list(t["id"]) == ["common_voice_fr_1", "common_voice_fr_2"]        # train takes train_covost
    assert list(read_covost2(d, cv_root=cv, splits=["dev"], check=ANY_RATE)["split"]) == ["valid"]
    with pytest.raises(UserError, match="clip 'common_voice_fr_6.mp3' is not in") as e:
        read_covost2(d, cv_root=cv, check=AudioCheck(sample_rates=None, progress=False, strict=True))
    assert e.value.path.endswith("covost_v2.fr_en.tsv") and e.value.line == 7
    tsv = d / "covost_v2.fr_en.tsv"
    tsv.write_text(tsv.read_text() + "common_voice_fr_9.mp3\tDeux champs seulement\n", encoding="utf-8")
    with pytest.raises(UserError, match="2 fields, the header has 5") as e:
        read_covost2(d, cv_root=cv, check=ANY_RATE)
    assert e.value.path.endswith("covost_v2.fr_en.tsv") and e.value.line == 8


def test_covost2_finds_its_tsv_and_needs_cv_root(tmp_path):
    d, cv = make_covost(tmp_path, header="path\tsentence\ttranslation\tsplit")   # copies without client_id
    (d / "covost_v2.en_de.tsv").write_text(COVOST_HEADER + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="several of the CoVoST 2 TSVs here match.*covost_v2.en_de.tsv, "
                                        "covost_v2.fr_en.tsv"):
        read_covost2(d, cv_root=cv, check=ANY_RATE)
    t = read_covost2(d, cv_root=cv, tgt_lang="en", check=ANY_RATE)
    assert len(t) == 5 and list(t["speaker"])[:2] == ["c1", "c1"]             # speakers from validated.tsv
    assert len(read_covost2(d / "covost_v2.fr_en.tsv", cv_root=cv, check=ANY_RATE)) == 5
    with pytest.raises(UserError, match="needs --cv-root"):
        read_covost2(d, tgt_lang="en", check=ANY_RATE)
    with pytest.raises(UserError, match="no validated.tsv and clips/"):
        read_covost2(d, cv_root=d, tgt_lang="en", check=ANY_RATE)


def test_covost2_through_the_cli(tmp_path, capsys):
    d, cv = make_covost(tmp_path)
    t = cli_round_trip(capsys, tmp_path / "covost.tsv", "--kind", "covost2", "--root", d, "--cv-root", cv,
                       "--no-progress")
    assert len(t) == 5 and t.loc["common_voice_fr_3", "split"] == "valid"
    assert t.loc["common_voice_fr_1", "tgt_text_en"] == 'He said "yes".'
    tsv = d / "covost_v2.fr_en.tsv"
    tsv.write_text(tsv.read_text() + "common_voice_fr_9.mp3\tDeux champs\n", encoding="utf-8")
    line = cli_error(capsys, tmp_path / "t.tsv", "--kind", "covost2", "--root", d, "--cv-root", cv)
    assert f"{tsv}:8: 2 fields, the header has 5" in line


# ------------------------------------------------------------------ FLEURS

# split -> (sentence id, file name, raw transcription, normalised, gender, seconds, samples listed or None)
FLEURS = {
    "train": [("1001", "10004088536354799741.wav", 'Le "chat" dort.', "le chat dort", "FEMALE", 0.5, None),
              ("1001", "10004088536354799742.wav", 'Le "chat" dort.', "le chat dort", "MALE", 0.6, None),
              ("1002", "10004088536354799743.wav", "Bonjour à tous.", "bonjour à tous", "OTHER", 0.4, 6000)],
    "dev": [("1003", "10004088536354799744.wav", "Merci.", "merci", "FEMALE", 0.3, None)],
    "test": [("1004", "10004088536354799745.wav", "Au revoir.", "au revoir", "MALE", 0.7, None)],
}


def make_fleurs(root):
    """fleurs/data/fr_fr as downloaded from google/fleurs, with audio/<split>.tar.gz extracted."""
    d = root / "fleurs" / "data" / "fr_fr"
    for split, items in FLEURS.items():
        lines = []
        for sid, name, raw, norm, gender, seconds, listed in items:
            write_audio(d / "audio" / split / name, seconds)
            chars = " ".join(norm.replace(" ", "|")) + " |"
            lines.append("\t".join([sid, name, raw, norm, chars, str(listed or round(seconds * 16000)), gender]))
        (d / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def test_fleurs_recordings_are_speakers_and_said_so(tmp_path, caplog):
    d = make_fleurs(tmp_path)
    with caplog.at_level(logging.WARNING):
        t = by_id(read_fleurs(d, check=QUIET))
    ids = [f"1000408853635479974{i}" for i in range(1, 6)]
    assert list(t.index) == ids and list(t["speaker"]) == ids and set(t["speaker_source"]) == {"recording"}
    assert list(t["gender"]) == ["F", "M", "U", "F", "M"] and t.loc[ids[2], "gender_raw"] == "OTHER"
    assert list(t["sentence_id"]) == ["1001", "1001", "1002", "1003", "1004"]    # shared by two readers
    assert list(t["split"]) == ["train", "train", "train", "valid", "test"]
    assert t.loc[ids[0], "text"] == 'Le "chat" dort.' and t.loc[ids[0], "text_normalised"] == "le chat dort"
    assert list(t["duration"]) == pytest.approx([0.5, 0.6, 0.4, 0.3, 0.7])
    assert set(t["lang"]) == {"fr"} and set(t["corpus"]) == {"fleurs"}
    assert t.loc[ids[3], "audio"].endswith("fr_fr/audio/dev/10004088536354799744.wav")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2, warned
    assert "FLEURS releases no speaker ids" in warned[0] and "too narrow" in warned[0]
    assert f"1 row(s) whose number of samples differs from the audio header (first: {d / 'train.tsv'}:3: " \
           "6000 listed, 6400" in warned[1]


def test_fleurs_packed_audio_and_a_broken_line(tmp_path, capsys):
    d = make_fleurs(tmp_path)
    tsv = d / "train.tsv"
    tsv.write_text(tsv.read_text() + "1005\tx.wav\tsix\tsix\ts i x |\t16000\n", encoding="utf-8")
    with pytest.raises(UserError, match="6 tab-separated fields, expected 7") as e:
        read_fleurs(d, check=QUIET)
    assert e.value.path.endswith("train.tsv") and e.value.line == 4
    line = cli_error(capsys, tmp_path / "f.tsv", "--kind", "fleurs", "--root", d)
    assert f"{tsv}:4: 6 tab-separated fields" in line
    for wav in (d / "audio" / "dev").iterdir():
        wav.unlink()
    (d / "audio" / "dev").rmdir()
    (d / "audio" / "dev.tar.gz").write_bytes(b"\x1f\x8b packed")
    with pytest.raises(UserError, match="the dev audio is still packed") as e:
        read_fleurs(d, splits=["dev"], check=QUIET)
    assert f"tar -xzf {d / 'audio' / 'dev.tar.gz'} -C {d / 'audio'}" in e.value.fix


def test_fleurs_through_the_cli(tmp_path, capsys):
    t = cli_round_trip(capsys, tmp_path / "fleurs.tsv", "--kind", "fleurs", "--root", make_fleurs(tmp_path),
                       "--split", "dev,test", "--no-progress")
    assert list(t["split"]) == ["valid", "test"] and list(t["gender"]) == ["F", "M"]


# ------------------------------------------------------------------ VoxPopuli

VOX_HEADER = "id\traw_text\tnormalized_text\tspeaker_id\tsplit\tgender\tis_gold_transcript\taccent"
VOX_HEADER_OLD = "id\traw_text\tnormalized_text\tspeaker_id\tsplit\tgender"
# split -> (id, raw text, speaker, gender, seconds)
VOX = {
    "train": [("20180313-0900-PLENARY-15-fr_20180313-20:36:03_3", 'Monsieur le "Président", merci.', "124737",
               "female", 0.8),
              ("20180313-0900-PLENARY-15-fr_20180313-20:40:00_1", "Oui.", "124737", "", 0.3),   # the speaker's
              ("20190415-0900-PLENARY-7-fr_20190415-17:30:11_1", "Non.", "96766", "male", 0.5),
              ("20190415-0900-PLENARY-7-fr_20190415-17:31:00_2", "Peut-être.", "5555", "female", 0.4),
              ("20190415-0900-PLENARY-7-fr_20190415-17:32:00_4", "Jamais.", "5555", "male", 0.4)],  # both: U
    "dev": [("20200106-0900-PLENARY-3-fr_20200106-10:00:00_0", "Bien.", "777", "male", 0.6)],
    "test": [("20210111-0900-PLENARY-2-fr_20210111-11:11:11_5", "Fin.", "888", "", 0.5)],    # no label: U
}


def make_voxpopuli(root):
    """R/transcribed_data/fr as voxpopuli.get_asr_data writes it: asr_<split>.tsv (dev in the older
    6-column header) and <year>/<id>.ogg, 16 kHz Vorbis."""
    # VoxPopuli ships ogg: a capability of the installed libsndfile, not of our code; the pinned
    # soundfile wheel has it, so through `make test` this skip never fires (run_tests.sh would print it)
    if "OGG" not in sf.available_formats():
        pytest.skip("the system libsndfile was built without ogg/vorbis (a library capability, not gendergap's; "
                    "the pinned soundfile wheel has it)")
    d = root / "voxpopuli" / "transcribed_data" / "fr"
    for split, items in VOX.items():
        lines = [VOX_HEADER_OLD if split == "dev" else VOX_HEADER]
        for uid, raw, spk, gender, seconds in items:
            write_audio(d / uid[:4] / f"{uid}.ogg", seconds, fmt="OGG")
            norm = raw.lower().replace('"', "").replace(",", "").replace(".", "")
            extra = "" if split == "dev" else "\tTrue\tNone"
            lines.append("\t".join([uid, raw, norm, spk, split, gender]) + extra)
        (d / f"asr_{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root / "voxpopuli"


def test_voxpopuli_ogg_with_colons_and_per_speaker_gender(tmp_path, caplog):
    r = make_voxpopuli(tmp_path)
    with caplog.at_level(logging.WARNING):
        t = by_id(read_voxpopuli(r, check=QUIET))
    ids = [u for items in VOX.values() for u, *_ in items]
    assert list(t.index) == ids
    assert t.loc[ids[0], "audio"] == str(r / "transcribed_data" / "fr" / "2018" / f"{ids[0]}.ogg")
    assert list(t["speaker"]) == ["124737", "124737", "96766", "5555", "5555", "777", "888"]
    assert list(t["gender"]) == ["F", "F", "M", "U", "U", "M", "U"]
    assert list(t["gender_source"]) == ["row", "speaker", "row", "conflict", "conflict", "row", ""]
    assert list(t["split"]) == ["train"] * 5 + ["valid", "test"]
    assert t.loc[ids[0], "text"] == 'Monsieur le "Président", merci.'
    assert t.loc[ids[0], "text_normalised"] == "monsieur le président merci"
    assert t.loc[ids[0], "is_gold_transcript"] == "True" and t.loc[ids[5], "is_gold_transcript"] == ""
    assert list(t["duration"]) == pytest.approx([0.8, 0.3, 0.5, 0.4, 0.4, 0.6, 0.5], abs=1e-3)
    assert set(t["lang"]) == {"fr"} and set(t["corpus"]) == {"voxpopuli"} and set(t["sample_rate"]) == {16000}
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "gender resolved per speaker_id: 1 row(s)" in warned[0]
    assert "2 row(s) of 1 speaker(s) with conflicting labels" in warned[0]
    # The language folder, or transcribed_data/ with --lang, work as --root too.
    assert len(read_voxpopuli(r / "transcribed_data" / "fr", splits=["dev"], check=QUIET)) == 1
    assert len(read_voxpopuli(r / "transcribed_data", lang="fr", splits=["test"], check=QUIET)) == 1
    with pytest.raises(UserError, match=r"no de/asr_<split>.tsv here \(languages found: fr\)"):
        read_voxpopuli(r, lang="de", check=QUIET)


def test_voxpopuli_a_broken_row_and_a_missing_ogg(tmp_path, capsys):
    r = make_voxpopuli(tmp_path)
    tsv = r / "transcribed_data" / "fr" / "asr_test.tsv"
    with tsv.open("a", encoding="utf-8") as f:
        f.write("20210111-0900-PLENARY-2-fr_20210111-11:12:00_6\tUn\tdeux\ttrois\tun\t888\ttest\t\tTrue\tNone\n")
    with pytest.raises(UserError, match="10 fields, the header has 8") as e:
        read_voxpopuli(r, check=QUIET)
    assert e.value.path.endswith("asr_test.tsv") and e.value.line == 3
    tsv.write_text("\n".join(tsv.read_text().splitlines()[:2]) + "\n", encoding="utf-8")
    (r / "transcribed_data" / "fr" / "2020" / f"{VOX['dev'][0][0]}.ogg").unlink()
    line = cli_error(capsys, tmp_path / "v.tsv", "--kind", "voxpopuli", "--root", r)
    assert f"{r / 'transcribed_data' / 'fr' / 'asr_dev.tsv'}:2:" in line


def test_voxpopuli_through_the_cli(tmp_path, capsys):
    r = make_voxpopuli(tmp_path)
    t = cli_round_trip(capsys, tmp_path / "vp.tsv", "--kind", "voxpopuli", "--root", r / "transcribed_data" / "fr",
                       "--no-progress")
    assert len(t) == 7 and t.loc[VOX["dev"][0][0], "split"] == "valid"
    assert t.loc[VOX["train"][1][0], "gender"] == "F"
