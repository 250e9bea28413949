"""Corpus statistics in the layout of the reference study's Table 1 (durations as hours:minutes,
speakers and utterances per gender, per corpus and per style or split).

    summary = gender_summary(df)            # one row per (corpus, group), numbers
    print(render(summary, "markdown"))      # Dataset | Style | Duration M / F | # speakers M / F ...
"""
from __future__ import annotations

import io
import logging
import os

import pandas as pd

from corpora.base.errors import UserError
from corpora.utterances import UtteranceTable

log = logging.getLogger(__name__)

GENDER_ORDER = ("M", "F", "U")


def hours_minutes(seconds: float) -> str:
    """``3723.0 -> '1:02'``, ``3.6e6 -> '1,000:00'`` (rounded to the minute, as in the paper)."""
    minutes = int(round(float(seconds) / 60.0))
    return f"{minutes // 60:,}:{minutes % 60:02d}"


def _group_column(df: pd.DataFrame) -> str:
    """Group by ``style`` when the table has one filled in (Table 1), else by ``split``."""
    if "style" in df.columns and (df["style"].astype(str).str.strip() != "").any():
        return "style"
    return "split"


NO_GROUP = "(none)"   # the group of rows whose table has no such column, or leaves it empty


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1   # not readable from here (a relative path): the file name alone decides


def speaker_keys(df: pd.DataFrame) -> pd.Series:
    """One key per row naming the person speaking. A speaker id names a speaker within its corpus
    (MLS and another corpus may both have a speaker 1), except that (corpus, speaker) pairs with
    the same speaker id on the same recording -- same file name and size -- are one person: the
    mTEDx subsets indexed as mtedx-fr-en, mtedx-fr-es... each ship a copy of a shared talk. The
    key is the first corpus (sorted) of each linked group. Only files whose name and speaker id
    recur in several corpora are looked at (os.stat), so a big table costs no disk access."""
    spk = df["speaker"].astype(str)
    corpus = df["corpus"].astype(str)
    audio = df["audio"].astype(str) if "audio" in df.columns else pd.Series("", index=df.index)
    links = pd.DataFrame({"speaker": spk, "corpus": corpus, "rec": audio.map(os.path.basename),
                          "audio": audio}).drop_duplicates(["speaker", "corpus", "rec"])
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    shared = links[links.duplicated(["speaker", "rec"], keep=False)]
    shared = shared.assign(size=shared["audio"].map(_size))
    for (speaker, _, _), g in shared.groupby(["speaker", "rec", "size"], sort=False):
        roots = sorted({find((c, speaker)) for c in g["corpus"]})
        for r in roots[1:]:
            parent[r] = roots[0]
    if not parent:
        return corpus + "\x1f" + spk
    canon = {k: find(k) for k in parent}
    return pd.Series([canon.get((c, s), (c, s))[0] for c, s in zip(corpus, spk)], index=df.index) + "\x1f" + spk


def segment_keys(df: pd.DataFrame) -> pd.Series:
    """One key per row naming the stretch of audio it covers: its recording with offset and
    duration. The recording is the path, or -- for copies, as each mTEDx pair ships its own
    wav/ folder of the same talks -- the file name and size (corpus merge's notion of the same
    segment). Only rows with a twin by file name, offset and duration are stat'ed, once per file.
    A table without audio, offset and duration columns, or a row with no audio path, has nothing
    to say that two rows are one segment: each row is its own."""
    own = pd.Series([f"row:{i}" for i in range(len(df))], index=df.index)
    if not {"audio", "offset", "duration"} <= set(df.columns):
        return own
    audio = df["audio"].astype(str)
    base = audio.map(os.path.basename)
    where = pd.DataFrame({"base": base, "offset": df["offset"].astype(float).map(repr),
                          "duration": df["duration"].astype(float).map(repr)}, index=df.index)
    rec = "path:" + audio
    twin = where.duplicated(keep=False) & (audio.str.strip() != "")
    if twin.any():
        sizes = {a: _size(a) for a in audio[twin].unique()}
        rec[twin] = [f"file:{b}:{sizes[a]}" if sizes[a] >= 0 else f"path:{a}" for a, b in zip(audio[twin], base[twin])]
    keys = rec + "\x1f" + where["offset"] + "\x1f" + where["duration"]
    return keys.where(audio.str.strip() != "", own)


def _counts(part: pd.DataFrame, counted: pd.DataFrame, row: dict) -> dict:
    """``row`` with seconds and utterances of ``counted`` and distinct speakers of ``part``, per
    gender and over all."""
    for g in GENDER_ORDER:
        sub = counted[counted["gender"] == g]
        row[f"seconds_{g}"] = round(float(sub["duration"].sum()), 3)
        row[f"utterances_{g}"] = int(len(sub))
        row[f"speakers_{g}"] = int(part.loc[part["gender"] == g, "_spk"].nunique())
    row["seconds_all"] = round(float(counted["duration"].sum()), 3)
    row["utterances_all"] = int(len(counted))
    row["speakers_all"] = int(part["_spk"].nunique())
    return row


