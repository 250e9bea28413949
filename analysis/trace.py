"""From a number in a report back to what made it: score rows -> run -> study step.

Every table CSV the report writes carries, per row, the results-DB id of the score behind each
cell (``M_score_id``, ``F_score_id``, ``all_score_id``, ``delta_rel_score_id``) and the run ids
(``run_ids``). The store links each score to its run (config, git sha, versions, seed, input
files, log) and each run to the study step that made it (kind, name, typed fields, key): two
lookups from any cell.

    ids = cell_score_ids("study/report", "table4", "asr-frozen:B-tiny", "WER All")
    chain = trace_scores("study/results.db", ids)
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pandas as pd

from analysis.store import ResultsStore
from corpora.base.boundary import parse_json
from corpora.base.errors import UserError

# a cell's column: the gender (or Δrel) part of what the Markdown table shows -> the CSV's id column
_GENDER_WORDS = {"all": "all", "f": "F", "m": "M", "δrel": "delta_rel", "Δrel": "delta_rel", "delta_rel": "delta_rel",
                 "drel": "delta_rel", "delta": "delta_rel"}


def report_table(report_dir: str | os.PathLike, table: str) -> tuple[Path, pd.DataFrame]:
    """The CSV of ``table`` (``table4``, ``table5``, or a file stem) in a report directory."""
    report_dir = Path(report_dir)
    hits = sorted(report_dir.glob(f"{table}*.csv")) if report_dir.is_dir() else []
    if not hits:
        known = ", ".join(sorted(p.stem for p in report_dir.glob("table*.csv"))) if report_dir.is_dir() else "none"
        raise UserError(f"no table {table!r} in this report", path=report_dir,
                        fix=f"name one of its tables ({known or 'none'}), e.g. table4 or table5")
    return hits[0], pd.read_csv(hits[0], dtype=str, keep_default_na=False)


def cell_score_ids(report_dir: str | os.PathLike, table: str, row: str, column: str) -> list[int]:
    """Score ids behind one cell. ``row``: the checkpoint, qualified by task and/or language pair
    when it is on several rows (``asr-frozen:B-tiny``, ``fr-en:B-tiny``). ``column``: as the
    Markdown table heads it (``WER All``, ``F``, ``Δrel, %``, ``fr-en All``)."""
    path, df = report_table(report_dir, table)
    if "checkpoint" not in df.columns or not any(c.endswith("_score_id") for c in df.columns):
        raise UserError("this table carries no score ids", path=path,
                        fix="re-run `gendergap report` with this gendergap (older reports lack them)")
    direct = re.sub(r"[^a-z0-9]+", "_", column.strip().lower()).strip("_")
    words = [w for w in re.split(r"[\s,%\[\]]+", column.strip()) if w]
    pairs = [w for w in words if re.fullmatch(r"[a-z]{2,3}-[a-z]{2,3}", w)]
    genders = [_GENDER_WORDS[w.lower()] if w.lower() in _GENDER_WORDS else _GENDER_WORDS.get(w) for w in words]
    genders = [g for g in genders if g]
    if f"{direct}_score_id" in df.columns:   # a column named as the CSV names it (mixed_*: ratio, ratio adjusted)
        genders = [direct]
    if len(genders) != 1:
        raise UserError(f"column {column!r} names no single cell", path=path,
                        fix="say M, F, All or Δrel (with the pair for Table 5: 'fr-en All')")
    rows = df
    for part in row.split(":"):
        hit = rows[(rows["checkpoint"] == part) | (rows.get("task", "") == part) | (rows.get("lang_pair", "") == part)]
        rows = hit
    for pair in pairs:
        rows = rows[rows["lang_pair"] == pair]
    if len(rows) != 1:
        where = ", ".join(":".join(x for x in (r.get("task", ""), r.get("lang_pair", ""), r["checkpoint"]) if x)
                          for _, r in df.iterrows())
        raise UserError(f"row {row!r}{' ' + pairs[0] if pairs else ''} matches {len(rows)} rows", path=path,
                        fix=f"name one of: {where}")
    ids = str(rows.iloc[0].get(f"{genders[0]}_score_id", "")).split()
    if not ids:
        raise UserError(f"cell {row!r} / {column!r} has no stored score (Δrel computed from F and M?)", path=path,
                        fix="trace its F and M cells instead")
    return [int(float(i)) for i in ids]


def trace_scores(db: str | os.PathLike, score_ids: list[int] | None = None, run_id: int | None = None) -> dict:
    """{scores: [...], runs: [{..., step}]}: each score row, its run (config, git sha, versions,
    seed, inputs, log) and the run's study step (kind, name, key, fields), or None for a run made
    by a command typed by hand."""
    with ResultsStore(db, readonly=True) as store:
        conn = store.conn
        if score_ids:
            marks = ",".join("?" * len(score_ids))
            scores = pd.read_sql_query(f"SELECT * FROM scores WHERE id IN ({marks}) ORDER BY id", conn,
                                       params=[int(i) for i in score_ids])
            if len(scores) != len(set(score_ids)):
                missing = sorted(set(map(int, score_ids)) - set(scores["id"]))
                raise UserError(f"no score row with id {missing[0]} in this DB", path=db,
                                fix="pass the DB the report was made from (--db)")
            run_ids = list(dict.fromkeys(int(r) for r in scores["run_id"]))
        else:
            scores = pd.read_sql_query("SELECT * FROM scores WHERE run_id = ? ORDER BY id", conn, params=[int(run_id)])
            run_ids = [int(run_id)]
        runs = []
        for rid in run_ids:
            row = pd.read_sql_query("SELECT * FROM runs WHERE id = ?", conn, params=[rid])
            if row.empty:
                raise UserError(f"no run with id {rid} in this DB", path=db, fix="pass the DB the report was made from")
            run = row.iloc[0].to_dict()
            for key in ("config", "versions", "inputs"):
                run[key] = parse_json(run[key], f"run {rid}'s {key}", path=db) if run.get(key) else None
            run["step"] = store.step_of(rid)
            runs.append(run)
    return {"scores": scores.to_dict("records"), "runs": runs}


def trace_target(*, report: str | None = None, cell: list[str] | None = None, db: str | None = None,
                 score: list[int] | None = None, run: int | None = None) -> tuple[list[int] | None, str]:
    """(score ids, results DB) that `gendergap trace` follows: a report's cell (the DB beside the
    report unless ``db``), or score ids / a run id of ``db``."""
    if report:
        if len(cell or []) != 3:
            raise UserError("--report needs a cell: TABLE ROW COLUMN", fix='e.g. table4 asr-frozen:B-tiny "WER All"')
        return cell_score_ids(report, *cell), db or str(Path(report).resolve().parent / "results.db")
    if score or run is not None:
        if not db:
            raise UserError("--score/--run need --db", fix="e.g. --db study/results.db")
        return score, db
    raise UserError("nothing to trace", fix="give --report DIR TABLE ROW COLUMN, --score ID or --run ID")


def render_chain(chain: dict, db: str) -> str:
    """The chain for people: score rows, then each run with its inputs, its step and the commands
    that redo it (``run["commands"]``, set by the caller)."""
    out = [f"results DB: {db}", "", "score rows:"]
    for s in chain["scores"]:
        ci = "" if s.get("ci_low") is None else f" ({s['ci_low']:.2f}, {s['ci_high']:.2f})"
        what = " ".join(str(s[k]) for k in ("checkpoint", "task", "lang_pair", "subset", "gender", "metric") if s[k])
        out.append(f"  #{s['id']} run {s['run_id']}: {what} = {s['value']:.4f}{ci}, {s['n_utts']} utterances, "
                   f"{s['n_speakers']} speakers")
        if s.get("signature"):
            out.append(f"      signature: {s['signature']}")
    for r in chain["runs"]:
        out += ["", *_run_lines(r)]
    return "\n".join(out)


def _run_lines(r: dict) -> list[str]:
    out = [f"run {r['id']}: {r['kind']} {r['name']} ({r['status']}), config {r['config_hash'][:12]}, "
           f"git {r['git_sha']}, seed {r['seed']}",
           f"  log: {r['log_path'] or '-'}",
           "  versions: " + ", ".join(f"{k} {v}" for k, v in (r["versions"] or {}).items()),
           "  inputs:"]
    for i in r["inputs"] or []:
        out.append("    " + (f"{i.get('path')} ({i.get('size')} bytes, mtime {i.get('mtime')})"
                              if isinstance(i, dict) else str(i)))
    step = r["step"]
    if step is None:
        return out + ["  step: none (a command run by hand)"]
    out += [f"  step {step['name']} ({step['kind']}), key {step['key']}",
            "    fields: " + json.dumps(step["fields"], default=str)]
    if r["commands"]:
        return out + ["  redo exactly this step (outputs under the --into dir):", *(f"    {c}" for c in r["commands"])]
    return out + ["  redo: `gendergap sweep --config CONFIG --out OUT --only <task>` (no single CLI leaf)"]
