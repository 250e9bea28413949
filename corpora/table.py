"""The utterance table: one row per segment, the common currency of gendergap.

Columns (TSV, UTF-8, header line first):
    id, audio, offset, duration, sample_rate, speaker, gender, corpus, lang, split, text
then ``gender_raw`` (the label as the corpus spelled it), one ``tgt_text_<lang>`` column per
translation, and any free extra columns (``style``, ``category``, ...).

``audio`` is a path (absolute, or relative to the table's directory); ``offset`` and
``duration`` are seconds inside that file, so segments of long recordings are first-class.
``gender`` is always ``F``, ``M`` or ``U``. Durations come from audio headers, never decoding.
"""
from __future__ import annotations

import csv
import io
import logging
import os
from pathlib import Path

import pandas as pd

from corpora.base.atomic import atomic_open
from corpora.base.boundary import MAX_RATE, MIN_RATE, finite, rate
from corpora.base.errors import UserError, printable
from corpora.base.provenance import file_fingerprint
from corpora.base.textfile import read_utf8

log = logging.getLogger(__name__)

COLUMNS = ["id", "audio", "offset", "duration", "sample_rate", "speaker", "gender",
           "corpus", "lang", "split", "text"]
GENDERS = ("F", "M", "U")

# Spellings seen in corpus metadata (lower-cased, stripped). Common Voice changed its
# spelling in 2023 ("male" -> "male_masculine"); mTEDx / MuST-C speaker lists use words or
# letters; LeBenchmark JSON uses "female"/"male"; Kaldi spk2gender uses "f"/"m".
_GENDER_MAP = {
    "f": "F", "female": "F", "woman": "F", "women": "F", "w": "F", "femme": "F", "fem": "F",
    "feminine": "F", "female_feminine": "F", "féminin": "F", "she": "F",
    "m": "M", "male": "M", "man": "M", "men": "M", "h": "M", "homme": "M", "masc": "M",
    "masculine": "M", "male_masculine": "M", "masculin": "M", "he": "M",
    # Known labels that are not F/M: kept as U on purpose (the raw label stays in gender_raw).
    "": "U", "u": "U", "unknown": "U", "unk": "U", "na": "U", "n/a": "U", "nan": "U",
    "none": "U", "other": "U", "x": "U", "?": "U", "non-binary": "U", "nonbinary": "U",
    "intersex": "U", "transgender": "U", "do_not_wish_to_say": "U", "prefer not to say": "U",
    "mixed": "U",
    # MuST-Speakers' TED-PRONOUN: Multi-She / Multi-He (several speakers, all She / all He)
    # count as She / He, as FBK's own add-pronoun script does; They, Mix (mixed) and Na are U.
    "multi-she": "F", "multi-he": "M", "they": "U", "multi-they": "U", "mix": "U",
}


def parse_gender_map(spec: str | dict | None, source: str = "--gender-map") -> dict[str, str]:
    """``'Multi-Mix=U,Femme=F'`` (or a mapping, as a study config gives it) -> ``{'multi-mix': 'U',
    'femme': 'F'}``: labels (matched case-insensitively, spaces stripped) the user maps to F, M or U.
    They are looked up before the built-in spellings, so they can also re-map a known one."""
    if not spec:
        return {}
    items = spec.items() if isinstance(spec, dict) else (
        part.rsplit("=", 1) if "=" in part else (part, None) for part in str(spec).split(",") if part.strip())
    out = {}
    for label, code in items:
        code = str(code or "").strip().upper()
        if code not in GENDERS or not str(label).strip():
            raise UserError(f"{source}: bad entry {label!s}={code or ''}",
                            fix="LABEL=F, LABEL=M or LABEL=U, comma-separated, e.g. --gender-map 'Multi-Mix=U,Femme=F'")
        out[str(label).strip().lower()] = code
    return out


def normalise_gender(raw, mapping: dict[str, str] | None = None) -> tuple[str, bool]:
    """Map a corpus's gender label to F/M/U. Returns (code, known); unknown labels give U.
    ``mapping`` (from parse_gender_map) is the user's own labels, looked up first."""
    key = "" if raw is None or (isinstance(raw, float) and raw != raw) else str(raw).strip().lower()
    if mapping and key in mapping:
        return mapping[key], True
    if "/" in key and all(k in _GENDER_MAP for k in key.split("/")):
        return "U", True  # "F/M": a reader found conflicting labels for one speaker (and warned)
    code = _GENDER_MAP.get(key)
    return (code, True) if code is not None else ("U", False)


