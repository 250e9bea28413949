"""One utterance table from several (``gendergap corpus merge``; in memory: corpora.utterances.UtteranceTable.load).

The rules, in order (nothing is ever dropped silently: every rename, join and duplicate is in
the report and in one summary line):

1. **Audio paths absolute.** Each input's relative paths are relative to its own directory
   (resolved against it); Kaldi ``cmd |`` entries stay as given.
2. **Translations joined within one corpus.** Rows of the SAME ``corpus`` value with the same
   ``id`` that are the same segment -- the same recording (same path, or same file name and
   size: each mTEDx pair ships its own copy of a talk), offset, duration, speaker, source text
   and split -- and whose other columns agree (or are empty in one of them) become ONE row
   holding every input's ``tgt_text_<lang>`` columns. So mTEDx fr-en and fr-es indexed under
   one corpus name (``--corpus mtedx``) give one row per segment with ``tgt_text_en`` and
   ``tgt_text_es``. Rows of DIFFERENT corpus names are never joined: a task selects its rows by
   ``corpus`` (an ST task on ``mtedx-fr-en`` reads ``tgt_text_en`` of exactly those rows), so
   each corpus keeps the rows it had, and its row selection is the same as with its own table.
   Such a segment shared by several corpora is counted (``shared_across_corpora``), not warned
   about: it is how the mTEDx subsets are distributed.
2b. **Translations lent across corpora.** Those rows of different corpora that are the same segment
   (and agree on every column but corpus and translations) fill their EMPTY ``tgt_text_<lang>``
   from each other, when the segment has one such translation: the fr-fr rows (corpus
   ``mtedx-fr``) get ``tgt_text_en`` from fr-en, so ST can be validated and tested on fr-fr's
   sets as the paper does. No row is added or removed and no non-empty value changes, so every
   task still selects the same rows (``translations_lent`` counts them).
3. **Ids kept when unique.** An id that is still on several rows (another corpus's row, or a
   different segment of the same corpus: e.g. segment ``a1_0`` cut differently in two pairs)
   becomes ``<corpus>/<id>`` on each of them; if that is still not unique (same corpus, different
   segments) ``#<n>`` is appended, n the position of the row's input table (1 = first). The
   original id is kept in ``orig_id`` and every rename is listed in the report with its input
   file and line; same-corpus different segments are also warned about, naming what differs.
4. **Duplicate audio reported.** The same audio segment under two different original ids (the
   same clip indexed twice, e.g. a LeBenchmark list that includes MLS) gives one warning line
   and is listed in the report; both rows are kept.
5. ``gender_map`` (``corpus.gender_map`` of a study config) re-maps ``gender`` from
   ``gender_raw`` before the rows are compared.

The report also holds the provenance: a fingerprint (path, size, mtime) of every input table.
"""
from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path

import pandas as pd

from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint, git_sha
from corpora.table import (
    COLUMNS,
    absolute_audio,
    apply_gender_map,
    is_pipe,
    parse_gender_map,
    read_table,
    table_paths,
    table_source,
    validate_table,
    write_table,
)

log = logging.getLogger(__name__)

_NUMERIC = ("offset", "duration", "sample_rate")
_INTERNAL = ("_input", "_line")          # bookkeeping columns, never written
# What makes two rows candidates for "the same segment" (the recording is checked after).
_SEGMENT = ["corpus", "orig_id", "_base", "offset", "duration", "speaker", "text", "split"]
_EXAMPLES = 20   # entries of each kind listed in full in the report beyond the counts


