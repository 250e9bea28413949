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
from corpora.base.boundary import finite, read_json
from corpora.base.errors import UserError
from corpora.base.provenance import engine_versions, git_sha
from corpora.base.textfile import read_lines
from corpora.table import write_table
from corpora.utterances import UtteranceTable
from manifests.export_fairseq import export_wav2vec
from manifests.export_kaldi import export_kaldi
from manifests.export_lhotse import export_lhotse
from manifests.export_s2t import export_s2t
from manifests.export_speechbrain import export_speechbrain
from manifests.select import hhmm
from manifests.splits import build_selection

FORMATS = ("fairseq", "s2t", "speechbrain", "kaldi", "lhotse")


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
    lines = read_lines(path, "id list")
    first = lines[0] if lines else ""
    if "\t" in first and column in first.split("\t"):
        table = UtteranceTable.load(path, validate=False).rows
        if column == "speaker" and "corpus" in table.columns:
            return sorted(set(zip(table["corpus"].astype(str), table["speaker"].astype(str))))
        return sorted(set(table[column]))
    return [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]


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
    if fmt == "lhotse":
        return export_lhotse(splits, out_dir, text_column=options.get("text_column") or "text")
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
    loaded = UtteranceTable.load(table)   # one table, or several merged (corpora.merge)
    df = loaded.rows
    exclude_speakers = read_id_list(exclude_speakers_file) if exclude_speakers_file else []
    exclude_ids = read_id_list(exclude_ids_file, column="id") if exclude_ids_file else []
    sel = build_selection(df, gender, hours=hours, hours_per_gender=hours_per_gender, valid_hours=valid_hours,
                          seed=seed, exclude_speakers=exclude_speakers, exclude_ids=exclude_ids, source=loaded.source,
                          **(selection_options or {}))
    final = Path(out).absolute()
    with staged_output(final, overwrite=overwrite) as stage:
        splits = {}
        for name, rows in sel.splits.items():
            rows = UtteranceTable(rows, loaded.sources).audio_rows()   # a Kaldi pipe refused
            write_table(rows, stage / f"selection_{name}.tsv")
            splits[name] = rows
        summary = export(fmt, splits, stage, final, **(export_options or {}))
        report = dict(sel.report, format=fmt, export=summary, summary=_one_line(sel.report),
                      provenance={"table": loaded.fingerprint, "git_sha": git_sha(),
                                  "versions": engine_versions()})
        write_json(stage / "selection_report.json", report)
    return report


def _one_line(report: dict) -> str:
    """'train F 0:10:00 (4 spk) M 0:10:00 (4 spk); valid ...' for logs and the study's progress lines."""
    return "; ".join(f"{split} {_genders(s, ' ')}" for split, s in report["splits"].items())


def _genders(split: dict, sep: str) -> str:
    """'F 0:10:00 (4 spk)<sep>M 0:10:00 (4 spk)': one split's hours and speakers per gender."""
    return sep.join(f"{g} {hhmm(v['seconds'], True)} ({v['speakers']} spk)" for g, v in split.items() if g != "all")


def split_lines(report: dict) -> list[str]:
    """'train: N utterances, H:MM:SS h:mm:ss -- F ... (S spk), M ...': one line per selected split."""
    return [f"{split}: {s['all']['rows']} utterances, {hhmm(s['all']['seconds'], True)} h:mm:ss -- "
            f"{_genders(s, ', ')}" for split, s in report["splits"].items()]


def dropped_lines(report: dict) -> list[str]:
    """'dropped N rows (H:MM): REASON': one line per reason the selection left rows out."""
    return [f"dropped {d['rows']} rows ({d['hours']}): {d['reason']}" for d in report["dropped"]]


def prepared_audio_line(report: dict, resample: int | None) -> str | None:
    """How many files the export read from resampled copies in the prepared-audio cache (None: no cache used)."""
    if not (report["export"].get("audio_cache") or resample):
        return None
    n = report["export"].get("prepared")
    if n is None:   # kaldi: a summary per split
        n = sum(v.get("prepared", 0) for v in report["export"].values() if isinstance(v, dict))
    return f"audio: {n} file(s) read from {resample} Hz copies in the prepared-audio cache"


