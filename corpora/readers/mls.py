"""Multilingual LibriSpeech (MLS, openslr.org/94), one language directory as distributed::

    mls_french/
      metainfo.txt                 SPEAKER | GENDER | PARTITION | MINUTES | BOOK ID | TITLE | CHAPTER
      train/transcripts.txt        <spk>_<book>_<seg><TAB>text
      train/segments.txt           <spk>_<book>_<seg><TAB>librivox url<TAB>start<TAB>end
      train/audio/<spk>/<book>/<spk>_<book>_<seg>.flac   (.opus in the mls_*_opus release)
      dev/ ...  test/ ...

Each audio file is already one segment, so offset is 0 and the duration comes from the file's
header; ``segments.txt`` places the segment in the original LibriVox recording and is kept
as ``source_url`` / ``source_start`` / ``source_end``.

Quirks handled: metainfo.txt pads every field with spaces and has a header line; a title can
contain ``|`` (the first five and the last field are fixed, the title is the rest); a
speaker listed with two different genders gets U (warned, raw label ``F/M``); a speaker
missing from metainfo.txt gets U (warned).
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import MAX_LABEL_BYTES, read_lines
from corpora.readers.common import AudioCheck, finish_table, require_file, task_split

log = logging.getLogger(__name__)

MLS_LANGS = {"english": "en", "german": "de", "dutch": "nl", "french": "fr", "spanish": "es",
             "italian": "it", "portuguese": "pt", "polish": "pl"}
SPLITS = ("train", "dev", "test")


def _lang_from_dir(root: Path) -> str | None:
    parts = root.name.lower().split("_")
    return MLS_LANGS.get(parts[1]) if len(parts) > 1 and parts[0] == "mls" else None


def read_metainfo(path: Path) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """({speaker: raw gender}, {(speaker, book): title}) from an MLS metainfo.txt."""
    genders: dict[str, set[str]] = {}
    titles: dict[tuple[str, str], str] = {}
    for i, line in enumerate(read_lines(path, "metainfo.txt", max_bytes=MAX_LABEL_BYTES), start=1):
        if not line.strip():
            continue
        raw_fields = line.split("|")
        fields = [f.strip() for f in raw_fields]
        if fields[0].upper() == "SPEAKER":
            continue
        if len(fields) < 7:
            raise UserError(f"{len(fields)} `|`-separated fields, expected 7", path=path, line=i,
                            fix="SPEAKER | GENDER | PARTITION | MINUTES | BOOK ID | TITLE | CHAPTER")
        spk, gender, book = fields[0], fields[1], fields[4]
        genders.setdefault(spk, set()).add(gender)
        titles[(spk, book)] = "|".join(raw_fields[5:-1]).strip()
    out = {}
    for spk, labels in genders.items():
        if len(labels) > 1:
            log.warning("%s: speaker %s is listed as %s; mapped to U", path, spk, " and ".join(sorted(labels)))
        out[spk] = "/".join(sorted(labels))
    return out, titles


def read_mls(root, *, splits: list[str] | None = None, lang: str | None = None,
             check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of one MLS language directory (e.g. ``mls_french``), all splits found
    or the ones named. ``lang`` defaults to the language in the directory name."""
    root = Path(root)
    meta = require_file(root / "metainfo.txt", "MLS metainfo.txt",
                        "--root must be one MLS language directory such as mls_french/")
    lang = lang or _lang_from_dir(root)
    if not lang:
        raise UserError(f"cannot tell the language from the directory name {root.name!r}", path=root,
                        fix="pass --lang (e.g. --lang fr)")
    genders, titles = read_metainfo(meta)
    splits = list(splits) if splits else [s for s in SPLITS if (root / s).is_dir()]
    rows: list[dict] = []
    missing_spk: set[str] = set()
    for split in splits:
        trans = require_file(root / split / "transcripts.txt", f"MLS {split} transcripts",
                             f"the {split}/ directory needs transcripts.txt (or leave {split} out of --split)")
        seg_file = root / split / "segments.txt"
        sources: dict[str, tuple[str, str, str]] = {}
        if seg_file.is_file():
            for i, line in enumerate(read_lines(seg_file), start=1):
                f = line.split("\t")
                if len(f) == 4:
                    sources[f[0]] = (f[1], f[2], f[3])
                elif line.strip():
                    raise UserError("expected 4 tab-separated fields", path=seg_file, line=i,
                                    fix="id<TAB>url<TAB>start<TAB>end")
        audio_dir = root / split / "audio"
        for i, line in enumerate(read_lines(trans), start=1):
            if not line.strip():
                continue
            utt, sep, text = line.partition("\t")
            parts = utt.split("_")
            if not sep or len(parts) != 3:
                raise UserError("expected `<speaker>_<book>_<segment><TAB>text`", path=trans, line=i,
                                fix="MLS transcripts have one tab-separated id and text per line")
            spk, book, _seg = parts
            audio = audio_dir / spk / book / f"{utt}.flac"
            if not audio.exists() and audio.with_suffix(".opus").exists():
                audio = audio.with_suffix(".opus")
            if spk not in genders:
                missing_spk.add(spk)
            src_url, src_start, src_end = sources.get(utt, ("", "", ""))
            rows.append(dict(id=utt, audio=str(audio), offset=0.0, duration=None, speaker=spk,
                             gender_raw=genders.get(spk, ""), corpus="mls", lang=lang, split=task_split(split),
                             text=text, style="read", book=book, title=titles.get((spk, book), ""),
                             source_url=src_url, source_start=src_start, source_end=src_end,
                             _src=trans, _line=i, _gender_src=meta))
    if missing_spk:
        log.warning("%s: %d speaker(s) not listed (e.g. %s); their gender is U", meta, len(missing_spk),
                    sorted(missing_spk)[0])
    return finish_table(rows, source=root, check=check)
