"""One manifest build: table -> selection -> exporter, into a directory that appears whole or not at all.

Everything is written into a hidden staging directory next to ``out``; only when the selection,
the selected tables, the export and ``selection_report.json`` are all done is it renamed to
``out``. A failure (a UserError included) leaves no ``out`` contents behind.

    report = build_manifests("corpus.tsv", "manifests/bal", gender="balanced", hours=20,
                             valid_hours=1, fmt="fairseq")
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from corpora.base.atomic import swap_in_dir, write_json
from corpora.base.errors import UserError
from corpora.base.provenance import engine_versions, git_sha
from corpora.table import read_table, read_tables, resolve_audio, table_fingerprint, table_source, write_table
from manifests.export_fairseq import export_wav2vec
from manifests.export_kaldi import export_kaldi
from manifests.export_s2t import export_s2t
from manifests.export_speechbrain import export_speechbrain
from manifests.splits import build_selection

FORMATS = ("fairseq", "s2t", "speechbrain", "kaldi")


@contextlib.contextmanager
def staged_output(out: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a staging dir; on success it becomes ``out`` (replacing it if ``overwrite``)."""
    out = Path(out).absolute()
    if out.exists() and not out.is_dir():
        raise UserError("output path exists and is not a directory", path=out, fix="choose another --out")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError("output directory exists and is not empty", path=out,
                        fix="choose another --out, or pass --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    swap_in_dir(stage, out)


def read_id_list(path: str | os.PathLike, column: str = "speaker") -> list:
    """Ids from a file: one per line ('#' comments allowed), or an utterance table (its ``column``).
    Speakers from a table are (corpus, speaker) pairs: an id names a speaker within its corpus only;
    bare ids from a plain list are matched in every corpus (manifests.select.of_speakers)."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such file", path=path, fix="give a file with one id per line, or an utterance table")
    text = path.read_text(encoding="utf-8")
    first = text.splitlines()[0] if text.strip() else ""
    if "\t" in first and column in first.split("\t"):
        table = read_table(path, validate=False)
        if column == "speaker" and "corpus" in table.columns:
            return sorted(set(zip(table["corpus"].astype(str), table["speaker"].astype(str))))
        return sorted(set(table[column]))
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def export(fmt: str, splits: dict, out_dir: Path, final_dir: Path, **options) -> dict:
    """Run one exporter over the selected splits (audio paths absolute)."""
    audio = {k: options.get(k) for k in ("resample", "audio_cache", "jobs")}   # prepared audio (fairseq, kaldi)
    if fmt == "fairseq":
        return export_wav2vec(splits, out_dir, final_dir=final_dir, root=options.get("root"),
                              materialise=options.get("materialise", "auto"),
                              audio_format=options.get("audio_format") or "flac", **audio)
    if fmt == "s2t":
        keys = ("feature_template", "n_frames", "text_column", "tgt_lang", "vocab_size", "vocab_type", "audio_root")
        return export_s2t(splits, out_dir, **{k: v for k, v in options.items() if k in keys and v is not None})
    if fmt == "speechbrain":
        return export_speechbrain(splits, out_dir, text_column=options.get("text_column") or "text",
                                  data_root=options.get("data_root"))
    if fmt == "kaldi":
        return export_kaldi(splits, out_dir, text_column=options.get("text_column") or "text", **audio)
    raise UserError(f"unknown format {fmt!r}", fix="use one of: " + ", ".join(FORMATS))


def build_manifests(table: str | os.PathLike, out: str | os.PathLike, *, gender: str = "balanced",
                    fmt: str = "fairseq", hours: float | None = None, hours_per_gender: float | None = None,
                    valid_hours: float | None = None, seed: int = 0, exclude_speakers_file=None,
                    exclude_ids_file=None, overwrite: bool = False, selection_options: dict | None = None,
                    export_options: dict | None = None) -> dict:
    """Select from ``table`` and export as ``fmt`` into ``out``; returns the report also written there.

    ``out`` receives ``selection_<split>.tsv`` (the selected rows, audio paths absolute),
    ``selection_report.json`` (request, what was dropped and why, per-split counts, provenance)
    and the exporter's files.
    """
    if fmt not in FORMATS:
        raise UserError(f"unknown format {fmt!r}", fix="use one of: " + ", ".join(FORMATS))
    df = read_tables(table)   # one table, or several merged (corpora.merge)
    exclude_speakers = read_id_list(exclude_speakers_file) if exclude_speakers_file else []
    exclude_ids = read_id_list(exclude_ids_file, column="id") if exclude_ids_file else []
    sel = build_selection(df, gender, hours=hours, hours_per_gender=hours_per_gender, valid_hours=valid_hours,
                          seed=seed, exclude_speakers=exclude_speakers, exclude_ids=exclude_ids, source=table_source(table),
                          **(selection_options or {}))
    final = Path(out).absolute()
    with staged_output(final, overwrite=overwrite) as stage:
        splits = {}
        for name, rows in sel.splits.items():
            rows = rows.assign(audio=resolve_audio(rows, table))
            write_table(rows, stage / f"selection_{name}.tsv")
            splits[name] = rows
        summary = export(fmt, splits, stage, final, **(export_options or {}))
        report = dict(sel.report, format=fmt, export=summary, summary=_one_line(sel.report),
                      provenance={"table": table_fingerprint(table), "git_sha": git_sha(),
                                  "versions": engine_versions()})
        write_json(stage / "selection_report.json", report)
    return report


def _one_line(report: dict) -> str:
    """'train F 0:10:00 (4 spk) M 0:10:00 (4 spk); valid ...' for logs and the study's progress lines."""
    from manifests.select import hhmm
    parts = []
    for split, s in report["splits"].items():
        genders = " ".join(f"{g} {hhmm(v['seconds'], True)} ({v['speakers']} spk)" for g, v in s.items() if g != "all")
        parts.append(f"{split} {genders}")
    return "; ".join(parts)


def build_manifest(table, out, *, gender="balanced", fmt="fairseq", splits=None, seed=0, **kwargs) -> dict:
    """``build_manifests`` with ``splits``: the table's split labels that feed train (e.g. ('pretrain',)).

    The table's valid/dev rows still feed valid (gender-filtered); the returned report has a
    one-line ``summary``.
    """
    options = dict(kwargs.pop("selection_options", None) or {})
    if splits is not None:
        options["train_splits"] = tuple(splits)
    return build_manifests(table, out, gender=gender, fmt=fmt, seed=seed, selection_options=options, **kwargs)


def make_up(report_path: str | os.PathLike) -> dict:
    """Hours and gender percentages of a selection's train split (Table 3 of the study), from
    the selection_report.json `build_manifest` writes."""
    import json

    if not Path(report_path).is_file():
        raise UserError("no selection_report.json: not a `gendergap manifest build` dir", path=Path(report_path).parent,
                        fix="point at the --out dir of the `manifest build` the checkpoint was pretrained on")
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    train = report["splits"]["train"]
    total = sum(v["seconds"] for g, v in train.items() if g != "all")
    pct = {g: 100.0 * train.get(g, {}).get("seconds", 0.0) / total for g in ("M", "F", "U")}
    return {"hours": round(total / 3600, 3), "male_pct": round(pct["M"], 1), "female_pct": round(pct["F"], 1),
            "unknown_pct": round(pct["U"], 1)}
