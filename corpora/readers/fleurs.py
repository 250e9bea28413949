"""FLEURS (read Wikipedia sentences, 102 languages), one language folder of the google/fleurs
repository on Hugging Face as downloaded::

    fleurs/data/fr_fr/
      train.tsv dev.tsv test.tsv
      audio/train/10004088536354799741.wav     (audio/train.tar.gz extracted: tar -xzf ... -C audio/)

The TSVs have no header and 7 tab-separated columns: sentence id, file name, raw transcription,
normalised transcription, characters (space-separated, ``|`` between words), number of samples,
gender (MALE, FEMALE, OTHER; OTHER is U). The sentence id is shared by every reading of one
sentence (kept in ``sentence_id``); the file name is the utterance id. ``text`` is the raw
transcription, ``text_normalised`` the normalised one. The number of samples is checked against
the audio header; a mismatch is counted in one warning line (the header's duration is used).

FLEURS releases no speaker ids. Each recording is taken as its own speaker (``speaker`` = the
file stem, ``speaker_source`` = recording) and one warning line says so: the speaker-resampled
confidence intervals then treat every recording as an independent speaker, while each speaker
read several sentences, so they are too narrow; and a speaker-disjoint selection inside one FLEURS
split is disjoint by recording only. Grouping recordings by any other column (the sentence id
groups different readers of one sentence) would be a guess presented as a fact.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from corpora.readers.common import AudioCheck, finish_table, task_split

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
FIELDS = ("sentence id", "file name", "raw transcription", "transcription", "characters", "samples", "gender")
ROOT_FIX = ("--root is one language folder of the google/fleurs dataset, e.g. fleurs/data/fr_fr (hf download "
            "google/fleurs --repo-type dataset --include 'data/fr_fr/*' --local-dir fleurs)")


def read_fleurs(root, *, splits: list[str] | None = None, lang: str | None = None,
                check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of one FLEURS language folder (train/dev/test found there by default)."""
    root = Path(root)
    present = [s for s in SPLITS if (root / f"{s}.tsv").is_file()]
    if not present:
        raise UserError("no train.tsv, dev.tsv or test.tsv here", path=root, fix=ROOT_FIX)
    lang = lang or root.name.split("_")[0]
    rows: list[dict] = []
    samples: dict[str, tuple[int, str]] = {}   # id -> (the TSV's sample count, file:line)
    for split in (list(splits) if splits else present):
        tsv = root / f"{split}.tsv"
        if not tsv.is_file():
            raise UserError(f"split {split!r} not found", path=tsv, fix="--split names a TSV of the folder: "
                            + ", ".join(present))
        audio_dir = _audio_dir(root, split)
        for line, text in enumerate(read_lines(tsv, "FLEURS TSV"), start=1):
            if text.strip():
                row = _row(text, tsv, line, audio_dir, lang=lang, split=split)
                samples[row["id"]] = (row.pop("_samples"), f"{tsv}:{line}")
                rows.append(row)
    df = finish_table(rows, source=root, check=check)
    # said once the table stands, so a refused index prints its one error line only
    log.warning("%s: FLEURS releases no speaker ids: each recording is its own speaker (speaker = file "
                "stem, speaker_source=recording), so speaker-resampled CIs treat recordings as speakers and "
                "are too narrow", root)
    note = _sample_count_note(df, samples, root)
    if note:
        log.warning("%s", note)
    return df


def _audio_dir(root: Path, split: str) -> Path:
    audio = root / "audio" / split
    if not audio.is_dir():
        packed = root / "audio" / f"{split}.tar.gz"
        if packed.is_file():
            raise UserError(f"the {split} audio is still packed", path=packed,
                            fix=f"extract it first: tar -xzf {packed} -C {root / 'audio'}")
        raise UserError(f"no audio/{split}/ folder", path=root, fix=ROOT_FIX)
    return audio


def _row(text: str, tsv: Path, line: int, audio_dir: Path, *, lang: str, split: str) -> dict:
    fields = text.split("\t")
    where = dict(path=tsv, line=line)
    if len(fields) != len(FIELDS):
        raise UserError(f"{len(fields)} tab-separated fields, expected {len(FIELDS)} ({', '.join(FIELDS)})",
                        fix="restore the TSV as released (no header, one recording per line)", **where)
    sentence_id, name, raw, normalised, _chars, samples, gender = (f.strip() for f in fields)
    if not name:
        raise UserError("empty file name", fix="restore the TSV as released", **where)
    if not samples.isdigit():
        raise UserError(f"number of samples {samples!r} is not a whole number", fix="restore the TSV as released",
                        **where)
    stem = Path(name).stem
    return dict(id=stem, audio=str(audio_dir / name), offset=0.0, duration=None, speaker=stem,
                speaker_source="recording", gender_raw=gender, corpus="fleurs", lang=lang, split=task_split(split),
                text=raw, text_normalised=normalised, sentence_id=sentence_id, style="read",
                _samples=int(samples), _src=tsv, _line=line)


def _sample_count_note(df: pd.DataFrame, samples: dict[str, tuple[int, str]], root: Path) -> str | None:
    """One line counting the rows whose TSV sample count differs from the header's frames."""
    frames = (df["duration"] * df["sample_rate"]).round().astype(int)
    off = [(uid, n, samples[uid]) for uid, n in zip(df["id"], frames) if samples[uid][0] != n]
    if not off:
        return None
    uid, n, (listed, where) = off[0]
    return (f"{root}: {len(off)} row(s) whose number of samples differs from the audio header (first: {where}: "
            f"{listed} listed, {n} in {uid}'s header); durations are the header's")