def merge_tables(paths, *, gender_map: dict[str, str] | None = None) -> tuple[pd.DataFrame, dict]:
    """Merge utterance tables by the rules above. Returns (table, report)."""
    paths = table_paths(paths)
    seen: dict[Path, int] = {}
    for i, p in enumerate(paths):
        r = p.resolve()
        if r in seen:
            raise UserError(f"table given twice (inputs {seen[r] + 1} and {i + 1})", path=p,
                            fix="name each table once")
        seen[r] = i
    frames = [_load(p, i) for i, p in enumerate(paths)]
    df = pd.concat(frames, ignore_index=True, sort=False)
    for col in df.columns:
        if col not in _NUMERIC and col not in ("_input", "_line"):
            df[col] = df[col].fillna("").astype(str)
    df = apply_gender_map(df, gender_map, table_source(paths))
    df["_base"] = df["audio"].map(os.path.basename)
    df["_rec"] = _recordings(df)

    df, joined, not_joined, lent = _join(df)
    df, renames, collisions = _make_ids_unique(df, paths)
    shared, dups = _duplicates(df)

    report = {
        "inputs": [dict(file_fingerprint(p), rows=int(len(f))) for p, f in zip(paths, frames)],
        "rows_in": int(sum(len(f) for f in frames)),
        "rows_out": int(len(df)),
        "translations_joined": joined,
        "not_joined": not_joined,
        "translations_lent": lent,
        "ids_renamed": len(renames),
        "renames": renames,
        "same_id_different_segment": collisions,
        "shared_across_corpora": shared,
        "duplicate_audio": dups,
        "gender_map": dict(gender_map or {}),
        "git_sha": git_sha(),
    }
    report["summary"] = summary_line(report)
    _warn(report, paths)
    if not renames and not any(f.attrs["had_orig_id"] for f in frames):
        df = df.drop(columns="orig_id")   # nothing renamed: no column to carry
    out = df.drop(columns=[c for c in (*_INTERNAL, "_base", "_rec") if c in df.columns])
    extra = [c for c in out.columns if c not in COLUMNS]
    out = out[COLUMNS + extra].reset_index(drop=True)
    validate_table(out, table_source(paths))
    return out, report


def merge_files(*, tables, out, gender_map: str | dict | None = None) -> dict:
    """`gendergap corpus merge`: merge ``tables`` into table ``out`` and write the report beside it
    (merge_report_path); ``gender_map`` as --gender-map gives it. Returns the report."""
    df, report = merge_tables(tables, gender_map=parse_gender_map(gender_map))
    write_table(df, out)
    write_json(merge_report_path(out), report)
    return report


def merge_report_path(out) -> Path:
    """Where `corpus merge` writes the report of table ``out``: OUT.merge.json."""
    return Path(f"{os.fspath(out)}.merge.json")


def summary_line(report: dict) -> str:
    return (f"{len(report['inputs'])} table(s), {report['rows_in']} rows in -> {report['rows_out']} rows out; "
            f"{report['translations_joined']['rows']} row(s) joined with translations from several tables; "
            f"{report['translations_lent']['rows']} row(s) given translations of the same segment in another corpus; "
            f"{report['ids_renamed']} id(s) renamed (<corpus>/<id>); "
            f"{report['same_id_different_segment']['count']} same-id different segment(s); "
            f"{report['shared_across_corpora']['count']} segment(s) shared by several corpora (one row each); "
            f"{report['duplicate_audio']['count']} duplicate audio segment(s) under different ids")


def _load(path: Path, i: int) -> pd.DataFrame:
    df = read_table(path)   # validated: unique ids, F/M/U genders, numbers...
    df["audio"] = absolute_audio(df["audio"], path)
    df.attrs["had_orig_id"] = "orig_id" in df.columns
    if "orig_id" not in df.columns:
        df["orig_id"] = df["id"]
    else:   # a merged table merged again: its own originals stay the originals
        df["orig_id"] = df["orig_id"].where(df["orig_id"] != "", df["id"])
    df["_input"] = i
    df["_line"] = range(2, len(df) + 2)
    return df


def _recording(audio: str):
    """What makes two audio paths the same recording: the path itself, or, for copies (each
    mTEDx pair has its own wav/ folder), the same file name and size. Headers only, no hashing."""
    if is_pipe(audio):
        return ("pipe", audio.strip())
    try:
        return ("file", os.path.basename(audio), os.stat(audio).st_size)
    except OSError:
        return ("path", audio)


