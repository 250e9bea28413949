"""The report's answer to the study's question, from the conditions rows of the results DB
(subset ``conditions``, written by analysis.conditions.compare_and_store):

- ``answer_lines``: one sentence per task (and language pair), generated from the numbers, never
  more than they support;
- ``condition_sections``: per task, the conditions (female share, runs, scores), the comparison
  table (each pair, against the reference, and the trend over female share) as
  ``conditions_<task>.{md,tex,csv}``, and a plot of Δrel against female share (``trend_<task>.png``).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.conditions import FEW_SPEAKERS, MIN_SPEAKERS, ONE_SEED
from analysis.plots import save_png
from corpora.base.atomic import write_text
from analysis.tables import ASR_TASK_TITLES, fmt, fmt_ci, latex_table, markdown_table, task_title

SUBSET = "conditions"
SLOPE = "female share (slope per 10 points)"
KEYS = ("delta_rel", "all", "F", "M")
KEY_NAMES = {"delta_rel": "Δrel", "all": "All", "F": "F", "M": "M"}
HEADER = ["Comparison", "Δrel diff (95% CI)", "p Holm", "All diff (95% CI)", "F diff", "M diff", "Verdict (Δrel)"]
CAPTION = ("Pretraining conditions compared: differences (first minus second; slope: per 10 points of female share) "
           "in Δrel and in the score, with 95% CIs from speaker resamples shared by both sides and the seeds' spread "
           "pooled; p Holm-corrected within each column; called only when p < 0.05, the CI excludes 0 and the difference "
           "exceeds its seed sd.")


TASK_ORDER = (*ASR_TASK_TITLES, "st", "gender-st")   # the tables' order: ASR (Table 4), then ST (Table 5)


def _blocks(rows: pd.DataFrame) -> list[tuple[str, str, str, pd.DataFrame]]:
    """(task, lang_pair, metric, its rows) per comparison run: ASR tasks, then ST, then the others,
    each by language pair (not in the order parallel jobs happened to store them)."""
    out = []
    for (task, pair), part in rows.groupby(["task", "lang_pair"], sort=False):
        metric = part["metric"].iloc[0].split(":")[0]
        out.append((str(task), str(pair), metric, part))
    rank = lambda t: TASK_ORDER.index(t) if t in TASK_ORDER else len(TASK_ORDER)  # noqa: E731
    return sorted(out, key=lambda b: (rank(b[0]), b[0], b[1]))


def _get(part: pd.DataFrame, name: str, metric: str, key: str = "all"):
    r = part[(part["checkpoint"] == name) & (part["metric"] == metric) & (part["gender"] == key)]
    return None if r.empty else r.iloc[0]


def _value(part, name, metric, key="all"):
    r = _get(part, name, metric, key)
    return None if r is None else float(r["value"])


def _title(task: str, pair: str, metric: str) -> str:
    return f"{task}" + (f" {pair}" if pair else "") + f" ({metric.upper()})"


def _conditions(part: pd.DataFrame, m: str) -> list[str]:
    return list(dict.fromkeys(part.loc[part["metric"] == f"{m}:n_runs", "checkpoint"]))


def _tests(part: pd.DataFrame, m: str) -> list[tuple[str, str]]:
    """(name, kind) of every comparison: the pairs, then the slope."""
    pairs = [(c, "diff") for c in dict.fromkeys(part.loc[part["metric"] == f"{m}:diff", "checkpoint"])]
    return pairs + ([(SLOPE, "slope")] if (part["metric"] == f"{m}:slope").any() else [])


def _compared(part, name, m, what) -> bool | None:
    """Whether a test compared runs (False: a side trained once); None: no score defined for it."""
    values = [_value(part, name, f"{m}:{what}_compared", k) for k in KEYS]
    values = [v for v in values if v is not None]
    return bool(max(values)) if values else None


def _few_speakers(part, name, m, what) -> bool:
    """Whether a test was not made for want of test speakers (analysis.conditions.FEW_SPEAKERS)."""
    return any(_value(part, name, f"{m}:{what}_few_speakers", k) for k in KEYS)


def _speaker_counts(part) -> str:
    """``3 F, 1 M``: the test speakers of each gender, from the rows' n_speakers."""
    counts = {g: part.loc[part["gender"] == g, "n_speakers"].dropna() for g in ("F", "M")}
    return ", ".join(f"{int(c.iloc[0]) if len(c) else 0} {g}" for g, c in counts.items())