def gender_summary(df: pd.DataFrame, by: str | None = None) -> pd.DataFrame:
    """Per (corpus, group): seconds, utterances and distinct speakers for each gender, plus
    a TOTAL row. Columns: corpus, <group>, seconds_<g>, utterances_<g>, speakers_<g> for g in
    M, F, U, and the same summed over genders (``_all``). With ``by="corpus"`` there is no
    group column: one row per corpus. Seconds are rounded to the millisecond.

    Every row is counted: rows whose table lacks the group column (tables concatenated from
    corpora with and without ``style``) or leaves it empty fall in group ``(none)``. Speakers
    are distinct people in the TOTAL row (see speaker_keys): two corpora both numbering
    speakers from 1 do not share speakers, but the mTEDx subsets (fr-en, fr-es...) that share
    a talk share its speaker.

    The TOTAL row counts each audio segment once (segment_keys): the mTEDx subsets of one
    release hold the same segments, and summing their rows would count that audio up to four
    times. A segment on several rows counts under its first row's gender. The per-corpus rows
    count every row of their own. ``attrs["repeated_segments"]`` says how many rows TOTAL left
    out: ``rows`` on several rows, ``segments`` they are, ``left_out`` = rows - segments.
    """
    by = by or _group_column(df)
    group = None if by == "corpus" else by
    d = df.assign(_group=(df[by].fillna("").astype(str).str.strip().replace("", NO_GROUP)
                          if group and by in df.columns else NO_GROUP),
                  _spk=speaker_keys(df), _seg=segment_keys(df))
    rows = []
    for (corpus, label), part in d.groupby(["corpus", "_group"], sort=True, dropna=False):
        rows.append(_counts(part, part, {"corpus": corpus, **({group: label} if group else {})}))
    repeated = d["_seg"].duplicated(keep=False)
    once = d[~d["_seg"].duplicated(keep="first")]
    rows.append(_counts(d, once, {"corpus": "TOTAL", **({group: "-"} if group else {})}))
    out = pd.DataFrame(rows)
    out.attrs["repeated_segments"] = {"rows": int(repeated.sum()), "segments": int(d.loc[repeated, "_seg"].nunique()),
                                      "left_out": int(len(d) - len(once))}
    return out


def repeated_note(summary: pd.DataFrame) -> str:
    """The line saying that TOTAL counted shared segments once ("" when no segment is on two rows)."""
    rep = summary.attrs.get("repeated_segments") or {}
    if not rep.get("left_out"):
        return ""
    return (f"TOTAL counts each audio segment once: {rep['rows']:,} rows are {rep['segments']:,} segments held by "
            f"several rows (same recording, offset and duration); {rep['left_out']:,} repeats left out of its hours "
            f"and utterances\n")


def table1(summary: pd.DataFrame) -> pd.DataFrame:
    """The paper's layout: Dataset, Duration M / F [/ U], # speakers M / F [/ U], # utterances, group."""
    group = summary.columns[1] if not summary.columns[1].startswith("seconds_") else None
    genders = [g for g in GENDER_ORDER if g != "U" or summary[f"utterances_{g}"].sum() > 0]
    label = " / ".join(genders)
    out = pd.DataFrame({
        "Dataset": summary["corpus"],
        f"Duration ({label})": summary.apply(lambda r: " / ".join(hours_minutes(r[f"seconds_{g}"]) for g in genders),
                                             axis=1),
        f"# speakers ({label})": summary.apply(lambda r: " / ".join(str(r[f"speakers_{g}"]) for g in genders), axis=1),
        f"# utterances ({label})": summary.apply(lambda r: " / ".join(str(r[f"utterances_{g}"]) for g in genders),
                                                 axis=1),
    })
    if group:
        out[group.capitalize()] = summary[group]
    return out


def _markdown(df: pd.DataFrame) -> str:
    cells = [list(df.columns)] + df.astype(str).values.tolist()
    widths = [max(len(row[i]) for row in cells) for i in range(len(df.columns))]
    line = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] +
                     [line(r) for r in cells[1:]]) + "\n"


def table_stats(*, tables, format: str = "text", by: str | None = None) -> str:
    """`gendergap corpus stats`: ``tables`` (several: merged as `corpus merge` merges them) rendered
    as ``format``, grouped ``by`` a column (default: style, else split). The TOTAL row counts an
    audio segment several rows hold once and the output says so (gender_summary)."""
    df = UtteranceTable.load(tables).rows
    if by and by not in df.columns:
        raise UserError(f"--by {by!r} is not a column", path=tables[0], fix="one of: " + ", ".join(df.columns))
    summary = gender_summary(df, by=by)
    note = repeated_note(summary)
    if note and format == "csv":   # stdout stays a CSV for spreadsheets and scripts: the note goes to the log
        log.info("%s", note.strip())
    return render(summary, format)


def _after(note: str) -> str:
    return "\n" + note if note else ""


def render(summary: pd.DataFrame, fmt: str = "text") -> str:
    """``text``/``markdown``: Table 1 layout; ``csv``: the numbers (seconds, counts) per gender,
    with hours:minutes columns added, for spreadsheets and scripts."""
    if fmt == "csv":
        out = summary.copy()
        for g in GENDER_ORDER + ("all",):
            out.insert(out.columns.get_loc(f"seconds_{g}"), f"duration_{g}", out[f"seconds_{g}"].map(hours_minutes))
        buf = io.StringIO()
        out.to_csv(buf, index=False, lineterminator="\n")
        return buf.getvalue()
    t = table1(summary)
    if fmt == "markdown":
        return _markdown(t) + _after(repeated_note(summary))
    if fmt == "text":
        return t.to_string(index=False) + "\n" + _after(repeated_note(summary))
    raise ValueError(f"unknown format {fmt!r}")
