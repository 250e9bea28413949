"""The paper's tables from results-store rows: Table 4 (ASR WER), Table 5 (ST BLEU), gender translation.

Each table is first built as a numeric DataFrame (what the CSV holds), then rendered as Markdown
or LaTeX. Row conventions read from the store (analysis.store.ResultsStore.scores()):

* ASR: task ``asr-hybrid`` / ``asr-frozen`` / ``asr-e2e`` (any ``asr-*``), metric ``wer``, gender
  ``M``/``F``/``all``; ST: task ``st``, metric ``bleu``, one ``lang_pair`` per column block.
* Δrel: a row with gender ``delta_rel`` (metric ``wer``/``bleu`` or ``delta_rel``) of the same
  checkpoint/task/lang_pair/subset, with its CI; when absent it is computed from F and M
  (Eq. 1 of the reference study: 100 (F - M) / (0.5 (F + M))) and has no CI.
* Seeds: a task trained with several seeds stores the mean over seeds as its value, the pooled
  seed-and-speaker CI (analysis/seeds.py), the sd over seeds as metric ``<metric>:seed_sd`` and
  the seed count as ``<metric>:n_seeds``; the tables show ``mean ± sd (CI)``.
* A gap is called ("significant") only when the Δrel CI excludes 0 and, with seeds, the mean
  Δrel also exceeds the seed sd in size.
* Reference rows: ``FBANK`` (filterbanks, no pretraining) is listed after the pretrained models
  and marked, as SUPERB lists its FBANK row.
* MuST-SHE: task ``mustshe`` (see analysis.mustshe.score_rows_for_store); WinoMT: ``winomt``.
* Table 3 (pre-training data) is built from checkpoint-registry entries (dicts with name,
  updates, hours, male_pct, female_pct, unknown_pct), not from score rows.
* When a key was scored more than once, the latest row (highest id) wins.
"""
from __future__ import annotations

import math
import os
import unicodedata

import numpy as np
import pandas as pd

from analysis.delta import delta_rel
from corpora.base.errors import UserError
from corpora.base.reserved import FBANK
from corpora.base.units import count_label

# The titles of the result kinds the lower packages write (downstream_asr names these rows), which
# `gendergap report` shows for any results DB; a study's other task kinds come with titles of their
# own, handed in as data (write_report's ``titles``: analysis does not know gendergap's tasks).
ASR_TASK_TITLES = {
    "asr-hybrid": "Hybrid ASR (SSL model as feature extractor, Kaldi)",
    "asr-frozen": "Frozen-feature ASR (SSL model as feature extractor)",
    "asr-e2e": "End-to-end ASR (SSL model fine-tuned as speech encoder)",
    "asr-e2e-layers": "End-to-end ASR, a weighted sum of all layers into the head (a variant for small encoders, "
                      "not the reference recipe)",
    "asr-released": "Released speech models (local folders, as distributed)",
}
KEY = ["checkpoint", "task", "lang_pair", "subset", "gender", "metric"]
CATEGORIES = ("1F", "1M", "2F", "2M")
REFERENCE_ROWS = (FBANK,)   # baselines without pretraining: listed last, marked


def is_reference(checkpoint) -> bool:
    return str(checkpoint) in REFERENCE_ROWS


def label(checkpoint, short: bool = False) -> str:
    """How a checkpoint is named in a table (``short``: in a plot): a reference row says it is one."""
    if not is_reference(checkpoint):
        return str(checkpoint)
    return f"{checkpoint} (ref.)" if short else f"{checkpoint} (reference: no pretraining)"