GENDER_MAP_FIX = ("if a label means F, M or U, map it: --gender-map 'LABEL=F,...' (corpus index) or "
                  "corpus.gender_map (study config)")


def normalise_genders(raw: pd.Series, source, mapping: dict[str, str] | None = None) -> pd.Series:
    """Vectorised normalise_gender. Unknown labels become U (never dropped) and are listed in ONE
    warning line, each with its count. ``source`` is a path, or a Series (aligned with ``raw``)
    naming the file each label came from."""
    pairs = raw.map(lambda r: normalise_gender(r, mapping))
    codes = pairs.map(lambda p: p[0])
    known = pairs.map(lambda p: p[1]).astype(bool)
    if not known.all():
        counts = raw[~known].value_counts()
        sources = (pd.Series(source, index=raw.index)[~known].astype(str).unique()
                   if isinstance(source, pd.Series) else [os.fspath(source)])
        labels = ", ".join(f"{label!r} on {n} row(s)" for label, n in counts.items())
        log.warning("%s: unknown gender label%s %s, mapped to U -- %s", ", ".join(sources),
                    "s" if len(counts) > 1 else "", labels, GENDER_MAP_FIX)
    return codes


def apply_gender_map(df: pd.DataFrame, mapping: dict[str, str] | None, source) -> pd.DataFrame:
    """``gender`` re-derived from ``gender_raw`` for the rows whose raw label ``mapping`` names
    (a study config's corpus.gender_map on a table indexed without it). Other rows keep theirs."""
    if not mapping or "gender_raw" not in df.columns:
        return df
    hit = df["gender_raw"].astype(str).str.strip().str.lower().isin(mapping)
    if hit.any():
        df = df.copy()
        df.loc[hit, "gender"] = df.loc[hit, "gender_raw"].astype(str).str.strip().str.lower().map(mapping)
        log.info("%s: gender map applied to %d row(s)", os.fspath(source), int(hit.sum()))
    return df


def new_table(rows: list[dict]) -> pd.DataFrame:
    """Build a table from row dicts, putting the standard columns first."""
    df = pd.DataFrame(rows)
    for col in COLUMNS:
        if col not in df.columns:
            df[col] = "" if col not in ("offset", "duration", "sample_rate") else 0
    extra = [c for c in df.columns if c not in COLUMNS]
    df = df[COLUMNS + extra]
    return _coerce_types(df)


MAX_COLUMNS = 2_000   # the standard columns, translations into many languages, raw labels


def _coerce_types(df: pd.DataFrame) -> pd.DataFrame:
    # one new frame built from its columns: assigning them one by one costs a copy of the frame's
    # blocks per column, quadratic in a wide table (100k columns took over 5 minutes)
    numeric = {"offset": float, "duration": float, "sample_rate": int}
    cols = {c: pd.to_numeric(df[c]).astype(numeric[c]) if c in numeric else df[c].fillna("").astype(str)
            for c in df.columns}
    return pd.DataFrame(cols, index=df.index)


