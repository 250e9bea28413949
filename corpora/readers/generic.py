"""Any CSV/TSV with one row per utterance and a column mapping, e.g.::

    --map id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur

Keys: ``audio`` and ``speaker`` are required; ``id`` (default: the audio file's stem, with
``_<row>`` appended when a file holds several segments), ``gender``, ``text``, ``offset``,
``duration`` or ``end`` (seconds; without them the row spans the whole file), ``split``,
``lang``, ``corpus``, ``style`` and ``tgt_text_<lang>`` are optional. Unmapped columns are kept
as extra columns (``orig_<name>`` when the name clashes with a table column). ``.csv`` is
comma-separated with standard quoting (an unbalanced quote is an error naming the line where
it opens, see ``corpora.base.textfile``); ``.tsv``/``.txt`` are tab-separated, no quoting.
Relative audio paths are relative to the file's directory (or ``audio_root``).

Files with no path column (VoxPopuli's ``asr_train.tsv``: id, raw_text, normalized_text,
speaker_id, split, gender, ...; audio in ``<year>/<id>.ogg``) name the audio through a
``path_template`` instead of ``audio=``: ``{root}`` is the file's directory (or ``audio_root``),
``{COLUMN}`` a column's value and ``{COLUMN[a:b]}`` a slice of it, e.g.
``--path-template "{root}/{id[:4]}/{id}.ogg"`` (the year is the id's first four characters).
"""
from __future__ import annotations

import csv
import re
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from corpora.readers.common import AudioCheck, finish_table, resolve_under
from corpora.table import COLUMNS

KEYS = ("id", "audio", "speaker", "gender", "text", "offset", "duration", "end", "split", "lang", "corpus", "style")
MAP_FIX = ("write --map KEY=COLUMN,... e.g. --map audio=path,speaker=client,gender=sex (keys: " + ", ".join(KEYS)
           + ", tgt_text_<lang>)")


def parse_mapping(spec: str | dict | None) -> dict[str, str]:
    """``"id=utt_id,audio=path"`` -> ``{"id": "utt_id", "audio": "path"}`` (table key -> file column)."""
    if isinstance(spec, dict):
        return dict(spec)
    out: dict[str, str] = {}
    for item in (spec or "").split(","):
        if not item.strip():
            continue
        key, eq, col = item.partition("=")
        key, col = key.strip(), col.strip()
        if not eq or not col or not key:
            raise UserError(f"bad --map item {item!r}", fix=MAP_FIX)
        if key not in KEYS and not key.startswith("tgt_text_"):
            raise UserError(f"unknown --map key {key!r}", fix=MAP_FIX)
        out[key] = col
    return out


_PLACEHOLDER = re.compile(r"\{([^{}\[\]]+)(?:\[(-?\d*):(-?\d*)\])?\}")
TEMPLATE_FIX = 'e.g. --path-template "{root}/{id[:4]}/{id}.ogg": {root} and {COLUMN} or {COLUMN[a:b]}'


def check_template(template: str, header: list[str], path: Path) -> None:
    names = [m.group(1) for m in _PLACEHOLDER.finditer(template)]
    if not names:
        raise UserError(f"--path-template {template!r} has no {{placeholder}}", path=path, fix=TEMPLATE_FIX)
    unknown = [n for n in names if n != "root" and n not in header]
    if unknown:
        raise UserError(f"--path-template names {', '.join(repr(n) for n in unknown)}, not a column "
                        f"({', '.join(header)})", path=path, line=1, fix=TEMPLATE_FIX)


def fill_template(template: str, rec: dict, root: Path) -> str:
    """The template with each {name} / {name[a:b]} replaced by the row's value (or root)."""
    def value(m: re.Match) -> str:
        v = str(root) if m.group(1) == "root" else rec[m.group(1)].strip()
        if m.group(2) is None and m.group(3) is None:
            return v
        a, b = (int(x) if x else None for x in (m.group(2), m.group(3)))
        return v[a:b]
    return _PLACEHOLDER.sub(value, template)


def _number(rec: dict, col: str, path: Path, line: int) -> float:
    try:
        return float(rec[col])
    except ValueError:
        raise UserError(f"column {col!r} is not a number: {rec[col]!r}", path=path, line=line,
                        fix="seconds as a decimal number") from None


def read_generic(root, *, mapping=None, audio_root=None, corpus: str | None = None, lang: str = "",
                 split: str = "", path_template: str | None = None,
                 check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of a CSV/TSV file (``root``) through a column mapping (and, for files
    with no path column, an id-to-path ``path_template``)."""
    path = Path(root)
    if not path.is_file():
        raise UserError("no such CSV/TSV file", path=path, fix="--root is the metadata file for --kind generic")
    m = parse_mapping(mapping)
    if path_template and "audio" in m:
        raise UserError("both --map audio=... and --path-template given", path=path, fix="give one of them")
    for key in ("speaker",) if path_template else ("audio", "speaker"):
        if key not in m:
            raise UserError(f"--map needs {key}=COLUMN" + (" (or --path-template)" if key == "audio" else ""),
                            path=path, fix=MAP_FIX)
    if "duration" in m and "end" in m:
        raise UserError("--map gives both duration and end", path=path, fix="map one of them")
    comma = path.suffix.lower() == ".csv"
    header, recs = read_delimited(path, "," if comma else "\t", csv.QUOTE_MINIMAL if comma else csv.QUOTE_NONE)
    missing = [c for c in m.values() if c not in header]
    if missing:
        raise UserError(f"column(s) {', '.join(repr(c) for c in missing)} not in the header "
                        f"({', '.join(header)})", path=path, line=1, fix=MAP_FIX)
    base = Path(audio_root) if audio_root else path.parent
    if path_template:
        check_template(path_template, header, path)
    mapped = set(m.values())
    extra = {c: (f"orig_{c}" if c in COLUMNS or c == "gender_raw" or c in m else c) for c in header if c not in mapped}
    rows = []
    seen_audio: dict[str, int] = {}
    for line, rec in recs:
        name = fill_template(path_template, rec, base) if path_template else rec[m["audio"]].strip()
        audio = str(resolve_under(base, name))
        offset = _number(rec, m["offset"], path, line) if "offset" in m else 0.0
        duration = None
        if "duration" in m:
            duration = _number(rec, m["duration"], path, line)
        elif "end" in m:
            duration = _number(rec, m["end"], path, line) - offset
        if "id" in m:
            uid = rec[m["id"]]
        else:
            n = seen_audio.get(audio, 0)
            seen_audio[audio] = n + 1
            uid = Path(audio).stem + (f"_{n}" if n or "offset" in m else "")
        row = dict(id=uid, audio=audio, offset=offset, duration=duration, speaker=rec[m["speaker"]],
                   gender_raw=rec[m["gender"]] if "gender" in m else "",
                   corpus=rec[m["corpus"]] if "corpus" in m else (corpus or path.stem),
                   lang=rec[m["lang"]] if "lang" in m else lang, split=rec[m["split"]] if "split" in m else split,
                   text=rec[m["text"]] if "text" in m else "", _src=path, _line=line)
        if "style" in m:
            row["style"] = rec[m["style"]]
        for key, col in m.items():
            if key.startswith("tgt_text_"):
                row[key] = rec[col]
        for col, name in extra.items():
            row[name] = rec[col]
        rows.append(row)
    return finish_table(rows, source=path, check=check)