def _verdict(part, name, m, what, key="delta_rel") -> str:
    if _get(part, name, f"{m}:{what}", key) is None:
        return "undefined"
    if not _compared(part, name, m, what):
        return FEW_SPEAKERS if _few_speakers(part, name, m, what) else ONE_SEED
    if _value(part, name, f"{m}:{what}_called", key):
        return "called"
    ci = _get(part, name, f"{m}:{what}", key)
    sd = _value(part, name, f"{m}:{what}_seed_sd", key)
    if ci is not None and not (ci["ci_low"] <= 0 <= ci["ci_high"]) and sd is not None and abs(ci["value"]) <= sd:
        return "not called: within the seed spread"
    return "not called"


def _cell(part, name, metric, key) -> str:
    r = _get(part, name, metric, key)
    return "–" if r is None else fmt_ci(r["value"], r["ci_low"], r["ci_high"], sign=True)


def _design(part, m) -> str:
    names = _conditions(part, m)
    runs = [int(_value(part, c, f"{m}:n_runs")) for c in names]
    r = _get(part, names[0], f"{m}:n_runs")
    n_spk = int(r["n_speakers"]) if r is not None and not pd.isna(r["n_speakers"]) else None
    per = f"{runs[0]} run{'s' if runs[0] != 1 else ''}" if len(set(runs)) == 1 else "runs " + "/".join(map(str, runs))
    return f"{len(names)} conditions x {per}" + (f", {n_spk} test speakers" if n_spk else "")


def _one_checkpoint_each(part, m) -> str:
    """The caveat of a study without pretraining replicates (nothing when a condition has several)."""
    pretrained = [c for c in _conditions(part, m) if _value(part, c, f"{m}:female_share") is not None]
    if pretrained and all((_value(part, c, f"{m}:n_checkpoints") or 1) == 1 for c in pretrained):
        return ("; one pretrained checkpoint per condition, so a difference may be that checkpoint's (its "
                "pretraining seed) as much as its share's")
    return ""


def answer_sentence(task: str, pair: str, m: str, part: pd.DataFrame) -> str:
    """One sentence: does the female share of pretraining change the gap in this task?"""
    head = f"**{_title(task, pair, m)}**: "
    design = _design(part, m)
    tests = dict(_tests(part, m))
    names = [n for n in tests if tests[n] == "diff" and " vs " in n]
    main = SLOPE if SLOPE in tests else (names[0] if names else None)
    if main is None:
        return head + "no two pretraining conditions to compare."
    what = tests[main]
    if _compared(part, main, m, what) is False and _few_speakers(part, main, m, what):
        return (head + f"cannot answer: fewer than {MIN_SPEAKERS} test speakers of a gender ({_speaker_counts(part)}; "
                f"{design}), so resampling the speakers cannot show how a difference moves with them: no interval "
                f"and no call; test on {MIN_SPEAKERS} or more speakers of each gender.")
    if _compared(part, main, m, what) is False:
        return (head + f"cannot answer: a condition was trained once ({design}), and one training run's score moves "
                "by several points between seeds and machines; train the task with several seeds "
                "(`seeds: [0, 1, 2]`).")
    r = _get(part, main, f"{m}:{what}", "delta_rel")
    if r is None or pd.isna(r["ci_low"]):
        return head + f"cannot answer: Δrel is undefined for a condition (a score of 0 for both genders; {design})."
    p = _value(part, main, f"{m}:{what}_p_holm", "delta_rel")
    numbers = (f"{'Δrel slope' if what == 'slope' else 'Δrel difference ' + main} {r['value']:+.1f}"
               + (" per 10 points" if what == "slope" else "")
               + f", 95 % CI {r['ci_low']:+.1f} to {r['ci_high']:+.1f}" + (f", Holm p {p:.3f}" if p is not None else "")
               + f"; {design}{_one_checkpoint_each(part, m)}")
    favours = "women" if (r["value"] < 0) == (m == "wer") else "men"
    if _value(part, main, f"{m}:{what}_called", "delta_rel"):
        claim = (f"the gap changes with the female share of pretraining, towards {favours} as the share grows"
                 if what == "slope" else f"the gap differs between the conditions, towards {favours} for the first")
    else:
        claim = "no change of the gap with the female share of pretraining" if what == "slope" else \
            "no difference of the gap between the pretraining conditions"
    called = [n for n in tests if n != main and _value(part, n, f"{m}:{tests[n]}_called", "delta_rel")]
    extra = "" if not called else " Differences called: " + "; ".join(
        f"{n} {_value(part, n, f'{m}:{tests[n]}', 'delta_rel'):+.1f}" for n in called) + "."
    return head + f"{claim} ({numbers}).{extra}"