def validate_table(df: pd.DataFrame, source: str | os.PathLike = "<table>") -> None:
    """Raise UserError on the first problem, naming the row's line in the TSV (header = line 1)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=source, line=1,
                        fix="an utterance table needs: " + ", ".join(COLUMNS))

    def fail(mask, what, fix):
        idx = int(mask.to_numpy().nonzero()[0][0])
        raise UserError(f"row id={df['id'].iloc[idx]!r}: {what}", path=source, line=idx + 2, fix=fix)

    empty_id = df["id"].astype(str).str.strip() == ""
    if empty_id.any():
        fail(empty_id, "empty id", "give every row a unique id")
    dup = df["id"].duplicated()
    if dup.any():
        fail(dup, "duplicate id", "ids must be unique; prefix them with the corpus or speaker")
    bad_g = ~df["gender"].isin(GENDERS)
    if bad_g.any():
        fail(bad_g, f"gender {df['gender'][bad_g].iloc[0]!r} is not F, M or U",
             "normalise with corpora.table.normalise_gender (the raw label goes in gender_raw)")
    for col in ("offset", "duration", "sample_rate"):
        num = pd.to_numeric(df[col], errors="coerce")
        if num.isna().any():
            fail(num.isna(), f"{col} is not a number", f"write {col} as a number")
    _check_seconds(df, source)
    if (pd.to_numeric(df["duration"]) <= 0).any():
        fail(pd.to_numeric(df["duration"]) <= 0, "duration <= 0", "drop empty segments")
    if (pd.to_numeric(df["offset"]) < 0).any():
        fail(pd.to_numeric(df["offset"]) < 0, "negative offset", "offsets are seconds >= 0")
    rates = pd.to_numeric(df["sample_rate"]).astype(float)
    bad_rate = ~rates.between(MIN_RATE, MAX_RATE) | (rates != rates.round())   # 1e20 wrapped round an int64
    if bad_rate.any():
        idx = int(bad_rate.to_numpy().nonzero()[0][0])
        rate(df["sample_rate"].iloc[idx], f"row id={df['id'].iloc[idx]!r}: sample_rate", path=source, line=idx + 2,
             fix="read it from the audio header")
    empty_spk = df["speaker"].astype(str).str.strip() == ""
    if empty_spk.any():
        fail(empty_spk, "empty speaker", "give every row a speaker id (gender CIs resample speakers)")
    bad_audio = df["audio"].astype(str).str.strip() == ""
    if bad_audio.any():
        fail(bad_audio, "empty audio path", "point audio at the recording file")


MAX_SECONDS = 1e6   # ~11.6 days: longer than any recording; 1e308 or inf would overflow sample counts


def _check_seconds(df: pd.DataFrame, source) -> None:
    """Offsets and durations are finite seconds (boundary.finite): an infinite or 1e308 duration
    becomes an overflowing sample count or a read of the whole disk further on."""
    for col in ("offset", "duration"):
        num = pd.to_numeric(df[col]).astype(float)
        bad = ~num.between(-MAX_SECONDS, MAX_SECONDS)   # NaN is not between anything
        if bad.any():
            idx = int(bad.to_numpy().nonzero()[0][0])
            finite(float(num.iloc[idx]), col, lo=-MAX_SECONDS, hi=MAX_SECONDS,
                   path=source, line=idx + 2)


def check_width(columns: int, path, *, writing: bool = False) -> None:
    """The one bound on a table's width, for its reader and its writers alike (a table `corpus merge`
    or `corpus index` wrote is always one read_table reads); ``writing``: said of the table not yet written."""
    if columns > MAX_COLUMNS:
        # every pandas operation on a table costs a little per column (each text column is its own
        # block): 100k columns made `manifest build` take two minutes
        raise UserError(f"the table {'would have' if writing else 'has'} {columns:,} columns; an utterance table "
                        f"has its {len(COLUMNS)} and a few more (translations, raw labels), at most {MAX_COLUMNS:,}",
                        path=path, line=None if writing else 1,
                        fix="keep the columns gendergap reads; put the rest in a side table keyed by id"
                            + (" (nothing was written)" if writing else ""))


def read_table(path: str | os.PathLike, validate: bool = True) -> pd.DataFrame:
    """Read an utterance table TSV. Non-UTF-8 bytes are a UserError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such utterance table", path=path,
                        fix="check the path, or build one with `gendergap corpus index`")
    text = read_utf8(path, "utterance table")
    if not text.strip():
        raise UserError("empty utterance table", path=path, line=1, fix="the first line must be the header")
    check_width(text.split("\n", 1)[0].count("\t") + 1, path)
    try:
        df = pd.read_csv(io.StringIO(text), sep="\t", dtype=str, keep_default_na=False,
                         quoting=csv.QUOTE_NONE)
    except pd.errors.ParserError as e:
        raise UserError(f"malformed TSV ({e})", path=path,
                        fix="one row per line, tab-separated, same number of fields as the header") from None
    if validate:
        validate_table(df, path)
    return _coerce_types(df) if set(COLUMNS) <= set(df.columns) else df