def _recordings(df: pd.DataFrame) -> pd.Series:
    """A recording key per row (_recording as text). Only rows that have a twin by file name,
    offset and duration can be the same segment as another: only their files are stat'ed, once
    per file; the others keep their path."""
    twin = df.duplicated(["_base", "offset", "duration"], keep=False)
    rec = "path:" + df["audio"]
    if twin.any():
        keys = {a: repr(_recording(a)) for a in df.loc[twin, "audio"].unique()}
        rec[twin] = df.loc[twin, "audio"].map(keys)
    return rec


def _compatible(a: dict, b: dict, cols) -> list[str]:
    """The columns where both rows have a value and the values differ."""
    return [c for c in cols if a[c] != b[c] and a[c] != "" and b[c] != ""]


def _join(df: pd.DataFrame) -> tuple[pd.DataFrame, dict, dict, dict]:
    """Rule 2: rows of one corpus that are the same segment become one row; the same segment's
    rows in other corpora lend each other their translations (rule 2b).

    Vectorised for the usual case -- a segment whose rows agree on every column (each column has
    at most one non-empty value): one groupby. A segment whose rows disagree somewhere goes
    through the row-by-row rules (_join_rows), which say what differs."""
    key = [c for c in _SEGMENT if c != "corpus"] + ["_rec"]
    joined = {"rows": 0, "examples": []}
    not_joined = {"count": 0, "examples": []}
    lent = {"rows": 0, "examples": []}
    cand = df.duplicated(key, keep=False)
    if not cand.any():
        return df, joined, not_joined, lent
    other = [c for c in df.columns if c not in ("audio", "id", "orig_id", "_rec", "_base", *_INTERNAL)]
    tgt = [c for c in other if c.startswith("tgt_text_")]
    same = [c for c in other if c not in tgt and c != "corpus"]
    c = df[cand].copy()
    c["_g"] = c.groupby(key, sort=False).ngroup()
    values = c[same + tgt]
    conflict = values.mask(values.eq("")).groupby(c["_g"]).nunique().gt(1).any(axis=1)
    bad = c["_g"].isin(conflict.index[conflict])
    parts = [df[~cand]]
    if (~bad).any():
        parts.append(_join_agreeing(c[~bad], tgt, joined, lent))
    if bad.any():
        rows = []
        for _, group in c[bad].groupby("_g", sort=False):
            rows += _join_rows(group, other, tgt, same, joined, not_joined, lent)
        parts.append(pd.DataFrame(rows, columns=c.columns))
    out = pd.concat(parts, ignore_index=True).drop(columns="_g")
    out = out.sort_values(["_input", "_line"], kind="stable").reset_index(drop=True)
    for col in (*_NUMERIC, *_INTERNAL):
        out[col] = out[col].astype(df[col].dtype)
    return out, joined, not_joined, lent


def _join_agreeing(c: pd.DataFrame, tgt: list[str], joined: dict, lent: dict) -> pd.DataFrame:
    """Segments whose rows agree: one row per (segment, corpus) holding every non-empty value
    (the first row's id, audio and place), then empty translations filled across corpora."""
    na = c.mask(c.eq(""))
    by = na.groupby(["_g", "corpus"], sort=False)
    agg = by.first()                       # first non-empty value of each column
    size = by.size()
    inputs = by["_input"].agg(list)
    before = agg[tgt].isna()
    if tgt:
        agg[tgt] = agg[tgt].fillna(agg[tgt].groupby(level="_g").transform("first"))
    gained = before & agg[tgt].notna()
    many = size[size > 1]
    joined["rows"] += int(len(many))
    for g_c in many.index[:_EXAMPLES - len(joined["examples"])]:
        row = agg.loc[g_c]
        joined["examples"].append({"corpus": g_c[1], "id": row["id"], "tgt": sorted(k for k in tgt if pd.notna(row[k])),
                                   "inputs": [int(i) + 1 for i in inputs[g_c]]})
    got = gained.any(axis=1) if tgt else pd.Series(False, index=agg.index)
    lent["rows"] += int(got.sum())
    for g_c in got.index[got][:_EXAMPLES - len(lent["examples"])]:
        lent["examples"].append({"corpus": g_c[1], "id": agg.loc[g_c, "orig_id"],
                                 "tgt": [k for k in tgt if gained.loc[g_c, k]]})
    out = agg.reset_index()
    text = [col for col in out.columns if col not in _NUMERIC and col not in ("_g", *_INTERNAL)]
    out[text] = out[text].fillna("")
    return out[c.columns]


