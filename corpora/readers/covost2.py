"""CoVoST 2 (speech translation on Common Voice), as released: a translation TSV per language pair,
whose audio and speakers are those of a Common Voice release::

    covost_tsv/covost_v2.fr_en.tsv            (extracted from covost_v2.fr_en.tsv.tar.gz)
    cv-corpus-4-2019-12-10/fr/validated.tsv   clips/common_voice_fr_17299384.mp3

The TSV (tab-separated, header first) has ``path, sentence, translation, [client_id,] split``.
``split`` is train, dev or test, or ``train_covost``: extra training rows, read as train (fairseq's
prep_covost_data.py takes ``train`` and ``train_covost`` for its train set). It is written with
quoting off and ``\\`` as escape character (fairseq reads it so): ``\\"`` is a quote, and raw
quotes occur too. A tab escaped as ``\\<TAB>`` (none in the releases) would shift the row's
fields and is refused at its line.

Rows are joined to the Common Voice locale directory (``cv_root``) on ``path``, an inner join as
fairseq's, so the table holds the clips that are in both: the speaker is validated.tsv's
``client_id`` and the gender is resolved per client_id over every validated.tsv row of that
speaker (a contributor fills in a profile once, so the label may sit on a clip CoVoST did not
translate; conflicting labels give U; see resolve_speaker_genders). ``text`` is CoVoST's
sentence (validated.tsv's where CoVoST has none), ``tgt_text_<tgt>`` its translation, ``split``
the task's name (dev -> valid) and ``covost_split`` the value as released. A CoVoST row whose
path is not in validated.tsv (the wrong Common Voice release?) is skipped and counted in one
warning line; ``--strict`` makes it an error. validated.tsv (~700k rows for French) is parsed as
text only: audio headers are read for the joined rows alone. Clips are mp3 (48 kHz): every rate
is accepted by default, as for Common Voice.
"""
from __future__ import annotations

import logging
import re
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from corpora.readers.common import AudioCheck, Tally, finish_table, resolve_speaker_genders, task_split
from corpora.readers.commonvoice import EXTRA_COLUMNS, ClipFinder

log = logging.getLogger(__name__)

TSV_NAME = re.compile(r"^covost_v2\.([^._]+)_([^._]+)\.tsv$")   # covost_v2.fr_en.tsv, covost_v2.zh-CN_en.tsv
# CoVoST's split values -> the release split they belong to
RELEASE_SPLIT = {"train": "train", "train_covost": "train", "dev": "dev", "test": "test"}
_ESCAPED = re.compile(r"\\(.)", re.DOTALL)
NOT_IN_CV = "row(s) skipped: clip not in validated.tsv"
CV_FIX = ("--cv-root is the Common Voice locale dir CoVoST 2 was built on, e.g. cv-corpus-4-2019-12-10/fr "
          "(validated.tsv, clips/)")


def read_covost2(root, *, cv_root=None, tgt_lang: str | None = None, splits: list[str] | None = None,
                 lang: str | None = None, check: AudioCheck = AudioCheck(sample_rates=None)) -> pd.DataFrame:
    """Utterance table of one CoVoST 2 pair. ``root``: the folder holding covost_v2.<src>_<tgt>.tsv, or
    the file; ``tgt_lang`` / ``lang`` pick the file when the folder holds several. ``splits``: release
    names (train -- with train_covost --, dev, test, or train_covost alone); default all."""
    if cv_root is None:
        raise UserError("--kind covost2 needs --cv-root", path=root, fix=CV_FIX)
    tsv, src, tgt = find_covost_tsv(Path(root), tgt_lang=tgt_lang, lang=lang)
    cv = Path(cv_root)
    validated = cv / "validated.tsv"
    if not (cv / "clips").is_dir() or not validated.is_file():
        raise UserError("no validated.tsv and clips/ here", path=cv, fix=CV_FIX)
    wanted = _wanted(splits)
    by_path, evidence, gcol = _read_validated(validated)
    tally = Tally()
    rows = _joined_rows(tsv, by_path, gcol, ClipFinder(cv / "clips"), wanted=wanted, lang=lang or src, tgt=tgt,
                        validated=validated, strict=check.strict, tally=tally)
    note = resolve_speaker_genders(rows, validated, evidence=evidence)
    df = finish_table(rows, source=tsv, check=check, skip_empty_audio=True, tally=tally)
    if note:  # said once the table stands, so a refused index prints its one error line only
        log.warning("%s", note)
    return df


def find_covost_tsv(root: Path, *, tgt_lang: str | None, lang: str | None) -> tuple[Path, str, str]:
    """(the pair's TSV, source language, target language) for ``root``, a file or a folder."""
    if root.is_file():
        m = TSV_NAME.match(root.name)
        if m is None:
            if not lang:
                raise UserError("cannot tell the language pair from this file's name", path=root,
                                fix="name it covost_v2.<src>_<tgt>.tsv as released, or give --lang (and --tgt-lang)")
            return root, lang, tgt_lang or "en"
        if tgt_lang and tgt_lang != m.group(2):
            raise UserError(f"this file is {m.group(1)}->{m.group(2)}, --tgt-lang says {tgt_lang}", path=root,
                            fix="leave --tgt-lang out, or give that pair's file")
        return root, m.group(1), m.group(2)
    if not root.is_dir():
        raise UserError("CoVoST 2 TSV folder not found", path=root, fix="--root is the folder holding "
                        "covost_v2.<src>_<tgt>.tsv (or that file)")
    found = sorted((p for p in root.iterdir() if TSV_NAME.match(p.name) and p.is_file()), key=lambda p: p.name)
    if not found:
        packed = sorted(root.glob("covost_v2.*.tsv.tar.gz"))
        raise UserError("no covost_v2.<src>_<tgt>.tsv here", path=root,
                        fix=f"extract it first: tar -xzf {packed[0]} -C {root}" if packed else
                        "--root is the folder holding covost_v2.<src>_<tgt>.tsv (or that file)")
    picked = [p for p in found if (not tgt_lang or TSV_NAME.match(p.name).group(2) == tgt_lang)
              and (not lang or TSV_NAME.match(p.name).group(1) == lang)]
    names = ", ".join(p.name for p in (picked or found))
    if len(picked) != 1:
        raise UserError(f"{'several' if picked else 'none'} of the CoVoST 2 TSVs here "
                        f"{'match' if picked else 'matches'} (found: {names})", path=root,
                        fix="pick one with --tgt-lang (and --lang for the source), or give the file as --root")
    src, tgt = TSV_NAME.match(picked[0].name).groups()
    return picked[0], src, tgt