def answer_lines(rows: pd.DataFrame) -> list[str]:
    """The report's opening: one generated sentence per task (and language pair)."""
    if rows.empty:
        return []
    out = ["## The answer\n", "Does the female share of the pretraining speech change the gender gap (Δrel) of "
           "the systems built on it, beyond what test speakers, training seeds and pretraining replicates "
           "produce? One sentence per task, from the comparison tables below.\n"]
    out += [f"- {answer_sentence(task, pair, m, part)}" for task, pair, m, part in _blocks(rows)]
    return out + [""]


def _stem(task: str, pair: str) -> str:
    return "conditions_" + re.sub(r"[^A-Za-z0-9_-]+", "_", task + (f"_{pair}" if pair else ""))


def condition_sections(rows: pd.DataFrame, out_dir: Path, written: dict, write_csv,
                       titles: dict[str, str] | None = None) -> list[str]:
    """Per task: the conditions, the comparison table files and the trend plot; report.md lines."""
    if rows.empty:
        return []
    md = ["## Pretraining conditions compared\n", CAPTION + "\n"]
    for task, pair, m, part in _blocks(rows):
        stem = _stem(task, pair)
        names = _conditions(part, m)
        cond_rows = [[n, fmt(_value(part, n, f"{m}:female_share"), 0) if _value(part, n, f"{m}:female_share")
                      is not None else "reference", str(int(_value(part, n, f"{m}:n_runs")))]
                     + [fmt_ci(_value(part, n, f"{m}:condition", k), None, None,
                               sd=_value(part, n, f"{m}:condition_sd", k)) for k in ("all", "F", "M", "delta_rel")]
                     for n in names]
        table = [[n] + [_cell(part, n, f"{m}:{w}", "delta_rel"),
                        fmt(_value(part, n, f"{m}:{w}_p_holm", "delta_rel"), 3),
                        _cell(part, n, f"{m}:{w}", "all"), _cell(part, n, f"{m}:{w}", "F"),
                        _cell(part, n, f"{m}:{w}", "M"), _verdict(part, n, m, w)] for n, w in _tests(part, m)]
        body = markdown_table(HEADER, table)
        written[f"{stem}.md"] = _text(out_dir / f"{stem}.md", body)
        written[f"{stem}.tex"] = _text(out_dir / f"{stem}.tex", latex_table(
            HEADER, [("", table)], CAPTION, f"tab:{stem}"))
        written[f"{stem}.csv"] = write_csv(_wide(task, pair, m, part), out_dir / f"{stem}.csv")
        md += [f"### {task_title(task, titles)}" + (f", {pair}" if pair else "") + f" ({m.upper()})\n",
               markdown_table(["Condition", "female share, %", "runs", f"{m.upper()} All", "F", "M", "Δrel"],
                              cond_rows) + "\n", body + "\n"]
        png = _trend_plot(part, m, out_dir / f"trend_{stem[len('conditions_'):]}.png", _title(task, pair, m))
        if png:
            written[png.name] = png
            md.append(f"![Δrel against female share of pretraining: {_title(task, pair, m)}]({png.name})\n")
    return md