def _join_rows(group: pd.DataFrame, other, tgt, same, joined, not_joined, lent) -> list[dict]:
    """One segment whose rows disagree somewhere: rows join when they agree (or one is empty)."""
    clusters: list[dict] = []
    for row in group.to_dict("records"):
        for c in clusters:   # `other` holds corpus: rows of two corpora never join
            if not _compatible(c, row, other):
                for col in other:
                    if c[col] == "":
                        c[col] = row[col]
                c["_from"].append(row["_input"])
                break
        else:
            clusters.append(dict(row, _from=[row["_input"]]))
    for c in clusters:
        if len(c["_from"]) > 1:
            joined["rows"] += 1
            if len(joined["examples"]) < _EXAMPLES:
                joined["examples"].append({"corpus": c["corpus"], "id": c["id"], "tgt": sorted(k for k in tgt if c[k]),
                                           "inputs": [int(i) + 1 for i in c["_from"]]})
    by_corpus: dict[str, list[dict]] = {}
    for c in clusters:
        by_corpus.setdefault(c["corpus"], []).append(c)
    for corpus, cs in by_corpus.items():
        if len(cs) > 1:
            not_joined["count"] += len(cs) - 1
            if len(not_joined["examples"]) < _EXAMPLES:
                not_joined["examples"].append({"corpus": corpus, "id": cs[0]["orig_id"],
                                               "differ": _compatible(cs[0], cs[1], other)})
    if len(by_corpus) > 1:
        _lend_translations(clusters, tgt, same, lent)
    return [{k: v for k, v in c.items() if k != "_from"} for c in clusters]


def _lend_translations(clusters: list[dict], tgt: list[str], same: list[str], lent: dict) -> None:
    """Rule 2b, row by row: an empty tgt_text_<lang> takes the value the same segment has in
    another corpus (no conflicting column but corpus and translations), when that value is one
    and the same wherever it is given."""
    for c in clusters:
        peers = [p for p in clusters if p is not c and p["corpus"] != c["corpus"] and not _compatible(p, c, same)]
        got = []
        for col in tgt:
            values = {p[col] for p in peers if p[col]}
            if not c[col] and len(values) == 1:
                c[col] = values.pop()
                got.append(col)
        if got:
            lent["rows"] += 1
            if len(lent["examples"]) < _EXAMPLES:
                lent["examples"].append({"corpus": c["corpus"], "id": c["orig_id"], "tgt": got})