def _wanted(splits) -> set[str] | None:
    if not splits:
        return None
    unknown = [s for s in splits if s not in RELEASE_SPLIT]
    if unknown:
        raise UserError(f"no CoVoST 2 split {unknown[0]!r}", fix="--split takes train (with train_covost), dev, "
                        "test, or train_covost alone")
    return set(splits)


def _clip_key(path: str) -> str:
    """A Common Voice ``path`` as both files name it (the oldest releases omit the .mp3)."""
    name = path.strip()
    return name if not name or Path(name).suffix else name + ".mp3"


def _read_validated(path: Path) -> tuple[dict[str, tuple[int, dict]], list[tuple[str, str]], str | None]:
    """validated.tsv as text: {clip key: (line, record)}, every row's (client_id, gender) for the
    per-speaker resolution, and the gender column's name (None when the release has none)."""
    header, recs = read_delimited(path, "\t")
    missing = [c for c in ("client_id", "path", "sentence") if c not in header]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=path, line=1,
                        fix="expected Common Voice's validated.tsv (client_id, path, sentence, ..., gender, ...)")
    gcol = "gender" if "gender" in header else "sex" if "sex" in header else None
    by_path: dict[str, tuple[int, dict]] = {}
    for line, rec in recs:
        key = _clip_key(rec["path"])
        first = by_path.setdefault(key, (line, rec))
        if first[1] is not rec:
            raise UserError(f"clip {key!r} listed twice (first on line {first[0]})", path=path, line=line,
                            fix="restore validated.tsv as released")
    evidence = [(rec["client_id"], rec[gcol]) for _, rec in recs] if gcol else []
    return by_path, evidence, gcol


def _unescape(value: str) -> str:
    return _ESCAPED.sub(r"\1", value) if "\\" in value else value


def _joined_rows(tsv: Path, by_path: dict, gcol: str | None, finder: ClipFinder, *, wanted: set[str] | None,
                 lang: str, tgt: str, validated: Path, strict: bool, tally: Tally) -> list[dict]:
    """The table's rows: the CoVoST rows of the wanted splits whose clip is in validated.tsv."""
    header, recs = read_delimited(tsv, "\t")
    missing = [c for c in ("path", "translation", "split") if c not in header]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=tsv, line=1,
                        fix="expected the CoVoST 2 release TSV covost_v2.<src>_<tgt>.tsv (path, sentence, "
                            "translation, split)")
    rows: list[dict] = []
    for line, raw in recs:
        rec = {k: _unescape(v) for k, v in raw.items()}
        value = rec["split"].strip()
        release = RELEASE_SPLIT.get(value)
        if release is None or (wanted is not None and release not in wanted and value not in wanted):
            _unread_split(value, release, tsv, line, strict, tally)
            continue
        key = _clip_key(rec["path"])
        if not key:
            raise UserError("empty path", path=tsv, line=line, fix="every row names its Common Voice clip")
        if key not in by_path:
            if strict:
                raise UserError(f"clip {key!r} is not in {validated}", path=tsv, line=line,
                                fix=CV_FIX + "; or leave --strict out to skip such rows (fairseq's join drops them)")
            tally.note(NOT_IN_CV, f"{tsv}:{line}")
            continue
        v = by_path[key][1]
        uid, audio = finder.find(key, tsv, line)
        row = dict(id=uid, audio=str(audio), offset=0.0, duration=None, speaker=v["client_id"],
                   gender_raw=v[gcol] if gcol else "", corpus="covost2", lang=lang, split=task_split(release),
                   text=rec.get("sentence", "").strip() or v["sentence"], style="read", covost_split=value,
                   _src=tsv, _line=line, _gender_src=validated)
        row[f"tgt_text_{tgt}"] = rec["translation"]
        row.update({("accents" if c == "accent" else c): v[c] for c in EXTRA_COLUMNS if c in v})
        rows.append(row)
    skipped = tally.kinds.get(NOT_IN_CV, [0])[0]
    if skipped and not rows:   # every clip missing: the wrong release, not a few stray rows
        raise UserError(f"none of the {skipped} row(s) read has its clip in {validated}", path=tsv, fix=CV_FIX)
    return rows


def _unread_split(value: str, release: str | None, tsv: Path, line: int, strict: bool, tally: Tally) -> None:
    """A row left out: of a split not asked for (nothing to say), or of a split value CoVoST 2 does
    not use (counted, as fairseq's prep reads only train, train_covost, dev and test)."""
    if release is not None:
        return
    if strict:
        raise UserError(f"split {value!r} is none of train, train_covost, dev, test", path=tsv, line=line,
                        fix="restore the TSV as released, or leave --strict out to skip such rows")
    tally.note("row(s) of another split value, not read", f"{tsv}:{line}")