# --- cleaning -----------------------------------------------------------------------------
def clean_scores(df: pd.DataFrame, source: str | os.PathLike = "<results DB>") -> pd.DataFrame:
    """Numeric value/CI columns, non-finite values refused, latest row per key kept."""
    if df.empty:
        raise UserError("the results DB has no scores", path=source,
                        fix="run `gendergap sweep` or `gendergap score ... --db` first")
    df = df.copy()
    for col in ("value", "ci_low", "ci_high"):
        raw = df[col]
        num = pd.to_numeric(raw, errors="coerce")
        # A value stored as text ('nan', 'inf', '') is corrupt, not missing.
        bad = (num.isna() & raw.notna()) | np.isinf(num.astype(float))
        if col == "value":
            bad |= num.isna()
        if bad.any():
            row = df.loc[bad].iloc[0]
            raise UserError(f"score row id={int(row['id'])} ({row['checkpoint']}/{row['task']}/{row['gender']}/"
                            f"{row['metric']}) has {col} = {raw[bad].iloc[0]!r}", path=source,
                            fix="re-run the job that wrote it, or delete the row")
        df[col] = num.astype(float)
    df["lang_pair"] = df["lang_pair"].fillna("")
    return df.sort_values("id").drop_duplicates(KEY, keep="last")


def ci_contains_zero(low: float, high: float) -> bool | None:
    """True when the CI contains 0 (not significant); None without a CI."""
    if low is None or high is None or _nan(low) or _nan(high):
        return None
    return low <= 0.0 <= high


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _order(values: pd.Series) -> list:
    """Distinct values in order of first appearance (rows are sorted by id: run order)."""
    return list(dict.fromkeys(values))


def checkpoint_order(values: pd.Series) -> list:
    """Checkpoints in run order, reference rows (FBANK) last."""
    seen = _order(values)
    return [c for c in seen if not is_reference(c)] + [c for c in seen if is_reference(c)]


# --- building ------------------------------------------------------------------------------
def gap_table(df: pd.DataFrame, tasks: list[str], metric: str) -> pd.DataFrame:
    """One row per (task, lang_pair, checkpoint): metric for M, F, all with CIs, and Δrel."""
    rows = []
    sub = df[df["task"].isin(tasks)]
    for (task, lang_pair, checkpoint), g in sub.groupby(["task", "lang_pair", "checkpoint"], sort=False):
        own = g[g["metric"] == metric]
        if own.empty:
            continue
        row = {"task": task, "lang_pair": lang_pair, "checkpoint": checkpoint}
        sds = g[g["metric"] == f"{metric}:seed_sd"]
        n_seeds = g[g["metric"] == f"{metric}:n_seeds"]
        row["n_seeds"] = int(n_seeds["value"].iloc[0]) if len(n_seeds) else 1
        for gender, name in (("M", "M"), ("F", "F"), ("all", "all")):
            r = own[own["gender"] == gender]
            row[name] = r["value"].iloc[0] if len(r) else np.nan
            row[f"{name}_low"] = r["ci_low"].iloc[0] if len(r) else np.nan
            row[f"{name}_high"] = r["ci_high"].iloc[0] if len(r) else np.nan
            row[f"{name}_n_utts"] = r["n_utts"].iloc[0] if len(r) else np.nan
            row[f"{name}_score_id"] = _score_id(r)
            sd = sds[sds["gender"] == gender]
            row[f"{name}_sd"] = sd["value"].iloc[0] if len(sd) else np.nan
        d = g[(g["gender"] == "delta_rel") & g["metric"].isin([metric, "delta_rel"])]
        # the runs behind the row (`gendergap trace` follows them to their steps)
        row["run_ids"] = " ".join(str(int(x)) for x in dict.fromkeys(own["run_id"])) if "run_id" in own else ""
        if len(d):
            row.update(delta_rel=d["value"].iloc[-1], delta_rel_low=d["ci_low"].iloc[-1],
                       delta_rel_high=d["ci_high"].iloc[-1], delta_rel_source="stored",
                       delta_rel_score_id=_score_id(d.iloc[[-1]]))
        elif not (_nan(row["F"]) or _nan(row["M"])):
            d_rel = delta_rel(row["F"], row["M"])
            row.update(delta_rel=np.nan if d_rel is None else d_rel, delta_rel_low=np.nan, delta_rel_high=np.nan,
                       delta_rel_source="computed from F and M (no CI)")
        else:
            row.update(delta_rel=np.nan, delta_rel_low=np.nan, delta_rel_high=np.nan, delta_rel_source="")
        sd = sds[sds["gender"] == "delta_rel"]
        row["delta_rel_sd"] = sd["value"].iloc[0] if len(sd) else np.nan
        nz = ci_contains_zero(row["delta_rel_low"], row["delta_rel_high"])
        row["delta_rel_ci_contains_0"] = "" if nz is None else ("yes" if nz else "no")
        within_seeds = not _nan(row["delta_rel_sd"]) and abs(row["delta_rel"]) <= row["delta_rel_sd"]
        row["gap_called"] = "" if nz is None else ("no" if nz or within_seeds else
                                                   "one seed" if row["n_seeds"] == 1 else "yes")
        row["reference"] = is_reference(checkpoint)
        rows.append(row)
    out = pd.DataFrame(rows)
    if len(out):
        task_rank = {t: i for i, t in enumerate(tasks)}
        ck_rank = {c: i for i, c in enumerate(checkpoint_order(df["checkpoint"]))}
        out["_t"], out["_c"] = out["task"].map(task_rank), out["checkpoint"].map(ck_rank)
        out = out.sort_values(["_t", "lang_pair", "_c"], kind="stable").drop(columns=["_t", "_c"])
        out = out.reset_index(drop=True)
    return out