def _make_ids_unique(df: pd.DataFrame, paths: list[Path]) -> tuple[pd.DataFrame, list[dict], dict]:
    """Rule 3: ``<corpus>/<id>`` for ids on several rows, then ``#<input>`` if needed."""
    df = df.copy()
    dup = df["id"].duplicated(keep=False)
    collisions = {"count": 0, "examples": []}
    if not dup.any():
        return df, [], collisions
    sub = df[dup]
    new = sub["corpus"] + "/" + sub["id"]
    again = new.duplicated(keep=False)
    if again.any():   # same corpus, same id, not the same segment (rule 2 would have joined it)
        groups = sub[again].groupby(["corpus", "id"], sort=False)
        collisions["count"] = int(groups.ngroups)
        for (corpus, uid), g in itertools.islice(groups, _EXAMPLES):
            collisions["examples"].append({"corpus": corpus, "id": uid, "inputs": [int(i) + 1 for i in g["_input"]],
                                           "differ": _differ(g.iloc[0], g.iloc[1])})
        new[again] = new[again] + "#" + (sub.loc[again, "_input"] + 1).astype(str)
    taken = set(df.loc[~dup, "id"])
    clash = new.isin(taken) | new.duplicated(keep=False)
    for idx in new.index[clash]:   # a table that already had an id like mtedx/a1_0: count up
        base, n, nid = new[idx], 1, new[idx]
        while nid in taken:
            n += 1
            nid = f"{base}~{n}"
        taken.add(nid)
        new[idx] = nid
    renames = pd.DataFrame({"input": sub["_input"].map(lambda i: os.fspath(paths[int(i)])),
                            "line": sub["_line"].astype(int), "corpus": sub["corpus"], "id": sub["id"],
                            "new_id": new}).to_dict("records")
    df.loc[dup, "id"] = new
    return df, [{k: (int(v) if k == "line" else v) for k, v in r.items()} for r in renames], collisions


def _differ(a: pd.Series, b: pd.Series) -> list[str]:
    """The columns two rows with one id differ in (the audio compared as a recording)."""
    skip = {"id", "orig_id", "audio", "_base", "_rec", *_INTERNAL}
    out = ["audio file"] if _recording(a["audio"]) != _recording(b["audio"]) else []
    return out + [c for c in a.index if c not in skip and str(a[c]) != str(b[c]) and str(a[c]) and str(b[c])]


def _duplicates(df: pd.DataFrame) -> tuple[dict, dict]:
    """Rule 4: one audio segment on several rows: the same original id in several corpora is
    the subsets' overlap (counted); different original ids are a duplicate (warned about)."""
    key = ["_base", "offset", "duration", "_rec"]
    cand = df[df.duplicated(key, keep=False)]
    shared = {"count": 0, "examples": []}
    dups = {"count": 0, "examples": []}
    if cand.empty:
        return shared, dups
    g = cand.groupby(key, sort=False)
    n_ids, n_corpora = g["orig_id"].nunique(), g["corpus"].nunique()
    is_dup, is_shared = n_ids > 1, (n_ids == 1) & (n_corpora > 1)
    dups["count"], shared["count"] = int(is_dup.sum()), int(is_shared.sum())
    for k in is_dup.index[is_dup][:_EXAMPLES]:
        rows = g.get_group(k)
        dups["examples"].append({"audio": rows["audio"].iloc[0], "offset": float(rows["offset"].iloc[0]),
                                 "duration": float(rows["duration"].iloc[0]), "ids": rows["id"].tolist()})
    for k in is_shared.index[is_shared][:_EXAMPLES]:
        rows = g.get_group(k)
        shared["examples"].append({"id": rows["orig_id"].iloc[0], "corpora": sorted(set(rows["corpus"]))})
    return shared, dups


def _warn(report: dict, paths: list[Path]) -> None:
    src = table_source(paths)
    c = report["same_id_different_segment"]
    if c["count"]:
        ex = c["examples"][0]
        log.warning("%s: %d id(s) name different segments (or conflicting rows) of one corpus in several tables "
                    "(e.g. %s/%s in inputs %s, differing in %s): kept as separate rows, ids <corpus>/<id>#<input> "
                    "(the report lists them)", src, c["count"], ex["corpus"], ex["id"],
                    ", ".join(map(str, ex["inputs"])), ", ".join(ex["differ"]) or "nothing")
    d = report["duplicate_audio"]
    if d["count"]:
        ex = d["examples"][0]
        log.warning("%s: %d audio segment(s) appear under different ids (e.g. %s at %.3f s for %.3f s: %s): both "
                    "rows kept -- drop one of the copies if the same clip was indexed twice", src, d["count"],
                    ex["audio"], ex["offset"], ex["duration"], ", ".join(ex["ids"]))