def _wide(task: str, pair: str, m: str, part: pd.DataFrame) -> pd.DataFrame:
    """The CSV: one row per condition and per comparison, every number unrounded, and per cell the
    results-DB id of its score row (``<key>_score_id``), which `gendergap trace` follows."""
    out = []
    for kind, names in (("condition", [(n, "condition") for n in _conditions(part, m)]), ("comparison", _tests(part, m))):
        for n, what in names:
            row = {"checkpoint": n, "task": task, "lang_pair": pair, "row": kind if what != "slope" else "trend"}
            if kind == "condition":
                row.update(female_share=_value(part, n, f"{m}:female_share"), runs=_value(part, n, f"{m}:n_runs"))
            else:
                row["verdict"] = _verdict(part, n, m, what)
            for k in KEYS:
                r = _get(part, n, f"{m}:{what}", k)
                row.update({k: r["value"] if r is not None else None, f"{k}_low": r["ci_low"] if r is not None else None,
                            f"{k}_high": r["ci_high"] if r is not None else None,
                            f"{k}_score_id": str(int(r["id"])) if r is not None else ""})
                for extra in (("sd",) if kind == "condition" else ("p", "p_holm", "seed_sd", "called")):
                    row[f"{k}_{extra}"] = _value(part, n, f"{m}:{what}_{extra}", k)
            row["run_ids"] = " ".join(str(int(x)) for x in dict.fromkeys(part["run_id"]))
            out.append(row)
    return pd.DataFrame(out)


def _trend_plot(part: pd.DataFrame, m: str, path: Path, title: str) -> Path | None:
    """Δrel of each condition against its female share, with its CI; the reference (no pretraining)
    as a horizontal band; the fitted slope when there is one."""
    names = _conditions(part, m)
    pts = [(_value(part, n, f"{m}:female_share"), _get(part, n, f"{m}:condition", "delta_rel"), n)
           for n in names if _value(part, n, f"{m}:female_share") is not None]
    pts = [p for p in pts if p[1] is not None]   # a condition without a Δrel (scores of 0) has no point
    if len(pts) < 2:
        return None
    fig = Figure(figsize=(5.5, 3.6))
    ax = fig.add_subplot()
    for n in names:
        r = _get(part, n, f"{m}:condition", "delta_rel")
        if _value(part, n, f"{m}:female_share") is None and r is not None:
            lo, hi = (r["ci_low"], r["ci_high"]) if not pd.isna(r["ci_low"]) else (r["value"], r["value"])
            ax.axhspan(lo, hi, color="grey", alpha=0.2, label=f"{n} (no pretraining) 95% CI")
            ax.axhline(r["value"], color="grey", ls=":")
    x = np.array([p[0] for p in pts])
    y = np.array([p[1]["value"] for p in pts])
    # each CI drawn from its own ends: a percentile interval need not contain the mean of the runs
    # (skewed resamples, a seed term), and errorbar refuses the negative distance such a point gives
    ci = np.array([[p[1]["ci_low"], p[1]["ci_high"]] if not pd.isna(p[1]["ci_low"]) else [p[1]["value"]] * 2
                   for p in pts], dtype=float)
    ax.errorbar(x, ci.mean(axis=1), yerr=(ci[:, 1] - ci[:, 0]) / 2, fmt="none", ecolor="tab:purple", capsize=4)
    ax.plot(x, y, "o", color="tab:purple", label="condition mean, 95% CI")
    for xi, yi, (_, _, n) in zip(x, y, pts):
        ax.annotate(n, (xi, yi), textcoords="offset points", xytext=(6, 4), fontsize=8)
    slope = _value(part, SLOPE, f"{m}:slope", "delta_rel")
    if slope is not None and not math.isnan(slope):
        grid = np.linspace(0, 100, 11)
        ax.plot(grid, y.mean() + slope / 10 * (grid - x.mean()), color="tab:purple", alpha=0.5,
                label=f"slope {slope:+.1f} per 10 points")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("female share of pretraining speech, %")
    ax.set_ylabel(f"Δrel of {m.upper()}, %")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="best")
    return save_png(fig, path)


def _text(path: Path, text: str) -> Path:
    write_text(path, text)
    return path