def table_paths(table) -> list[Path]:
    """One path or several (``--table`` given more than once, a config's list) as a list."""
    if isinstance(table, (str, os.PathLike)):
        return [Path(table)]
    paths = [Path(t) for t in table]
    if not paths:
        raise UserError("no utterance table given", fix="name one or more tables (--table T.tsv, repeatable)")
    return paths


def table_source(table) -> str:
    """How error messages name a table argument: its path, or ``A.tsv+B.tsv`` for several."""
    return "+".join(os.fspath(p) for p in table_paths(table))


def table_fingerprint(table):
    """What a run records of its table argument: one path's file_fingerprint (as before several
    tables could be given, so one table's records and keys are unchanged), or a list of them."""
    paths = table_paths(table)
    return file_fingerprint(paths[0]) if len(paths) == 1 else [file_fingerprint(p) for p in paths]


def write_table(df: pd.DataFrame, path: str | os.PathLike, validate: bool = True) -> Path:
    """Validate, then write atomically. Columns: the standard ones first, then the rest. What
    read_table would refuse (too many columns, a column name holding a tab or line break) is refused
    here, before anything is written."""
    path = Path(path)
    check_width(len(df.columns), path, writing=True)
    named = next((c for c in map(str, df.columns) if any(ch in c for ch in "\t\n\r")), None)
    if named is not None:   # csv raised "need to escape" half-way through the write; a reader would split it
        raise UserError(f"column name '{printable(named)[:60]}' contains a tab or line break", path=path,
                        fix="rename the column in the source file (the table's header is tab-separated); "
                            "nothing was written")
    if validate:
        validate_table(df, path)
    extra = [c for c in df.columns if c not in COLUMNS]
    out = df[COLUMNS + extra]
    text = [c for c in out.columns if c not in ("offset", "duration", "sample_rate")]
    # one scan of every text cell (a per-column scan took 20 s on a 30k-column table); the column is
    # looked for only when there is one to name
    if any(ch in "\x1f".join(map(str, out[text].to_numpy().ravel())) for ch in "\t\n\r"):
        col = next(c for c in text if out[c].astype(str).str.contains(r"[\t\n\r]", regex=True).any())
        raise UserError(f"column {col!r} contains a tab or newline", path=path,
                        fix="strip control characters from text before writing the table")
    with atomic_open(path) as f:
        out.to_csv(f, sep="\t", index=False, quoting=csv.QUOTE_NONE, lineterminator="\n")
    return path


def is_pipe(audio: str) -> bool:
    """A Kaldi wav.scp ``command |`` entry, which the kaldi reader keeps as given: not a path."""
    return str(audio).rstrip().endswith("|")


def absolute_audio(audio, table_path: str | os.PathLike) -> list[str]:
    """The audio column's locations in the one absolute form every reader of a table gets: a relative
    path resolved against the folder of the table that holds it (links in that folder's path
    resolved), then normalised (``a/../b``); a Kaldi ``cmd |`` entry as given."""
    base = Path(table_path).resolve().parent
    return [a if is_pipe(a) else os.path.normpath(os.path.join(base, a)) for a in map(str, audio)]


PIPE_FIX = ("dump the piped audio to files first (ESPnet: scripts/audio/format_wav_scp.sh; or run each "
            "command once into a .wav), point wav.scp at them and index the data dir again")


def line_of_id(table_path, uid: str) -> int | None:
    """The table file's line holding ``uid`` (header = line 1); None if it cannot be told."""
    try:
        ids = read_table(table_path, validate=False)["id"]
    except (UserError, KeyError):
        return None
    hits = (ids == uid).to_numpy().nonzero()[0]
    return int(hits[0]) + 2 if len(hits) else None


def speaker_genders(df: pd.DataFrame, source: str | os.PathLike = "<table>") -> pd.Series:
    """speaker -> gender; a speaker whose gender differs across rows is a UserError."""
    g = df.groupby("speaker")["gender"].agg(lambda s: sorted(set(s)))
    mixed = g[g.map(len) > 1]
    if len(mixed):
        spk = mixed.index[0]
        line = int((df["speaker"] == spk).to_numpy().nonzero()[0][0]) + 2
        raise UserError(f"speaker {spk!r} has genders {mixed.iloc[0]} on different rows", path=source,
                        line=line, fix="fix the metadata, or exclude mixed-gender speakers")
    return g.map(lambda s: s[0])