def _score_id(rows: pd.DataFrame) -> str:
    """The results-DB id of the score row a cell shows ('' when none), for `gendergap trace`."""
    return str(int(rows["id"].iloc[0])) if len(rows) and "id" in rows else ""


def task_title(task: str, titles: dict[str, str] | None = None) -> str:
    """How a task's rows are headed: the title handed in (``titles``), else analysis' own, else its name."""
    return (titles or {}).get(task) or ASR_TASK_TITLES.get(task, task)


def asr_tasks(df: pd.DataFrame) -> list[str]:
    """ASR tasks present, in the paper's order (hybrid, frozen, end-to-end), others after."""
    present = [t for t in _order(df["task"]) if str(t).startswith("asr")]
    return [t for t in ASR_TASK_TITLES if t in present] + [t for t in present if t not in ASR_TASK_TITLES]


def asr_table(df: pd.DataFrame) -> pd.DataFrame:
    """Table 4: WER M, F, All and Δrel per checkpoint, one block per ASR task."""
    return gap_table(df, asr_tasks(df), "wer")


def st_table(df: pd.DataFrame) -> pd.DataFrame:
    """Table 5: BLEU All [M, F] and Δrel per checkpoint and language pair (task st)."""
    return gap_table(df, [t for t in _order(df["task"]) if str(t) == "st" or str(t).startswith("st-")], "bleu")


