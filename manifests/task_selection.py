"""A downstream task's data from a selection: a gender/hours subset of one corpus to train and
validate on, and the corpus's own test split to test on.

The reference study fine-tunes its ASR models on a gender-balanced subset of mTEDx fr-fr (Table
2, "Balanced Dataset (ASR)"): ~38 h per gender drawn from the training talks, the valid set
topped up with unused male training speakers, the test set kept as released. This builds that
data with the same selection code as `gendergap manifest build` (manifests.splits) and writes
what the ASR recipes read:

    out/train.csv, valid.csv, test.csv          SpeechBrain CSVs (manifests.export_speechbrain)
    out/selection_{train,valid,test}.tsv        the rows, audio paths absolute (Table 2's input)
    out/selection_report.json                   request, what was dropped and why, provenance

    build_task_selection("mtedx.tsv", "runs/b/selections/asr", corpus="mtedx-fr",
                         gender="balanced", hours_per_gender=38, valid_hours=1)

The directory appears whole or not at all (manifests.build.staged_output); a finished one is
left as it is, so a study's re-run is a no-op.
"""
from __future__ import annotations

import os
from pathlib import Path

from corpora.base.atomic import write_json
from corpora.base.boundary import read_state_json
from corpora.base.errors import UserError
from corpora.base.provenance import engine_versions, file_fingerprint, git_sha
from corpora.table import write_table
from corpora.utterances import UtteranceTable
from manifests.build import staged_output
from manifests.export_speechbrain import export_speechbrain
from manifests.splits import build_selection

DEFAULT_SPLITS = {"train": "train", "valid": "valid", "test": "test"}


def draw_selection(df, corpus: str, gender: str, *, hours: float | None, hours_per_gender: float | None,
                   valid_hours: float | None, splits: dict[str, str], seed: int, source) -> tuple:
    """(the selection, the corpus's test rows) drawn from table rows ``df``, writing nothing: what
    build_task_selection exports, and what a dry run draws to see that the corpus can give it."""
    splits = {**DEFAULT_SPLITS, **(splits or {})}
    rows = df[df["corpus"] == corpus]
    if rows.empty:
        known = ", ".join(sorted(set(df["corpus"]))) or "none"
        raise UserError(f"no rows of corpus {corpus!r} to select from", path=source,
                        fix=f"name one of the table's corpora ({known}) in the selection's `corpus:`")
    test = rows[rows["split"] == splits["test"]]
    if test.empty:
        raise UserError(f"corpus {corpus!r} has no rows in its test split {splits['test']!r}", path=source,
                        fix="a selection's tasks test on the corpus's test split: check `splits: {test: ...}`")
    sel = build_selection(rows, gender, hours=hours, hours_per_gender=hours_per_gender, valid_hours=valid_hours,
                          seed=seed, train_splits=(splits["train"],), valid_splits=(splits["valid"],),
                          holdout_splits=(splits["test"],), source=source)
    if "valid" not in sel.splits:
        raise UserError(f"the selection from corpus {corpus!r} has no valid rows", path=source,
                        fix=f"label valid rows {splits['valid']!r} in the table, or set the selection's valid_hours")
    return sel, test


def build_task_selection(table: str | os.PathLike, out: str | os.PathLike, *, corpus: str, gender: str = "balanced",
                         hours: float | None = None, hours_per_gender: float | None = None,
                         valid_hours: float | None = None, splits: dict[str, str] | None = None,
                         seed: int = 0) -> dict:
    """Select train (+ valid) from ``corpus``'s train/valid rows of ``table``, add its test rows
    unchanged, and export all three; returns the selection report (also in ``out``)."""
    splits = {**DEFAULT_SPLITS, **(splits or {})}
    out = Path(out)
    done = read_state_json(out / "selection_report.json", "selection report")
    if done is not None:
        return done
    loaded = UtteranceTable.load(table)
    sel, test = draw_selection(loaded.rows, corpus, gender, hours=hours, hours_per_gender=hours_per_gender,
                               valid_hours=valid_hours, splits=splits, seed=seed, source=table)
    parts = {**sel.splits, "test": test}
    with staged_output(out, overwrite=True) as stage:
        for name, part in parts.items():
            part = UtteranceTable(part, loaded.sources).audio_rows()   # a Kaldi pipe refused
            parts[name] = part
            write_table(part, stage / f"selection_{name}.tsv")
        export_speechbrain(parts, stage)
        report = dict(sel.report, corpus=corpus, test_split=splits["test"],
                      test={"rows": len(test), "seconds": round(float(test["duration"].sum()), 3)},
                      provenance={"table": file_fingerprint(table), "git_sha": git_sha(),
                                  "versions": engine_versions()})
        write_json(stage / "selection_report.json", report)
    return report
