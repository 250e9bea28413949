"""Tiny corpora in their real on-disk layouts, written by code into a temp directory.

Each builder writes short 16 kHz mono tones with soundfile (so headers are real) and the
metadata files exactly as the corpus distributes them, including its quirks, and returns
the path to pass as ``--root``. Tests then break one thing at a time.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

SR = 16000


def write_audio(path: Path, seconds: float, sr: int = SR, channels: int = 1, fmt: str | None = None,
                freq: float = 220.0) -> Path:
    """A tone of ``seconds`` at ``sr`` (deterministic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = int(round(seconds * sr))
    t = np.arange(n) / sr
    x = (0.1 * np.sin(2 * np.pi * freq * t)).astype("float32")
    if channels > 1:
        x = np.stack([x] * channels, axis=1)
    sf.write(path, x, sr, format=fmt)
    return path


def make_mls(root: Path, conflict: bool = True) -> Path:
    """mls_french/ with 3 speakers (F, M, and -- with ``conflict`` -- one listed twice with two
    genders) and 2 splits; a title contains ``|``."""
    d = root / "mls_french"
    d.mkdir(parents=True)
    meta = (
        " SPEAKER   |   GENDER   | PARTITION  |  MINUTES   |  BOOK ID   |             TITLE              "
        "|            CHAPTER            \n"
        "   1840    |     F      |   train    |   0.05     |    1234    | Contes | du lundi | (Tome 1) | Le siège\n"
        "   2506    |     M      |   train    |   0.03     |    5678    | Les Misérables                 | Fantine\n"
        "   3001    |     F      |    dev     |   0.02     |    9999    | Germinal                       | 1\n"
        + ("   3001    |     M      |    dev     |   0.02     |    9998    | Nana                           | 2\n"
           if conflict else ""))
    (d / "metainfo.txt").write_text(meta, encoding="utf-8")
    utts = {"train": [("1840_1234_000001", "bonjour à tous", 1.0), ("1840_1234_000002", "il fait beau", 0.8),
                      ("2506_5678_000000", "je lis un livre", 1.2)],
            "dev": [("3001_9999_000003", "une phrase", 0.6)]}
    for split, items in utts.items():
        sd = d / split
        lines, segs = [], []
        for uid, text, dur in items:
            spk, book, _ = uid.split("_")
            write_audio(sd / "audio" / spk / book / f"{uid}.flac", dur, fmt="FLAC")
            lines.append(f"{uid}\t{text}")
            segs.append(f"{uid}\thttp://www.archive.org/download/x/{book}.mp3\t10.5\t{10.5 + dur:.2f}")
        (sd / "transcripts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (sd / "segments.txt").write_text("\n".join(segs) + "\n", encoding="utf-8")
    return d


def _ted_split(data: Path, split: str, talks: dict, src: str, tgt: str, ext: str, texts) -> None:
    """data/<split>/txt/<split>.yaml + .<src> + .<tgt>, data/<split>/wav/<talk><ext>."""
    txt = data / split / "txt"
    txt.mkdir(parents=True)
    yaml_lines, src_lines, tgt_lines = [], [], []
    for talk, (length, segs, extra) in talks.items():
        write_audio(data / split / "wav" / f"{talk}{ext}", length, fmt="FLAC" if ext == ".flac" else "WAV")
        for offset, dur, spk in segs:
            fields = f"duration: {dur}, offset: {offset}, rW: 3, uW: 0, speaker_id: {spk}, wav: {talk}.wav{extra}"
            yaml_lines.append("- {" + fields + "}")
            s, t = texts(len(src_lines))
            src_lines.append(s)
            tgt_lines.append(t)
    (txt / f"{split}.yaml").write_text("\n".join(yaml_lines) + "\n", encoding="utf-8")
    (txt / f"{split}.{src}").write_text("\n".join(src_lines) + "\n", encoding="utf-8")
    if tgt != src:
        (txt / f"{split}.{tgt}").write_text("\n".join(tgt_lines) + "\n", encoding="utf-8")


def make_mtedx(root: Path) -> tuple[Path, Path]:
    """mtedx/fr-en with two talks in train (long recordings, 2 + 1 segments) and one in test.
    Returns (corpus root, speaker->gender file). Talk c3 has no gender anywhere (-> U)."""
    d = root / "mtedx"
    data = d / "fr-en" / "data"
    texts = lambda i: (f"phrase numéro {i}", f"sentence number {i}")
    _ted_split(data, "train", {"a1": (6.0, [(0.5, 2.0, "a1"), (3.0, 2.5, "a1")], ""),
                               "b2": (4.0, [(1.0, 1.5, "b2")], "")}, "fr", "en", ".flac", texts)
    _ted_split(data, "test", {"c3": (3.0, [(0.0, 2.0, "c3")], "")}, "fr", "en", ".flac", texts)
    genders = root / "mtedx_speakers.tsv"
    genders.write_text("speaker\tgender\na1\tF\nb2\tM\n", encoding="utf-8")
    return d, genders


def make_mustc(root: Path) -> tuple[Path, Path]:
    """MUSTC_v1.0/en-de with talks ted_1 (spk.1, 2 segments) and ted_2 (spk.2) in dev, ted_3 in tst-COMMON."""
    d = root / "MUSTC_v1.0"
    data = d / "en-de" / "data"
    texts = lambda i: (f"english line {i}", f"deutsche Zeile {i}")
    _ted_split(data, "dev", {"ted_1": (5.0, [(0.2, 1.8, "spk.1"), (2.5, 2.0, "spk.1")], ""),
                             "ted_2": (3.0, [(0.0, 2.9, "spk.2")], "")}, "en", "de", ".wav", texts)
    _ted_split(data, "tst-COMMON", {"ted_3": (2.0, [(0.5, 1.0, "spk.3")], "")}, "en", "de", ".wav", texts)
    genders = root / "mustc_speakers.csv"
    # Keyed by talk for one speaker, by speaker id for the other; a 3-field line (talk, name, gender).
    genders.write_text("ted_1,Jane Doe,female\nspk.2,M\n", encoding="utf-8")
    return d, genders


CV_HEADER = "client_id\tpath\tsentence\tup_votes\tdown_votes\tage\tgender\taccents\tvariant\tlocale\tsegment"


def make_commonvoice(root: Path, clip_fmt: str = "wav") -> Path:
    """cv-corpus/fr with train/dev/test TSVs, both gender spellings, an empty gender, raw quotes."""
    d = root / "cv-corpus-17.0-2024-03-15" / "fr"
    clips = d / "clips"
    rows = {
        "train": [("c1", "common_voice_fr_1.mp3", 'Il a dit "oui".', "female_feminine"),
                  ("c2", "common_voice_fr_2.mp3", "Le chat dort.", "male"),
                  ("c1", "common_voice_fr_3.mp3", "Encore une phrase.", "female")],
        "dev": [("c3", "common_voice_fr_4.mp3", "Qui est là ?", "")],
        "test": [("c4", "common_voice_fr_5.mp3", "Au revoir.", "male_masculine"),
                 ("c5", "common_voice_fr_6.mp3", "Merci bien.", "do_not_wish_to_say")],
    }
    for split, items in rows.items():
        lines = [CV_HEADER]
        for cid, path, sentence, gender in items:
            stem = path[:-4]
            if clip_fmt == "mp3":
                write_audio(clips / path, 1.0, fmt="MP3")
            else:  # clips converted to 16 kHz wav, same stem (accepted when the mp3 is absent)
                write_audio(clips / f"{stem}.wav", 1.0)
            lines.append(f"{cid}\t{path}\t{sentence}\t2\t0\ttwenties\t{gender}\t\t\tfr\t")
        (d / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


MUSTSHE_HEADER = "ID\tLANG\tTALK\tSRC\tREF\tWRONG-REF\tSPEAKER\tGENDER\tCATEGORY\tTEXT-CATEGORY\tGENDERTERMS"


def make_mustshe(root: Path) -> Path:
    """MuST-SHE_v1.2/MONOLINGUAL.fr_v1.2.tsv + wav/<ID>.wav; the last row has no SPEAKER."""
    d = root / "MuST-SHE_v1.2"
    rows = [
        ("fr-0001", "en-fr", "1001", "I am tired.", "Je suis fatiguée.", "Je suis fatigué.", "Ann Lee", "She", "1F",
         "FREE", "fatiguée fatigué"),
        ("fr-0002", "en-fr", "1002", "I was born there.", "Je suis né là.", "Je suis née là.", "Bob Roy", "He", "1M",
         "FREE", "né née"),
        ("fr-0003", "en-fr", "1003", 'She said "hello".', "Elle a dit « bonjour ».", "Il a dit « bonjour ».", "", "He",
         "2F", "FREE", "Elle Il"),
    ]
    lines = [MUSTSHE_HEADER]
    for r in rows:
        write_audio(d / "wav" / f"{r[0]}.wav", 1.5)
        lines.append("\t".join(r))
    (d / "MONOLINGUAL.fr_v1.2.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return d


def make_winost(root: Path, sr: int = 48000) -> Path:
    """winost/en.txt (WinoMT) + wav/1.wav.. at 48 kHz (as distributed)."""
    d = root / "winost"
    lines = ["male\t1\tThe developer argued with the designer because he did not like the design.\tdeveloper",
             "female\t5\tThe mechanic gave the clerk a present because she won the lottery.\tclerk",
             "neutral\t1\tThe nurse helped the patient because they were kind.\tnurse"]
    d.mkdir(parents=True)
    (d / "en.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for i in range(1, len(lines) + 1):
        write_audio(d / "wav" / f"{i}.wav", 1.0 + 0.1 * i, sr=sr)
    return d


def make_winost_gz(root: Path, sr: int = 48000) -> Path:
    """WinoST as its zip unpacks (a Mac-made archive): en.txt, wav/0001.wav.gz.. (gzipped 48 kHz
    wavs, zero-padded numbers) with AppleDouble ``._0001.wav.gz`` beside them and in __MACOSX/."""
    import gzip
    d = make_winost(root, sr=sr)
    apple_double = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + b"\x00" * 4000
    mac = d / "__MACOSX" / "wav"   # the archive's litter lands inside the unpacked folder
    mac.mkdir(parents=True)
    for wav in sorted((d / "wav").glob("*.wav")):
        name = f"{int(wav.stem):04d}.wav.gz"
        (d / "wav" / name).write_bytes(gzip.compress(wav.read_bytes(), mtime=0))
        (d / "wav" / f"._{name}").write_bytes(apple_double)
        (mac / f"._{name}").write_bytes(apple_double)
        wav.unlink()
    return d


def make_kaldi(root: Path) -> Path:
    """A recipe dir (``root``) with data/train: two long recordings, segments, text, utt2spk,
    spk2gender (one speaker unlisted). wav.scp holds an absolute path and one relative to the
    recipe dir, where Kaldi's scripts run (not to data/train)."""
    d = root / "data" / "train"
    d.mkdir(parents=True)
    write_audio(root / "audio" / "rec1.wav", 5.0)
    write_audio(root / "audio" / "rec2.flac", 3.0, fmt="FLAC")
    (d / "wav.scp").write_text(f"rec1 {root / 'audio' / 'rec1.wav'}\nrec2\taudio/rec2.flac\n", encoding="utf-8")
    (d / "segments").write_text("s1-rec1-000 rec1 0.00 1.50\ns1-rec1-001 rec1 2.00 4.75\ns2-rec2-000 rec2 0.5 2.5\n"
                                "s3-rec2-001 rec2 2.5 3.0\n", encoding="utf-8")
    (d / "text").write_text("s1-rec1-000 bonjour\ns1-rec1-001 au revoir\ns2-rec2-000 merci beaucoup\n"
                            "s3-rec2-001 oui\n", encoding="utf-8")
    (d / "utt2spk").write_text("s1-rec1-000 s1\ns1-rec1-001 s1\ns2-rec2-000 s2\ns3-rec2-001 s3\n", encoding="utf-8")
    (d / "spk2gender").write_text("s1 f\ns2 m\n", encoding="utf-8")
    return d


def make_lebenchmark(root: Path) -> Path:
    """att_hack/data.json with the path quirks (rooted-but-relative, relative) and string durations."""
    d = root / "att_hack"
    write_audio(d / "wavs" / "F01_a.wav", 1.0)
    write_audio(d / "wavs" / "M01_a.wav", 1.2)
    write_audio(d / "wavs" / "X01_a.wav", 0.7)
    data = {
        "F01_a": {"path": "/wavs/F01_a.wav", "trans": "bonjour", "duration": "1.0", "spk_id": "F01", "spk_gender": "F"},
        "M01_a": {"path": "wavs/M01_a.wav", "trans": "salut", "duration": 1.2, "spk_id": "M01", "spk_gender": "M"},
        "X01_a": {"path": "wavs/X01_a.wav", "trans": "", "duration": 0.7, "spk_id": "X01", "spk_gender": "U"},
    }
    (d / "data.json").write_text(json.dumps(data, indent=4, ensure_ascii=False), encoding="utf-8")
    return d / "data.json"


def make_generic(root: Path) -> Path:
    """meta.csv: quoted text with a comma, a long recording with two segments, an unmapped column."""
    d = root / "mycorpus"
    write_audio(d / "wav" / "long.wav", 4.0)
    write_audio(d / "wav" / "short.wav", 1.0)
    (d / "meta.csv").write_text(
        "utt_id,path,spk,sex,transcript,start,dur,age\n"
        'u1,wav/long.wav,A,Female,"oui, bien sûr",0.0,1.5,30\n'
        "u2,wav/long.wav,A,Female,deuxième,2.0,1.5,30\n"
        "u3,wav/short.wav,B,Male,court,0,1.0,41\n", encoding="utf-8")
    return d / "meta.csv"


# Talk -> (recording seconds, segments (offset, duration, speaker)) of the four mTEDx pairs below.
MTEDX_TALKS = {"train": {"a1": (6.0, [(0.5, 2.0, "a1"), (3.0, 2.5, "a1")]),
                         "b2": (4.0, [(1.0, 1.5, "b2")]),
                         "d4": (5.0, [(0.0, 2.0, "d4"), (2.5, 2.0, "d4")])},
               "test": {"c3": (3.0, [(0.0, 2.0, "c3")])}}
# Which talks each pair has (the subsets share talks; fr-pt lacks b2, fr-en lacks d4), and the
# pair where one segment is cut differently (same id b2_0, another duration).
MTEDX_PAIR_TALKS = {"fr": ["a1", "b2", "c3", "d4"], "en": ["a1", "b2", "c3"], "es": ["a1", "b2", "c3", "d4"],
                    "pt": ["a1", "c3", "d4"]}
MTEDX_RECUT = ("es", "b2", 1.4)


def make_mtedx_pairs(root: Path) -> tuple[Path, Path]:
    """mtedx/ as released with four pairs fr-fr, fr-en, fr-es, fr-pt sharing talks: each pair has
    its own wav/ copies of its talks (same file names, same content) and the same segment ids
    (``<talk>_<k>``, as the reader names them) and source text for the same segment. In fr-es
    segment b2_0 is cut differently (duration 1.4 instead of 1.5). Returns (corpus root,
    speaker->gender file: a1 F, b2 M, c3 'Frau', d4 'Multi-Mix' -- two labels gendergap does
    not know, for --gender-map)."""
    d = root / "mtedx"
    for tgt, talks_in in MTEDX_PAIR_TALKS.items():
        data = d / f"fr-{tgt}" / "data"
        for split, talks in MTEDX_TALKS.items():
            chosen = {}
            for talk, (length, segs) in talks.items():
                if talk not in talks_in:
                    continue
                if (tgt, talk) == MTEDX_RECUT[:2]:
                    segs = [(segs[0][0], MTEDX_RECUT[2], segs[0][2])] + segs[1:]
                chosen[talk] = (length, segs, "")
            if not chosen:
                continue
            keys = [(t, k) for t, (_, segs, _) in chosen.items() for k in range(len(segs))]
            texts = (lambda keys, tgt: lambda i: (f"phrase {keys[i][0]} {keys[i][1]}",
                                                   f"{tgt} sentence {keys[i][0]} {keys[i][1]}"))(keys, tgt)
            _ted_split(data, split, chosen, "fr", tgt, ".flac", texts)
    genders = root / "mtedx_pairs_speakers.tsv"
    genders.write_text("speaker\tgender\na1\tF\nb2\tM\nc3\tFrau\nd4\tMulti-Mix\n", encoding="utf-8")
    return d, genders
