"""Speakers of unknown gender, decided by the user: drop them from the splits named, keep them elsewhere.

Common Voice's gender field is optional (most of its speakers give none), VoxPopuli and
LeBenchmark's pretraining sets have unknown shares too. A gender gap compares women and men, so
a study refuses test speakers of unknown gender (corpora.checks); whether to drop them, and from
which splits, is the researcher's call, made here and written into a new table, never by editing
the TSV by hand. Pretraining rows of unknown gender are best kept: they are part of the speech a
model hears, and Table 3 reports them as the U share.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.table import is_pipe, write_table
from corpora.utterances import UtteranceTable


def drop_unknown_gender(rows: pd.DataFrame, splits: list[str]) -> tuple[pd.DataFrame, list[dict]]:
    """``rows`` without the gender-U rows of ``splits``; and per split named, what went: speakers and
    rows dropped, speakers and rows kept."""
    gone = rows["split"].isin(splits) & (rows["gender"] == "U")
    summary = []
    for split in splits:
        part = rows[rows["split"] == split]
        lost = part[part["gender"] == "U"]
        summary.append({"split": split, "speakers_dropped": int(lost["speaker"].nunique()), "rows_dropped": len(lost),
                        "speakers_kept": int(part.loc[part["gender"] != "U", "speaker"].nunique()),
                        "rows_kept": int((part["gender"] != "U").sum())})
    return rows[~gone], summary


def filter_table(table: str | os.PathLike, out: str | os.PathLike, drop_unknown: list[str]) -> list[dict]:
    """`gendergap corpus filter`: write ``table`` to ``out`` without the speakers of unknown gender in
    the splits ``drop_unknown`` (the other splits keep them). Returns the per-split summary."""
    if Path(out).resolve() == Path(table).resolve():
        raise UserError("--out is the table being filtered", path=out,
                        fix="write the filtered table to a new file (the original stays as it is)")
    loaded = UtteranceTable.load(table)
    rows = loaded.rows
    unknown = sorted(set(drop_unknown) - set(rows["split"]))
    if unknown:
        raise UserError(f"no split {unknown[0]!r} in this table (it has: {', '.join(sorted(set(rows['split'])))})",
                        path=table, fix="name splits of the table in --drop-unknown-gender")
    kept, summary = drop_unknown_gender(rows, list(drop_unknown))
    if kept.empty:
        raise UserError("nothing would be left: every row of the table is of unknown gender in the splits named",
                        path=table, fix="name fewer splits, or give the speakers' genders (--speaker-genders)")
    # the table is written as read, its audio paths relative to the new table's folder as to the old one's
    kept = kept.assign(audio=[a if is_pipe(a) else os.path.relpath(a, Path(out).resolve().parent)
                              for a in kept["audio"]])
    write_table(kept, out)
    return summary