def mustshe_table(df: pd.DataFrame) -> pd.DataFrame:
    """MuST-SHE per checkpoint and language pair: coverage/accuracy overall and per category, BLEU."""
    sub = df[df["task"] == "mustshe"]
    rows = []
    for (lang_pair, checkpoint), g in sub.groupby(["lang_pair", "checkpoint"], sort=False):
        row = {"checkpoint": checkpoint, "lang_pair": lang_pair}
        v = {m: x for m, x, gen in zip(g["metric"], g["value"], g["gender"]) if gen == "all"}
        # rows filed under the speaker's gender (F/M) give the per-speaker-gender scores
        for gen in ("F", "M"):
            for m in ("coverage", "accuracy"):
                hit = g[(g["gender"] == gen) & (g["metric"] == m)]
                row[f"{m}_speaker_{gen}"] = hit["value"].iloc[0] if len(hit) else np.nan
        for part in ("",) + tuple(f":{c}" for c in CATEGORIES) + (":form-F", ":form-M"):
            for m in ("coverage", "accuracy"):
                row[f"{m}{part.replace(':', '_')}" if part else m] = v.get(f"{m}{part}", np.nan)
        for m in ("bleu", "bleu_wrong", "bleu_diff"):
            row[m] = v.get(m, np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


PRETRAINING_FIELDS = ("updates", "hours", "male_pct", "female_pct", "unknown_pct")


MODEL_FIELDS = ("family", "parameters", "layers", "hidden_size")


def pretraining_table(entries: list[dict]) -> pd.DataFrame:
    """Table 3: one row per registry entry, in the registry's order, with the model's family and
    size (ssl_pretrain.families.describe, recorded at registration); a missing field is NaN."""
    numeric = (*PRETRAINING_FIELDS, "parameters", "layers", "hidden_size")
    rows = [{"model": e["name"], **{f: e.get(f) for f in (*MODEL_FIELDS, *PRETRAINING_FIELDS)}} for e in entries]
    return pd.DataFrame(rows, columns=["model", *MODEL_FIELDS, *PRETRAINING_FIELDS]).astype({f: float for f in numeric})


def winomt_table(df: pd.DataFrame) -> pd.DataFrame:
    """WinoMT per checkpoint and language pair: accuracy, F1 per gender, ΔG, ΔS, unknowns."""
    sub = df[df["task"] == "winomt"]
    rows = []
    for (lang_pair, checkpoint), g in sub.groupby(["lang_pair", "checkpoint"], sort=False):
        v = dict(zip(g["metric"], g["value"]))
        rows.append({"checkpoint": checkpoint, "lang_pair": lang_pair,
                     **{m: v.get(m, np.nan) for m in ("acc", "f1_male", "f1_female", "delta_g", "delta_s",
                                                      "n_unknown")}})
    return pd.DataFrame(rows)


# --- formatting -----------------------------------------------------------------------------
def fmt(x, digits: int = 2, sign: bool = False) -> str:
    if _nan(x) or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def fmt_ci(value, low, high, digits: int = 2, sign: bool = False, sd=None) -> str:
    """``12.34 (11.02, 13.80)``; ``12.34 ± 0.85 (10.90, 14.02)`` over seeds; just the value without a CI."""
    s = fmt(value, digits, sign)
    if s != "–" and not _nan(sd):
        s += f" ± {fmt(sd, digits)}"
    if _nan(low) or _nan(high) or s == "–":
        return s
    return f"{s} ({fmt(low, digits, sign)}, {fmt(high, digits, sign)})"


def _cell(r, name: str, sign: bool = False) -> str:
    """A gap-table cell: value (± seed sd) (CI)."""
    return fmt_ci(r.get(name), r.get(f"{name}_low"), r.get(f"{name}_high"), sign=sign, sd=r.get(f"{name}_sd", np.nan))


def visible(text) -> str:
    """Control characters (a newline in a checkpoint name...) as escapes: a table row stays one line."""
    return "".join(_CONTROL.get(ch, f"\\x{ord(ch):02x}") if unicodedata.category(ch) == "Cc" else ch
                   for ch in str(text))


_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    def esc(c):
        return visible(c).replace("|", "\\|")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                  "–": "--", "Δ": r"$\Delta$"}


def latex_escape(text: str) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in visible(text))


def latex_table(header: list[str], blocks: list[tuple[str, list[list[str]]]], caption: str, label: str) -> str:
    """A booktabs table; each block gets a spanning title row (empty title: none)."""
    ncol = len(header)
    out = [r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{l" + "r" * (ncol - 1) + "}",
           r"\toprule", " & ".join(latex_escape(h) for h in header) + r" \\", r"\midrule"]
    for i, (title, rows) in enumerate(blocks):
        if i:
            out.append(r"\midrule")
        if title:
            out.append(rf"\multicolumn{{{ncol}}}{{l}}{{\textit{{{latex_escape(title)}}}}} \\")
        out += [" & ".join(latex_escape(c) for c in r) + r" \\" for r in rows]
    out += [r"\bottomrule", r"\end{tabular}", rf"\caption{{{latex_escape(caption)}}}", rf"\label{{{label}}}",
            r"\end{table}"]
    return "\n".join(out) + "\n"


