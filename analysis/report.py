"""Write the study report from a results DB: tables (Markdown, LaTeX, CSV), plots (PNG), report.md.

Files written into the output directory (each atomically):
  report.md                        every table, the significance statements, the figures
  table1_pretraining_data.{md,csv} per pretraining set and corpus: hours and speakers M / F
                                   (only with ``data``: the study's manifest dirs)
  table2_downstream_data.{md,csv}  per downstream data set (a corpus's splits, a selection) and
                                   split: speakers and hours:minutes M, F, B, All (only with ``data``)
  table3_pretraining.{md,tex,csv}  updates, hours, M/F/U % per checkpoint (only with a registry)
  table4_asr.{md,tex,csv}          WER M, F, All, Δrel per checkpoint, one block per ASR task
  table5_st.{md,tex,csv}           BLEU All [M, F], Δrel per checkpoint and language pair
  gender_translation.{md,tex,csv}  MuST-SHE coverage/accuracy per category (+ winomt.csv)
  probes.csv                       gender-probe macro F1 per checkpoint, layer and probe type
  probes_by_layer.png              that macro F1 against layer, one line per checkpoint and probe
  other_scores.csv                 every other row of the chosen subset (recalls, CER, ...)
  delta_rel.png                    Δrel with CI bars per model and task
  per_speaker.png                  per-speaker distributions, from rows whose subset is
                                   ``speaker:<id>`` (written by scorers that keep them)
  .gendergap-outputs.json          the record of the files above (corpora.base.owned_outputs): the
                                   next report replaces or removes those and keeps everything else
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pandas as pd

from analysis import plots, tables
from analysis.conditions_report import SUBSET as CONDITIONS
from analysis.conditions_report import answer_lines, condition_sections
from analysis.mixed_report import SUBSET as MIXED
from analysis.mixed_report import mixed_runs, mixed_section
from analysis.probing.run import probe_table
from analysis.store import ResultsStore
from corpora.base.atomic import atomic_open, swap_in_dir, write_text
from corpora.base.errors import UserError
from corpora.base.leftovers import STALE_AFTER_S, pid_alive  # a day: a leftover of another host's process
from corpora.base.owned_outputs import RECORD, claim, foreign, own_temp_name, write_record
from manifests.stats import downstream_sets_table, pretraining_sets_table

log = logging.getLogger(__name__)
SPEAKER_PREFIX = "speaker:"


def load_scores(db_path: str | os.PathLike) -> pd.DataFrame:
    """All score rows of an existing results DB, cleaned (see analysis.tables.clean_scores)."""
    db_path = Path(db_path)
    if not db_path.is_file():
        raise UserError("no results DB here", path=db_path,
                        fix="pass --db the file your sweeps wrote (default runs/results.db)")
    with ResultsStore(db_path, readonly=True) as store:  # a report never writes to the DB it reads
        raw = store.scores()
    return tables.clean_scores(raw, db_path)


def load_registry(path: str | os.PathLike) -> list[dict]:
    """The entries of a checkpoint-registry JSON (``{"checkpoints": [{name, updates, hours, ...}]}``).

    Read by the boundary's registry reader (corpora.base.registry_file), not through
    ssl_pretrain.registry: analysis/ imports nothing from the training packages.
    """
    from corpora.base.registry_file import read_registry
    path = Path(path)
    fix = "pass --registry the checkpoints.json that `gendergap ckpt add` or `gendergap study` wrote"
    if not path.is_file():
        raise UserError("no checkpoint registry here", path=path, fix=fix)
    return read_registry(path, fix)


def _write_csv(df: pd.DataFrame, path: Path) -> Path:
    with atomic_open(path) as f:
        df.to_csv(f, index=False)
    return path


def write_report(db_path: str | os.PathLike, out_dir: str | os.PathLike, subset: str = "test",
                 registry: str | os.PathLike | None = None, data: dict | None = None,
                 titles: dict[str, str] | None = None) -> dict[str, Path]:
    """Build every table and plot the DB's rows allow; returns {name: path} of what was written.

    ``registry``: a checkpoint-registry JSON; when given, Table 3 (pre-training data) comes first
    and every table lists the checkpoints in the registry's order (each random-init twin after its
    checkpoint). Without it they come in the order their runs were stored, which jobs running in
    parallel make vary from run to run.

    ``data``: the study's data sets, ``{"pretraining": {set: manifest dir}, "downstream": [set, ...]}``
    (manifests.stats.pretraining_sets_table / downstream_sets_table); when given, Tables 1 and 2
    describe them.

    ``titles``: {task: title} of result kinds analysis does not title itself (tables.task_title),
    from whoever knows them: a study hands in those of its task types' registrations.
    """
    out_dir = Path(out_dir)
    entries = load_registry(registry) if registry is not None else None  # bad file: fail before writing
    df, speaker, conditions, mixed = _subset_rows(db_path, subset)
    if entries is not None:
        df, speaker = _registry_order(df, entries), _registry_order(speaker, entries)
    with staged_report(out_dir) as stage:
        written = _write_all(db_path, subset, data, entries, registry, df, speaker, conditions, stage, titles, mixed)
    return {name: out_dir / path.name for name, path in written.items()}


def _write_all(db_path, subset: str, data: dict | None, entries: list[dict] | None, registry, df: pd.DataFrame,
               speaker: pd.DataFrame, conditions: pd.DataFrame, out_dir: Path,
               titles: dict[str, str] | None = None, mixed: pd.DataFrame | None = None) -> dict[str, Path]:
    """Every file of the report, written into ``out_dir`` (the staging directory). The answer to the
    study's question comes first; the conditions' tables follow the score tables they compare, and
    the per-utterance mixed models (analysis.mixed_report) follow the comparisons."""
    written: dict[str, Path] = {}
    md = _intro(db_path, subset, df) + answer_lines(conditions)
    if data:
        md += _data_sections(data, out_dir, written)
    if entries is not None:
        md += _pretraining_section(entries, df, out_dir, written, registry)
    asr, st = tables.asr_table(df), tables.st_table(df)
    md += _asr_section(asr, out_dir, written, titles)
    md += _st_section(st, out_dir, written)
    md += condition_sections(conditions, out_dir, written, _write_csv, titles)
    md += mixed_section(mixed if mixed is not None else df.iloc[:0], mixed_runs(db_path), out_dir, written, _write_csv,
                        titles)
    md += _mustshe_section(df, out_dir, written)
    md += _winomt_section(df, out_dir, written)
    md += _probes_section(df, out_dir, written)
    md += _other_section(df, asr, st, out_dir, written, titles)
    md += _figures_section(asr, st, speaker, out_dir, written)
    if len(written) == 0:
        tasks = ", ".join(tables._order(df["task"]))
        log.warning("no table matched the DB's tasks (%s); only report.md is written", tasks)
    written["report.md"] = _text(out_dir / "report.md", "\n".join(md) + "\n")
    return written


# --- all files or none: the report is built in a sibling directory and swapped in ----------------------
# Files written one by one into DIR leave, after a kill or a full disk, a new table4 next to an old
# report.md. So the report goes into DIR/../.DIR.<pid>.<random>.partial and replaces DIR at the end.
# What the report wrote is recorded in DIR (corpora.base.owned_outputs.RECORD); every other file or
# folder in DIR (a user's notes, .git/, .gitignore, a table1_notes.md) is carried over, whatever its name.
COMMAND = "gendergap report"
# The names the sections above give their files. Only for telling the report's own files in a folder:
# a record (or a folder an earlier version wrote without one) makes the report drop only these.
REPORT_FILES = re.compile(r"report\.md|table[12]_(pretraining|downstream)_data\.(md|csv)|winomt\.csv|other_scores\.csv"
                          r"|(table3_pretraining|table4_asr|table5_st|gender_translation|conditions_[A-Za-z0-9_-]+)"
                          r"\.(md|tex|csv)|probes\.csv|mixed_[A-Za-z0-9_-]+\.(md|csv)"
                          r"|(delta_rel|per_speaker|probes_by_layer|trend_[A-Za-z0-9_-]+|f0_[A-Za-z0-9_-]+)\.png")
FIX = "pass --out a new or empty folder, or one an earlier report wrote"


@contextlib.contextmanager
def staged_report(out_dir: Path):
    """Yield an empty staging directory; on success it becomes ``out_dir``, else it is removed."""
    out_dir = Path(out_dir).resolve()  # a symlinked report folder: swap at its target, keep the link
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError("the report's output path exists and is not a directory", path=out_dir,
                        fix="pass --out a directory (new or holding an earlier report)")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(out_dir)
    # before anything is built: a folder of the user's own is refused, never emptied
    before = frozenset(n for n in claim(out_dir, COMMAND, fix=FIX, legacy=_earlier_report) if REPORT_FILES.fullmatch(n))
    try:
        stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.{os.getpid()}.", suffix=".partial",
                                      dir=out_dir.parent))
    except OSError as e:  # a read-only or full file system: name the user's directory, not our temp one
        raise OSError(e.errno, e.strerror, str(out_dir)) from e
    try:
        yield stage
        written = {p.name for p in stage.iterdir()}
        if out_dir.is_dir():
            _carry_the_rest(out_dir, stage, before, written)
        write_record(stage, COMMAND, written)
        swap_in_dir(stage, out_dir, prefix=f".{out_dir.name}.{os.getpid()}.")   # clean_stale knows the pid
    except OSError as e:
        shutil.rmtree(stage, ignore_errors=True)
        if e.filename is None or str(stage) in str(e.filename):  # name the user's directory, not our temp one
            raise OSError(e.errno, e.strerror, str(out_dir)) from e
        raise
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise


def _carry_the_rest(out_dir: Path, stage: Path, before: frozenset[str], written: set[str]) -> None:
    """Carry into ``stage`` every entry of ``out_dir`` but the earlier report's files (``before``), its
    record and the temp files of its atomic writes; a file of the user's named as a file the report
    writes now is refused rather than replaced."""
    clash = foreign(out_dir, written, before)
    if clash is not None:
        raise UserError(f"the report writes {clash}, and the folder holds a {clash} the report did not write",
                        path=out_dir / clash, fix="move or rename that file, or pass --out another folder")
    ours = before | written | {RECORD}
    for f in out_dir.iterdir():
        if f.name not in ours and not own_temp_name(f.name, ours.__contains__):
            _carry(f, stage / f.name)


def _earlier_report(folder: Path, entries: list[str]) -> frozenset[str] | None:
    """The files of a report folder written by a version that kept no record: accepted when it holds
    report.md and nothing but files named as the report names its files (and their temp files); one
    holding anything else is refused, as the report cannot tell which of them it wrote."""
    if "report.md" not in entries:
        return None
    files = [n for n in entries if not own_temp_name(n, lambda t: bool(REPORT_FILES.fullmatch(t)))]
    odd = next((n for n in files if not REPORT_FILES.fullmatch(n) or (folder / n).is_symlink()
                or not (folder / n).is_file()), None)
    if odd is not None:
        raise UserError(f"the folder holds an earlier report and {odd}, which is not a report file; the version "
                        f"that wrote it kept no record of its files ({RECORD}), so the report cannot tell "
                        "them from yours", path=folder,
                        fix=f"move {odd} and your other files out of it for one run (they are kept from then on), "
                            "or pass --out a new folder")
    return frozenset(files)


def _carry(src: Path, dst: Path) -> None:
    """A hard link (no copy, and removing the stage on failure leaves the original), else a copy; a
    folder (a user's .git/) is copied as links the same way, its symlinks as symlinks."""
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
        return
    _link_or_copy(src, dst)


def _link_or_copy(src, dst) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def clean_stale(out_dir: Path) -> None:
    """Deal with what an earlier report into ``out_dir`` left when it was killed: its staging and swap
    directories (named by this module, with the pid of a process that is gone, or a day old). A kill
    between the swap's two renames leaves ``out_dir`` absent and its old content in the swap
    directory: that is put back, not removed. Nothing inside ``out_dir`` is touched here."""
    pattern = re.compile(re.escape(f".{out_dir.name}.") + r"(\d{1,9})\.[a-z0-9_]+\.(partial|old)")
    found = []
    for p in out_dir.parent.iterdir():
        m = pattern.fullmatch(p.name)
        if m and p.is_dir() and not p.is_symlink() and (not pid_alive(int(m.group(1)))
                                                        or time.time() - p.stat().st_mtime > STALE_AFTER_S):
            found.append((m.group(2) == "partial", p))   # the .old ones first: one may hold out_dir
    for _, p in sorted(found):
        if p.name.endswith(".old") and not os.path.lexists(out_dir) and (p / "dir").is_dir():
            log.warning("restoring %s, which an interrupted report had moved aside", out_dir)
            os.replace(p / "dir", out_dir)
        log.info("removing %s, left by an interrupted report", p)
        shutil.rmtree(p, ignore_errors=True)


def _registry_order(df: pd.DataFrame, entries: list[dict]) -> pd.DataFrame:
    """The rows, stably sorted so that checkpoints come in registry order (tables list checkpoints
    in the order they first appear); a twin ``NAME+random-init`` follows NAME, and names the
    registry does not hold (FBANK, imported rows) keep their places after those it does."""
    rank = {e["name"]: i for i, e in enumerate(entries)}
    twin = plots.RANDOM_INIT_SUFFIX

    def key(name: str) -> float:
        base = name[:-len(twin)] if name.endswith(twin) else name
        return rank[base] + (0.5 if base != name else 0) if base in rank else len(rank)
    if df.empty:
        return df
    return df.iloc[df["checkpoint"].map(key).argsort(kind="stable")]


def _subset_rows(db_path: str | os.PathLike, subset: str) -> tuple[pd.DataFrame, ...]:
    """The DB's rows of ``subset`` (not empty), its per-speaker rows with a ``speaker`` column, its
    conditions rows (analysis.conditions) and its mixed-model rows (analysis.mixed_model)."""
    scores = load_scores(db_path)
    conditions = scores[scores["subset"] == CONDITIONS]
    mixed = scores[scores["subset"] == MIXED]
    speaker = scores[scores["subset"].astype(str).str.startswith(SPEAKER_PREFIX)].copy()
    speaker["speaker"] = speaker["subset"].str[len(SPEAKER_PREFIX):]
    df = scores[scores["subset"] == subset]
    if df.empty:
        found = sorted(set(scores["subset"]) - set(speaker["subset"]) - {CONDITIONS, MIXED})
        raise UserError(f"no scores for subset {subset!r} (subsets in the DB: {', '.join(found) or 'none'})",
                        path=db_path, fix="pass --subset one of those")
    return df, speaker, conditions, mixed


def _intro(db_path: str | os.PathLike, subset: str, df: pd.DataFrame) -> list[str]:
    return ["# Gender gap report\n", f"Results DB: `{db_path}`; subset: `{subset}`; {len(df)} score rows from "
            f"{df['run_id'].nunique()} run(s).\n",
            "Δrel = 100 (F − M) / (0.5 (F + M)) (reference study, Eq. 1): for WER a negative Δrel means "
            "women are recognised better; for BLEU a positive Δrel means women's speech is translated better. "
            "Numbers in parentheses are 95% confidence intervals; a Δrel whose CI contains 0 is not "
            "significant. A task trained with several seeds shows mean ± sd over seeds, and its CI "
            "resamples speakers within each seed's output and pools the seeds (analysis/seeds.py); its gap is "
            "called only when that CI excludes 0 and |Δrel| exceeds the seed sd. FBANK (80-d log-mel "
            "filterbanks, no pretraining) is the reference row: the gap the downstream model has on its own.\n"]


def _table_files(out_dir: Path, written: dict[str, Path], stem: str, markdown: str, latex: str,
                 frame: pd.DataFrame) -> None:
    """The three files of one table: STEM.md, STEM.tex and STEM.csv (its rows, unrounded)."""
    written[f"{stem}.md"] = _text(out_dir / f"{stem}.md", markdown)
    written[f"{stem}.tex"] = _text(out_dir / f"{stem}.tex", latex)
    written[f"{stem}.csv"] = _write_csv(frame, out_dir / f"{stem}.csv")


def _asr_section(asr: pd.DataFrame, out_dir: Path, written: dict[str, Path],
                 titles: dict[str, str] | None = None) -> list[str]:
    """Table 4 files (md, tex, csv) and its report.md lines."""
    if not len(asr):
        return []
    blocks = tables.asr_blocks(asr, titles)
    body = "".join(f"**{title}**\n\n" + tables.markdown_table(tables.ASR_HEADER, rows) + "\n"
                   for title, rows in blocks)
    _table_files(out_dir, written, "table4_asr", body,
                 tables.latex_table(tables.ASR_HEADER, blocks, tables.ASR_CAPTION, "tab:asr"), asr)
    return ["## Table 4 — ASR (WER, %)\n", body, *tables.significance_lines(asr, "WER"),
            *tables.noise_level_lines(asr), ""]


def _st_section(st: pd.DataFrame, out_dir: Path, written: dict[str, Path]) -> list[str]:
    """Table 5 files (md, tex, csv) and its report.md lines."""
    if not len(st):
        return []
    header, rows = tables.st_layout(st)
    body = tables.markdown_table(header, rows)
    _table_files(out_dir, written, "table5_st", body,
                 tables.latex_table(header, [("", rows)], tables.ST_CAPTION, "tab:st"), st)
    return ["## Table 5 — Speech translation (BLEU)\n", body, *tables.significance_lines(st, "BLEU"), ""]


def _mustshe_section(df: pd.DataFrame, out_dir: Path, written: dict[str, Path]) -> list[str]:
    ms = tables.mustshe_table(df)
    if not len(ms):
        return []
    header, rows = tables.mustshe_layout(ms)
    body = tables.markdown_table(header, rows)
    _table_files(out_dir, written, "gender_translation", body, tables.latex_table(
        header, [("", rows)], "MuST-SHE term coverage and gender accuracy (%), per category; BLEU against "
        "the correct and the wrong references.", "tab:mustshe"), ms)
    return ["## Gender translation — MuST-SHE\n",
            "Coverage = gender-marked terms found / annotated; accuracy = correct / (correct + wrong) among "
            "those found (1 = speaker talks about themselves, 2 = about others; F/M = required form).\n",
            body, ""]


def _winomt_section(df: pd.DataFrame, out_dir: Path, written: dict[str, Path]) -> list[str]:
    wino = tables.winomt_table(df)
    if not len(wino):
        return []
    header, rows = tables.winomt_layout(wino)
    written["winomt.csv"] = _write_csv(wino, out_dir / "winomt.csv")
    return ["## Gender translation — WinoMT\n", "ΔG = F1(male) − F1(female); ΔS = acc(pro) − acc(anti); "
            "unknown entities count as wrong.\n", tables.markdown_table(header, rows), ""]


def _probes_section(df: pd.DataFrame, out_dir: Path, written: dict[str, Path]) -> list[str]:
    """Checkpoint x layer rows, one column per probe type: what each layer encodes about gender,
    with the random-init twins and the shuffled-label controls next to the real probes."""
    probes = probe_table(df)
    probes = probes[(probes["measure"] == "f1_macro") & (probes["gender"] == "all")]
    if not len(probes):
        return []
    grid = probes.pivot_table(index=["checkpoint", "layer"], columns="probe", values="value").reset_index()
    rank = {c: i for i, c in enumerate(tables.checkpoint_order(probes["checkpoint"]))}
    grid = grid.iloc[grid["checkpoint"].map(rank).argsort(kind="stable")].reset_index(drop=True)
    written["probes.csv"] = _write_csv(grid, out_dir / "probes.csv")
    header = ["checkpoint", "layer"] + [str(c) for c in grid.columns[2:]]
    rows = [[tables.label(r["checkpoint"]), str(int(r["layer"]))] + [f"{r[c]:.1f}" if pd.notna(r[c]) else "-"
                                                            for c in grid.columns[2:]] for _, r in grid.iterrows()]
    md = ["## Gender probes — test macro F1 (%) by layer\n",
          "Layer 0 is the transformer's input. `+random-init` rows are the same architecture with random "
          "weights; `+shuffled` columns are probes trained on shuffled labels (should stay near 50).\n",
          tables.markdown_table(header, rows), ""]
    p = plots.plot_probes_by_layer(grid, out_dir / "probes_by_layer.png")
    if p:
        written["probes_by_layer.png"] = p
        md += [f"![Gender probe macro F1 by layer]({p.name})\n"]
    return md


def _other_section(df: pd.DataFrame, asr: pd.DataFrame, st: pd.DataFrame, out_dir: Path,
                   written: dict[str, Path], titles: dict[str, str] | None = None) -> list[str]:
    """Everything no table above shows (CER, MuST-SHE by speaker gender...) goes to a CSV; a task
    with a title handed in is named with it."""
    seeds = ["wer:seed_sd", "wer:n_seeds", "bleu:seed_sd", "bleu:n_seeds"]  # shown as ± sd in the tables
    shown = ((df["task"].isin(set(asr.get("task", []))) & df["metric"].isin(["wer", "delta_rel", *seeds]))
             | (df["task"].isin(set(st.get("task", []))) & df["metric"].isin(["bleu", "delta_rel", *seeds]))
             | df["task"].isin(["mustshe", "winomt"])
             | ((df["task"] == "probe") & df["metric"].str.startswith("f1_macro:") & (df["gender"] == "all")))
    other = df[~shown]
    if not len(other):
        return []
    cols = ["checkpoint", "task", "lang_pair", "gender", "metric", "value", "ci_low", "ci_high", "n_utts",
            "n_speakers", "signature", "run_id"]
    written["other_scores.csv"] = _write_csv(other[cols], out_dir / "other_scores.csv")
    named = [f"{t} ({titles[t]})" if t in (titles or {}) else str(t) for t in tables._order(other["task"])]
    return ["## Other scores\n", f"{len(other)} row(s) of task(s) {', '.join(named)}: see `other_scores.csv`.\n"]


def _figures_section(asr: pd.DataFrame, st: pd.DataFrame, speaker: pd.DataFrame, out_dir: Path,
                     written: dict[str, Path]) -> list[str]:
    figures = []
    p = plots.plot_delta_rel([("WER", asr), ("BLEU", st)], out_dir / "delta_rel.png")
    if p:
        written["delta_rel.png"] = p
        figures.append(("Δrel with 95% CI per model and task", p.name))
    p = plots.plot_per_speaker(speaker, out_dir / "per_speaker.png")
    if p:
        written["per_speaker.png"] = p
        figures.append(("Per-speaker scores", p.name))
    return ["## Figures\n"] + [f"![{title}]({name})\n" for title, name in figures] if figures else []


def _data_sections(data: dict, out_dir: Path, written: dict[str, Path]) -> list[str]:
    """Tables 1 and 2 (the study's pretraining and downstream data), from the selection files."""
    md = []
    for stem, title, frame in (
            ("table1_pretraining_data", "Table 1 — pre-training data (train split; duration and speakers, M / F)",
             pretraining_sets_table(data.get("pretraining") or {})),
            ("table2_downstream_data", "Table 2 — downstream data (B = speakers of both genders)",
             downstream_sets_table(data.get("downstream") or []))):
        if not len(frame):
            continue
        body = tables.markdown_table(list(frame.columns), [[str(v) for v in r] for r in frame.itertuples(index=False)])
        written[f"{stem}.md"] = _text(out_dir / f"{stem}.md", body)
        written[f"{stem}.csv"] = _write_csv(frame, out_dir / f"{stem}.csv")
        md += [f"## {title}\n", body, ""]
    return md


def _pretraining_section(entries: list[dict], df: pd.DataFrame, out_dir: Path, written: dict[str, Path],
                         registry: str | os.PathLike) -> list[str]:
    """Table 3 files and its report.md lines: every registry entry (the table describes the models,
    scored or not), plus a note naming scored checkpoints the registry does not describe."""
    md = ["## Table 3 — pre-training data\n", f"From the checkpoint registry `{registry}`; `-` = not recorded.\n"]
    t = tables.pretraining_table(entries)
    if len(t):
        header, rows = tables.pretraining_layout(t)
        body = tables.markdown_table(header, rows)
        written["table3_pretraining.md"] = _text(out_dir / "table3_pretraining.md", body)
        written["table3_pretraining.tex"] = _text(out_dir / "table3_pretraining.tex", tables.latex_table(
            header, [("", rows)], tables.PRETRAINING_CAPTION, "tab:pretraining"))
        written["table3_pretraining.csv"] = _write_csv(t, out_dir / "table3_pretraining.csv")
        md += [body, ""]
    else:
        md.append("The registry lists no checkpoints.\n")
    # random-init twins and reference rows (FBANK) have no pre-training: nothing to describe
    scored = [c for c in tables._order(df["checkpoint"])
              if not str(c).endswith("+random-init") and not tables.is_reference(c)]
    known = set(t["model"])
    missing = [c for c in scored if c not in known]
    if missing:
        md.append(f"Scored but not in the registry: {', '.join(map(str, missing))}.\n")
    return md


def _text(path: Path, text: str) -> Path:
    write_text(path, text)
    return path
