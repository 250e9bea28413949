"""LeBenchmark-style JSON (the format of LeBenchmark's data_preprocessing scripts)::

    {"<segment id>": {"path": "wavs/x_0.wav", "trans": "...", "duration": 3.2,
                      "spk_id": "spk1", "spk_gender": "F"}, ...}

``root`` is the JSON file, or a directory whose ``*.json`` files are all read (one per
sub-corpus: Att-HACK, CaFE, ESLO2, ...). The corpus column is the file's stem, or the folder
holding it when the file is ``data.json``/``train.json``/...; when that folder is itself a
split (MLS's writer puts ``mls_french/train/train.json``), the corpus is the folder above and
the split column gets the split's name.

Empty ``spk_id``: LeBenchmark's African Accented French and VoxPopuli writers record no speaker
at all (``"spk_id": ""`` on every entry). For such a file each recording is its own speaker
(speaker = the entry's id), as the usual stand-in; a warning says so and counts the rows,
since speaker-level confidence intervals then resample recordings, not people. A file where
only *some* entries lack a spk_id is a hole in the metadata, and stays an error.

Quirks handled: ``duration`` is sometimes a string and is ignored anyway (headers rule);
``spk_gender`` is ``M``/``F``/``U``; some scripts wrote ``path`` as ``/wavs/x.wav`` after
stripping the ``.`` of ``./wavs/x.wav``: a rooted path that does not exist is retried
relative to the JSON's directory; relative paths are relative to the JSON's directory.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from corpora.base.boundary import parse_json
from corpora.base.errors import UserError
from corpora.base.textfile import read_utf8
from corpora.readers.common import AudioCheck, finish_table

log = logging.getLogger(__name__)

REQUIRED = ("path", "spk_id")


def _resolve(base: Path, p: str) -> Path:
    path = Path(p)
    if path.is_absolute():
        if path.exists():
            return path
        return base / str(p).lstrip("/")
    return base / path


_GENERIC_STEMS = ("data", "train", "dev", "test", "valid")
_SPLIT_DIRS = ("train", "dev", "test", "valid", "validation")


def _corpus_and_split(path: Path) -> tuple[str, str]:
    """(corpus, split) from where the JSON lies. LeBenchmark's scripts write <corpus>/data.json
    (the folder names the corpus) and, for MLS, <corpus>/<split>/<name>.json (the folder is the
    split, the one above it the corpus)."""
    parent = path.parent
    if parent.name.lower() in _SPLIT_DIRS:
        return parent.parent.name, parent.name
    return (parent.name if path.stem.lower() in _GENERIC_STEMS else path.stem), ""


def _rows_of(path: Path, lang: str, corpus: str | None, notes: list[str]) -> list[dict]:
    text = read_utf8(path)
    data = parse_json(text, "LeBenchmark JSON", path=path, fix="check the file")
    if not isinstance(data, dict):
        raise UserError("expected a JSON object {segment id: {path, trans, duration, spk_id, spk_gender}}",
                        path=path, line=1, fix="use LeBenchmark's per-corpus JSON format")
    rows = []
    corpus_of_dir, split = _corpus_and_split(path)
    no_speaker = all(isinstance(rec, dict) and "spk_id" in rec and not str(rec["spk_id"] or "").strip()
                     for rec in data.values())
    cursor, line = 0, 1
    for uid, rec in data.items():
        # The line of each entry, for error messages: keys appear in file order, so one
        # forward scan finds them all.
        at = text.find(json.dumps(uid, ensure_ascii=False), cursor)
        if at >= 0:
            line += text.count("\n", cursor, at)
            cursor = at
        if not isinstance(rec, dict) or any(k not in rec for k in REQUIRED):
            raise UserError(f"entry {uid!r} lacks "
                            f"{'/'.join(k for k in REQUIRED if not isinstance(rec, dict) or k not in rec)}",
                            path=path, line=line, fix="each entry needs path, trans, spk_id, spk_gender")
        speaker = str(uid) if no_speaker else str(rec["spk_id"] or "")
        rows.append(dict(id=str(uid), audio=str(_resolve(path.parent, str(rec["path"]))), offset=0.0, duration=None,
                         speaker=speaker, gender_raw=str(rec.get("spk_gender", "") or ""),
                         corpus=corpus or corpus_of_dir, lang=lang, split=split, text=str(rec.get("trans", "") or ""),
                         _src=path, _line=line))
    if no_speaker and rows:
        notes.append(f"{path}: no entry has a spk_id (as LeBenchmark's African Accented French / VoxPopuli "
                     f"writers leave it): each of the {len(rows)} recordings is its own speaker (speaker = entry id)")
    return rows


def read_lebenchmark(root, *, lang: str = "fr", corpus: str | None = None,
                     check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of one LeBenchmark JSON file or a directory of them."""
    root = Path(root)
    files = [root] if root.is_file() else sorted(root.glob("*.json"))
    if not files:
        raise UserError("no JSON file here", path=root, fix="--root is a LeBenchmark JSON file or a directory of them")
    rows, notes = [], []
    for f in files:
        rows.extend(_rows_of(f, lang, corpus, notes))
    df = finish_table(rows, source=root, check=check)
    for note in notes:  # said once the table stands, so a refused index prints its one error line only
        log.warning("%s", note)
    return df
