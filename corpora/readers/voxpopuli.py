"""VoxPopuli's transcribed speech (European Parliament), as ``python -m voxpopuli.get_asr_data
--root R --lang fr`` (facebookresearch/voxpopuli) writes it::

    R/transcribed_data/fr/
      asr_train.tsv asr_dev.tsv asr_test.tsv
      2018/20180313-0900-PLENARY-15-fr_20180313-20:36:03_3.ogg      (<id[:4]>/<id>.ogg)

TSV header: id, raw_text, normalized_text, speaker_id, split, gender (newer copies add
is_gold_transcript, accent), written with tab joins and no quoting: raw quotes occur in the text.
Audio is 16 kHz Ogg Vorbis; the file names hold colons. ``text`` is raw_text, ``text_normalised``
normalized_text; ``split`` is the file's (dev -> valid).

gender is ``male``, ``female`` or empty. It is resolved per speaker_id over the rows read (see
resolve_speaker_genders): an empty label takes the speaker's label from their other rows, and a
speaker with rows of both genders is U on every row; both are counted in one warning line.

``--root`` may be R, R/transcribed_data, or the language folder R/transcribed_data/fr; above the
language folder, ``--lang`` picks it when several languages are there.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from corpora.readers.common import AudioCheck, finish_table, resolve_speaker_genders, task_split

log = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
REQUIRED = ("id", "raw_text", "normalized_text", "speaker_id", "gender")
EXTRA_COLUMNS = ("is_gold_transcript", "accent")
ROOT_FIX = ("--root is the folder `python -m voxpopuli.get_asr_data --root R --lang L` wrote: R, "
            "R/transcribed_data or R/transcribed_data/L (asr_train.tsv, asr_dev.tsv, asr_test.tsv, <year>/<id>.ogg)")


def read_voxpopuli(root, *, splits: list[str] | None = None, lang: str | None = None,
                   check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of one VoxPopuli language (asr_train/dev/test.tsv found there by default)."""
    folder = language_folder(Path(root), lang)
    lang = lang or folder.name
    present = [s for s in SPLITS if (folder / f"asr_{s}.tsv").is_file()]
    rows: list[dict] = []
    for split in (list(splits) if splits else present):
        tsv = folder / f"asr_{split}.tsv"
        if not tsv.is_file():
            raise UserError(f"split {split!r} not found", path=tsv, fix="--split names an asr_<split>.tsv of "
                            "the folder: " + ", ".join(present))
        rows += _rows(tsv, folder, lang=lang, split=split)
    note = resolve_speaker_genders(rows, folder, speaker_name="speaker_id")
    df = finish_table(rows, source=folder, check=check)
    if note:  # said once the table stands, so a refused index prints its one error line only
        log.warning("%s", note)
    return df


def _has_tsv(folder: Path) -> bool:
    return any((folder / f"asr_{s}.tsv").is_file() for s in SPLITS)


def language_folder(root: Path, lang: str | None) -> Path:
    """The folder holding asr_<split>.tsv: ``root`` itself, or its (transcribed_data/) language folder."""
    if _has_tsv(root):
        return root
    base = root / "transcribed_data" if (root / "transcribed_data").is_dir() else root
    if not base.is_dir():
        raise UserError("VoxPopuli folder not found", path=root, fix=ROOT_FIX)
    langs = sorted(d.name for d in base.iterdir() if d.is_dir() and _has_tsv(d))
    if lang:
        if lang not in langs:
            raise UserError(f"no {lang}/asr_<split>.tsv here (languages found: {', '.join(langs) or 'none'})",
                            path=base, fix=ROOT_FIX)
        return base / lang
    if len(langs) != 1:
        raise UserError(f"{'several languages' if langs else 'no asr_<split>.tsv'} here"
                        + (f" ({', '.join(langs)})" if langs else ""), path=base,
                        fix="pick one with --lang" if langs else ROOT_FIX)
    return base / langs[0]


def _rows(tsv: Path, folder: Path, *, lang: str, split: str) -> list[dict]:
    header, recs = read_delimited(tsv, "\t")
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=tsv, line=1,
                        fix="expected VoxPopuli's asr TSV (id, raw_text, normalized_text, speaker_id, split, gender)")
    rows = []
    for line, rec in recs:
        uid = rec["id"].strip()
        # the audio lies in a folder named by the id's year: 20180313-0900-PLENARY-... -> 2018/
        row = dict(id=uid, audio=str(folder / uid[:4] / f"{uid}.ogg"), offset=0.0, duration=None,
                   speaker=rec["speaker_id"].strip(), gender_raw=rec["gender"], corpus="voxpopuli", lang=lang,
                   split=task_split(split), text=rec["raw_text"], text_normalised=rec["normalized_text"],
                   style="parliament", _src=tsv, _line=line)
        row.update({c: rec[c] for c in EXTRA_COLUMNS if c in rec})
        rows.append(row)
    return rows