def parse_corpus_hours(items: list[str] | None) -> dict | None:
    """``['MLS=100', 'EPAC=20.5']`` (--corpus-hours, repeated) -> {'MLS': 100.0, 'EPAC': 20.5}."""
    if not items:
        return None
    caps = {}
    for item in items:
        name, sep, hours = item.partition("=")
        try:
            caps[name] = float(hours)
        except ValueError:
            caps[name] = None
        if not sep or not name or caps[name] is None:
            raise UserError(f"bad --corpus-hours {item!r}", fix="write CORPUS=HOURS, e.g. --corpus-hours MLS=100")
    return caps


def build_from_options(*, table, out, gender, format, hours=None, hours_per_gender=None, valid_hours=None, seed=0,
                       exclude_speakers=None, exclude_ids=None, holdout_split=None, train_split=None, corpus=None,
                       corpus_hours=None, downsample_corpus=None, drop_mixed_speakers=False, keep_unknown=False,
                       overwrite=False, root=None, materialise="auto", resample=None, audio_cache=None,
                       audio_format="flac", jobs=None, text_column=None, tgt_lang=None, vocab_size=None,
                       feature_template=None, n_frames_column=None, audio_root=None, data_root=None) -> dict:
    """`gendergap manifest build`: build_manifests with the command's options, by their names (see
    its --help; None = not given, ``holdout_split`` None = ['test']). Returns the report."""
    if resample and format not in ("fairseq", "kaldi"):
        raise UserError(f"--resample is for --format fairseq or kaldi, not {format}",
                        fix="leave it out: s2t features and the SpeechBrain pipeline resample where they read audio")
    return build_manifests(
        table, out, gender=gender, fmt=format, hours=hours, hours_per_gender=hours_per_gender,
        valid_hours=valid_hours, seed=seed, exclude_speakers_file=exclude_speakers, exclude_ids_file=exclude_ids,
        overwrite=overwrite,
        selection_options={"mixed_speakers": "drop" if drop_mixed_speakers else "error",
                           "corpora": corpus or None, "corpus_hours": parse_corpus_hours(corpus_hours),
                           "downsample_corpora": downsample_corpus or None,
                           "holdout_splits": tuple(holdout_split) if holdout_split is not None else ("test",),
                           "train_splits": tuple(train_split) if train_split else None,
                           "exclude_unknown": None if not keep_unknown else False},
        export_options={"root": root, "materialise": materialise, "text_column": text_column,
                        "resample": resample, "audio_cache": audio_cache, "jobs": jobs, "audio_format": audio_format,
                        "tgt_lang": tgt_lang, "vocab_size": vocab_size, "feature_template": feature_template,
                        "n_frames": n_frames_column, "audio_root": audio_root, "data_root": data_root})


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
    if not os.path.lexists(report_path):   # one that is there but not a regular file: read_json names what it is
        raise UserError("no selection_report.json: not a `gendergap manifest build` dir", path=Path(report_path).parent,
                        fix="point at the --out dir of the `manifest build` the checkpoint was pretrained on")
    fix = "build the manifests again (gendergap manifest build): the report was edited or damaged"
    report = read_json(report_path, "selection report", shape=dict, fix=fix)
    train = (report.get("splits") or {}).get("train") if isinstance(report.get("splits"), dict) else None
    if not isinstance(train, dict) or not all(isinstance(v, dict) for v in train.values()):
        raise UserError("the selection report has no splits.train of {gender: {seconds: ...}}", path=report_path,
                        fix=fix)
    seconds = {g: finite(v.get("seconds", 0.0), f"splits.train.{g}.seconds", lo=0, hi=1e12, path=report_path)
               for g, v in train.items() if g != "all"}
    total = sum(seconds.values())
    if total <= 0:
        raise UserError("the selection report's train split has no audio", path=report_path, fix=fix)
    pct = {g: 100.0 * seconds.get(g, 0.0) / total for g in ("M", "F", "U")}
    return {"hours": round(total / 3600, 3), "male_pct": round(pct["M"], 1), "female_pct": round(pct["F"], 1),
            "unknown_pct": round(pct["U"], 1)}