ASR_HEADER = ["Pre-training", "WER M", "WER F", "WER All", "Δrel, %"]
ST_CAPTION = ("Speech translation BLEU: All [M, F] and Δrel = 100 (BLEU(F) - BLEU(M)) / (0.5 (BLEU(F) + "
              "BLEU(M))), 95% CIs in parentheses.")
ASR_CAPTION = ("ASR WER per pre-trained model: M, F, All and Δrel = 100 (WER(F) - WER(M)) / (0.5 (WER(F) + "
               "WER(M))), 95% CIs in parentheses.")


def asr_blocks(t: pd.DataFrame, titles: dict[str, str] | None = None) -> list[tuple[str, list[list[str]]]]:
    """Table 4's blocks, one per task and language pair, each headed by its task's title (task_title)."""
    blocks = []
    for (task, lang_pair), g in t.groupby(["task", "lang_pair"], sort=False):
        title = task_title(task, titles) + (f" [{lang_pair}]" if lang_pair else "") + f" — {task}"
        blocks.append((title, [[label(r["checkpoint"]), _cell(r, "M"), _cell(r, "F"), _cell(r, "all"),
                                _cell(r, "delta_rel", sign=True)] for r in g.to_dict("records")]))
    return blocks


def st_layout(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Table 5 layout: a row per checkpoint, two columns (All [M, F], Δrel) per language pair."""
    pairs = _order(t["lang_pair"])
    header = ["Pre-training"]
    for p in pairs:
        header += [f"{p or 'st'} All [M, F]", f"{p or 'st'} Δrel, %"]
    rows = []
    for checkpoint in checkpoint_order(t["checkpoint"]):
        row = [label(checkpoint)]
        for p in pairs:
            r = t[(t["checkpoint"] == checkpoint) & (t["lang_pair"] == p)]
            if r.empty:
                row += ["–", "–"]
                continue
            r = r.iloc[0].to_dict()
            row.append(f"{_cell(r, 'all')} [{fmt(r['M'])}, {fmt(r['F'])}]")
            row.append(_cell(r, "delta_rel", sign=True))
        rows.append(row)
    return header, rows


PRETRAINING_HEADER = ["Model", "Family", "Params", "Layers", "# updates", "# hours", "M, %", "F, %", "U, %"]
PRETRAINING_CAPTION = ("Pre-trained self-supervised models: family (transformers model type), parameters and "
                       "transformer layers, number of "
                       "updates and hours of pre-training speech, and the share of male (M), female (F) and "
                       "unknown-gender (U) speech in it.")


def fmt_plain(x, digits: int = 2) -> str:
    """``1,041`` / ``47.4`` / ``0.28``: at most ``digits`` decimals, no trailing zeros; ``-`` when missing
    (imported checkpoints often come without their pre-training make-up)."""
    if _nan(x):
        return "-"
    s = f"{x:,.{digits}f}"
    return s.rstrip("0").rstrip(".") if digits else s


def pretraining_layout(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    rows = [[r["model"], "-" if _nan(r["family"]) else str(r["family"]), count_label(r["parameters"]),
             fmt_plain(r["layers"], 0),
             fmt_plain(r["updates"], 0), fmt_plain(r["hours"])] +
            [fmt_plain(r[f]) for f in ("male_pct", "female_pct", "unknown_pct")] for r in t.to_dict("records")]
    return PRETRAINING_HEADER, rows


def mustshe_layout(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["Model", "Pair", "Coverage", "Accuracy"] + [f"{c} cov / acc" for c in CATEGORIES] + \
             ["F speakers cov / acc", "M speakers cov / acc", "BLEU correct", "BLEU wrong", "BLEU diff"]
    rows = []
    for r in t.to_dict("records"):
        rows.append([r["checkpoint"], r["lang_pair"], fmt(r["coverage"]), fmt(r["accuracy"])] +
                    [f"{fmt(r[f'coverage_{c}'])} / {fmt(r[f'accuracy_{c}'])}" for c in CATEGORIES] +
                    [f"{fmt(r[f'coverage_speaker_{g}'])} / {fmt(r[f'accuracy_speaker_{g}'])}" for g in ("F", "M")] +
                    [fmt(r["bleu"]), fmt(r["bleu_wrong"]), fmt(r["bleu_diff"], sign=True)])
    return header, rows


def winomt_layout(t: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["Model", "Pair", "Acc", "F1 male", "F1 female", "ΔG", "ΔS", "unknown"]
    rows = [[r["checkpoint"], r["lang_pair"], fmt(r["acc"], 1), fmt(r["f1_male"], 1), fmt(r["f1_female"], 1),
             fmt(r["delta_g"], 1, sign=True), fmt(r["delta_s"], 1, sign=True), fmt(r["n_unknown"], 0)]
            for r in t.to_dict("records")]
    return header, rows


# A recogniser this wrong outputs noise: its gender gap, significant or not, says nothing about
# the encoder. (Far below any published system; a threshold for a warning, not for a decision.)
UNUSABLE_WER = 90.0


def _label(r: dict) -> str:
    return f"{label(r['checkpoint'])} / {r['task']}" + (f" / {r['lang_pair']}" if r["lang_pair"] else "")


def significance_lines(t: pd.DataFrame, what: str) -> list[str]:
    """Plain sentences saying which Δrel CIs contain 0 (not significant) and which do not."""
    if t.empty:
        return []
    values = lambda r: _cell(r, "delta_rel", sign=True)  # noqa: E731
    recs = t.to_dict("records")
    not_sig = [f"{_label(r)} ({values(r)})" for r in recs if r["delta_rel_ci_contains_0"] == "yes"]
    seedy = [f"{_label(r)} ({values(r)})" for r in recs
             if r["delta_rel_ci_contains_0"] == "no" and r.get("gap_called") == "no"]
    sig = [f"{_label(r)} ({values(r)})" for r in recs if r.get("gap_called", "") == "yes"]
    once = [f"{_label(r)} ({values(r)})" for r in recs if r.get("gap_called", "") == "one seed"]
    no_ci = [_label(r) for r in recs if r["delta_rel_ci_contains_0"] == ""]
    out = []
    if not_sig:
        out.append(f"- **Not significant** ({what} Δrel 95% CI contains 0): " + "; ".join(not_sig) + ".")
    if seedy:
        out.append(f"- **Not called: within the seed spread** ({what} Δrel CI excludes 0, but |Δrel| is not "
                   "larger than its sd over training seeds): " + "; ".join(seedy) + ".")
    if sig:
        out.append(f"- **Significant** ({what} Δrel 95% CI excludes 0" + (
            " and |Δrel| exceeds its seed sd" if any(r.get("n_seeds", 1) > 1 for r in recs) else "") + "): "
            + "; ".join(sig) + ".")
    if once:
        out.append(f"- **Not called: one training run** ({what} Δrel 95% CI over speakers excludes 0, but the row "
                   "was trained once, so how far another seed would move it is unknown): " + "; ".join(once) + ".")
    if no_ci:
        out.append(f"- No CI for the {what} Δrel of: " + "; ".join(no_ci) + " (significance unknown).")
    return out


def noise_level_lines(asr: pd.DataFrame) -> list[str]:
    """One sentence naming the recognisers too poor (WER All >= UNUSABLE_WER) for their gap to mean anything."""
    unusable = [f"{_label(r)} ({fmt(r['all'])})" for r in asr.to_dict("records") if r["all"] >= UNUSABLE_WER]
    if not unusable:
        return []
    return [f"- **Not a working recogniser** (WER All >= {UNUSABLE_WER:g} %): " + "; ".join(unusable)
            + ". A gap between outputs at this level, significant or not, says nothing"
            " about the pretrained encoder."]
