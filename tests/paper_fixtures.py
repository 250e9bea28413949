"""The reference study's corpora in miniature, in the layouts their releases ship in.

Boito et al. 2022 pretrain on a French pool (MLS, Common Voice, LeBenchmark's JSON-described
corpora) and train downstream on mTEDx (fr-fr for ASR; fr-en, fr-es, fr-pt for ST). This writes
each of them under one root, with the details that make real releases awkward:

  mtedx/fr-{fr,en,es,pt}/data/{train,valid,test}/txt/<split>.yaml|.fr|.<tgt> and wav/<talk>.flac
      the four pairs share talks and segment ids; each pair ships its own copy of a talk's audio;
      the yaml's `wav:` names <talk>.wav while the file is .flac; the ST pairs translate a subset
      of fr-fr's training talks and the same valid/test talks; speaker genders come from a list
      (mtedx_fr_speakers.tsv), one talk labelled `Multi-Mix` (MuST-Speakers' mixed-panel label)
  mls_french/ (flac) and mls_french_opus/ (opus): metainfo.txt with '|' columns, transcripts,
      segments.txt, audio/<spk>/<book>/<utt>.<ext>
  cv-corpus-5.1-2020-06-22/fr: the old header (`accent`, genders male/female), 48 kHz mp3
  cv-corpus-17.0-2024-03-15/fr: the new header (`accents`, `variant`, `sentence_id`,
      male_masculine/female_feminine), 48 kHz mp3 with two 32 kHz clips among them
  lebenchmark/epac_like/data.json: LeBenchmark's per-corpus JSON (rooted-but-relative paths,
      string durations)

Audio is a tone at each speaker's pitch (higher for women) with a little noise, so the gender
of a voice is in the signal; texts are short French sentences with their translations.

    paths = write_paper_corpora(tmp_path)   # {"mtedx": ..., "mls": ..., "cv_old": ..., ...}
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

WORDS = ["la", "maison", "est", "grande", "le", "chat", "dort", "ici", "nous", "parlons", "demain", "matin",
         "une", "idée", "simple", "change", "tout", "pour", "vous", "aussi"]
TRANSLATIONS = {
    "en": ["the", "house", "is", "big", "the", "cat", "sleeps", "here", "we", "talk", "tomorrow", "morning",
           "an", "idea", "simple", "changes", "everything", "for", "you", "too"],
    "es": ["la", "casa", "es", "grande", "el", "gato", "duerme", "aquí", "nosotros", "hablamos", "mañana",
           "temprano", "una", "idea", "simple", "cambia", "todo", "para", "usted", "también"],
    "pt": ["a", "casa", "é", "grande", "o", "gato", "dorme", "aqui", "nós", "falamos", "amanhã", "cedo", "uma",
           "ideia", "simples", "muda", "tudo", "para", "você", "também"],
}


def _sentence(i: int, lang: str = "fr", n: int = 4) -> str:
    words = WORDS if lang == "fr" else TRANSLATIONS[lang]
    return " ".join(words[(i * 3 + k * 7) % len(words)] for k in range(n))


def _tone(seconds: float, sr: int, pitch: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(round(seconds * sr))) / sr
    wobble = 1 + 0.05 * np.sin(2 * np.pi * 3 * t)   # a slow vibrato, so frames differ
    x = 0.25 * np.sin(2 * np.pi * pitch * wobble * t) + 0.08 * np.sin(4 * np.pi * pitch * t)
    return (x + 0.03 * rng.standard_normal(len(t))).astype("float32")


def _write(path: Path, x: np.ndarray, sr: int, **kw) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, x, sr, **kw)


# --- mTEDx -----------------------------------------------------------------------------------------

# talk -> (gender, split, segments); men have more training speech than women, as in fr-fr
TALKS = {
    **{f"fa{i}": ("F", "train", 6) for i in range(1, 5)},
    **{f"ma{i}": ("M", "train", 8) for i in range(1, 5)},
    "fv1": ("F", "valid", 5), "fv2": ("F", "valid", 5), "mv1": ("M", "valid", 5), "mv2": ("M", "valid", 4),
    "ft1": ("F", "test", 5), "ft2": ("F", "test", 5), "mt1": ("M", "test", 5), "mt2": ("M", "test", 5),
}
PAIR_TRAIN_TALKS = {"en": ["fa1", "fa2", "fa3", "ma1", "ma2", "ma3"], "es": ["fa1", "fa2", "ma1", "ma2"],
                    "pt": ["fa3", "ma3", "fa4", "ma4"]}
SEG_S, GAP_S = 1.3, 0.4


def _talk_pitch(talk: str) -> float:
    base = 205.0 if TALKS[talk][0] == "F" else 115.0
    return base + 7.0 * (sum(map(ord, talk)) % 5)


def write_mtedx(root: Path) -> tuple[Path, Path]:
    """mtedx/ with the four fr-* pairs; returns (mtedx root, the speaker gender list)."""
    d = root / "mtedx"
    audio = {}
    for talk, (_, _, n) in TALKS.items():
        audio[talk] = _tone(GAP_S + n * (SEG_S + GAP_S), 16000, _talk_pitch(talk), seed=len(audio))
    seg_index = {}
    for tgt in ("fr", "en", "es", "pt"):
        data = d / f"fr-{tgt}" / "data"
        for split in ("train", "valid", "test"):
            talks = [t for t, (_, s, _) in TALKS.items() if s == split]
            if split == "train" and tgt != "fr":
                talks = PAIR_TRAIN_TALKS[tgt]
            yaml, src, trg = [], [], []
            for talk in talks:
                _write(data / split / "wav" / f"{talk}.flac", audio[talk], 16000, format="FLAC")
                for k in range(TALKS[talk][2]):
                    i = seg_index.setdefault((talk, k), len(seg_index))
                    offset = round(GAP_S + k * (SEG_S + GAP_S), 2)
                    yaml.append(f"- {{duration: {SEG_S}, offset: {offset}, rW: 4, uW: 0, speaker_id: {talk}, "
                                f"wav: {talk}.wav}}")
                    src.append(_sentence(i))
                    trg.append(_sentence(i, tgt) if tgt != "fr" else "")
            txt = data / split / "txt"
            txt.mkdir(parents=True, exist_ok=True)
            (txt / f"{split}.yaml").write_text("\n".join(yaml) + "\n", encoding="utf-8")
            (txt / f"{split}.fr").write_text("\n".join(src) + "\n", encoding="utf-8")
            if tgt != "fr":
                (txt / f"{split}.{tgt}").write_text("\n".join(trg) + "\n", encoding="utf-8")
    genders = root / "mtedx_fr_speakers.tsv"
    lines = [f"{talk}\t{'Multi-Mix' if talk == 'mv1' else g}" for talk, (g, _, _) in TALKS.items()]
    genders.write_text("speaker\tgender\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return d, genders


# --- the pretraining pool ----------------------------------------------------------------------------

MLS_META_HEAD = (" SPEAKER   |   GENDER   | PARTITION  |  MINUTES   |  BOOK ID   |             TITLE              "
                 "|            CHAPTER            \n")


def write_mls(root: Path, name: str, speakers: dict[str, str], ext: str, utts: int = 6) -> Path:
    """An MLS language dir (train split); ``ext`` flac or opus (the opus release)."""
    d = root / name
    meta, lines, segs = [MLS_META_HEAD], [], []
    for s, (spk, g) in enumerate(speakers.items()):
        book = str(4000 + s)
        meta.append(f"   {spk}    |     {g}      |   train    |   0.10     |    {book}    | Contes | du lundi | 1\n")
        for k in range(utts):
            uid = f"{spk}_{book}_{k:06d}"
            x = _tone(1.6 + 0.2 * (k % 3), 16000, (215.0 if g == "F" else 112.0) + 5 * s, seed=int(spk) + k)
            kw = {"format": "OGG", "subtype": "OPUS"} if ext == "opus" else {"format": "FLAC"}
            _write(d / "train" / "audio" / spk / book / f"{uid}.{ext}", x, 16000, **kw)
            lines.append(f"{uid}\t{_sentence(k + s)}")
            segs.append(f"{uid}\thttp://www.archive.org/download/b{book}/{book}.mp3\t1.0\t2.8")
    (d / "metainfo.txt").write_text("".join(meta), encoding="utf-8")
    (d / "train" / "transcripts.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (d / "train" / "segments.txt").write_text("\n".join(segs) + "\n", encoding="utf-8")
    return d


CV_OLD_HEADER = "client_id\tpath\tsentence\tup_votes\tdown_votes\tage\tgender\taccent\tlocale\tsegment"
CV_NEW_HEADER = ("client_id\tpath\tsentence_id\tsentence\tsentence_domain\tup_votes\tdown_votes\tage\tgender"
                 "\taccents\tvariant\tlocale\tsegment")


def write_commonvoice(root: Path, release: str, new_header: bool, speakers: dict[str, str], clips: int = 5,
                      rate_32k: tuple[int, ...] = ()) -> Path:
    """A Common Voice locale dir with train.tsv and 48 kHz mp3 clips (``rate_32k``: indices of
    clips recorded at 32 kHz, as some are)."""
    d = root / release / "fr"
    rows, n = [CV_NEW_HEADER if new_header else CV_OLD_HEADER], 0
    spelled = {"F": "female_feminine", "M": "male_masculine"} if new_header else {"F": "female", "M": "male"}
    for s, (cid, g) in enumerate(speakers.items()):
        for k in range(clips):
            sr = 32000 if n in rate_32k else 48000
            path = f"common_voice_fr_{release[10:14].replace('.', '')}{n:05d}.mp3"
            x = _tone(1.5 + 0.25 * (k % 2), sr, (220.0 if g == "F" else 108.0) + 4 * s, seed=1000 + n)
            _write(d / "clips" / path, x, sr, format="MP3")
            sentence = _sentence(n)
            if new_header:
                rows.append(f"{cid}\t{path}\tsid{n}\t{sentence}\t\t2\t0\tthirties\t{spelled[g]}\t\t\tfr\t")
            else:
                rows.append(f"{cid}\t{path}\t{sentence}\t2\t0\tthirties\t{spelled[g]}\t\tfr\t")
            n += 1
    (d / "train.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return d


def write_lebenchmark(root: Path, speakers: dict[str, str], utts: int = 5) -> Path:
    """LeBenchmark's JSON for one corpus: {utt: {path, trans, duration, spk_id, spk_gender}}."""
    d = root / "lebenchmark" / "epac_like"
    data = {}
    for s, (spk, g) in enumerate(speakers.items()):
        for k in range(utts):
            uid = f"{spk}_{k}"
            secs = 1.7 + 0.1 * k
            _write(d / "wavs" / f"{uid}.wav", _tone(secs, 16000, (210.0 if g == "F" else 118.0) + 6 * s,
                                                       seed=2000 + 10 * s + k), 16000)
            data[uid] = {"path": f"/wavs/{uid}.wav", "trans": _sentence(k + 2 * s), "duration": f"{secs:.1f}",
                         "spk_id": spk, "spk_gender": g}
    (d / "data.json").write_text(json.dumps(data, indent=4, ensure_ascii=False), encoding="utf-8")
    return d / "data.json"


def write_paper_corpora(root: Path) -> dict[str, Path]:
    """Every corpus of the study, in miniature; returns the paths the walkthrough passes."""
    root.mkdir(parents=True, exist_ok=True)
    mtedx, genders = write_mtedx(root)
    return {
        "mtedx": mtedx, "mtedx_genders": genders,
        "mls": write_mls(root, "mls_french", {"1840": "F", "2506": "M"}, "flac"),
        "mls_opus": write_mls(root, "mls_french_opus", {"3001": "F", "3302": "M"}, "opus"),
        "cv_old": write_commonvoice(root, "cv-corpus-5.1-2020-06-22", False, {"c01": "F", "c02": "M"}),
        "cv_new": write_commonvoice(root, "cv-corpus-17.0-2024-03-15", True, {"c11": "F", "c12": "M", "c13": "F"},
                                    rate_32k=(3, 8)),
        "lebenchmark": write_lebenchmark(root, {"epf1": "F", "epm1": "M", "epm2": "M"}),
    }
