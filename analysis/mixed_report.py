"""The report's section "The gap by utterance": the mixed models' rows (analysis.mixed_model) as
tables, answer sentences and a plot of per-speaker error rate against median F0.

Numbers come from the results DB's rows of subset ``mixed-model`` (so every cell has a score id
that `gendergap trace` follows); what a model was and what went wrong with it (formulas, family,
one line per problem, or why a task has no model) from the config of the run that stored them.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from analysis.mixed_model import SUBSET, TREND_ROW, VOICE_TERMS
from analysis.plots import GENDER_COLOURS, save_png
from analysis.store import ResultsStore
from analysis.tables import fmt, fmt_ci, markdown_table, task_title
from corpora.base.atomic import write_text
from corpora.base.boundary import parse_json

F0_TICKS = (60, 80, 100, 150, 200, 300, 400)   # Hz: plain numbers on the log axis
INTRO = ("Per scored utterance of every checkpoint and seed: its errors, with its reference words as exposure, in a "
         "Poisson mixed model (a negative binomial where the Poisson is overdispersed) fitted by glmmTMB: the gender "
         "effect per condition as fixed effects, random intercepts for the speaker, the pretraining run, the "
         "downstream seed and the speaker within a run, and the run's own gender gap (so the run is the unit of the "
         "share's effect). **F/M** is the female/male error-rate ratio (under 1: women are recognised better), "
         "with its 95 % Wald CI; **after voice** is the same with the utterance's median F0 (per octave), speaking "
         "rate (per word/s), speech length (per doubling) and SNR (per 10 dB) in the model. The **trend** row is "
         "the trend model over the pretrained checkpoints: the factor by which F/M changes per 10 points more "
         "female speech in pretraining. The voice measures are those of the same test voices under every condition: "
         "they move the level of F/M, hardly its trend.")


def mixed_runs(db: str | Path) -> dict[tuple[str, str], dict]:
    """{(task, lang_pair): the config of the latest mixed-model run stored for it}."""
    with ResultsStore(db, readonly=True) as store:
        runs = store.runs()
    out = {}
    for r in runs[runs["kind"] == SUBSET].itertuples(index=False):
        cfg = parse_json(r.config, "mixed-model run config", path=db)
        if isinstance(cfg, dict):
            out[(str(cfg.get("task", "")), str(cfg.get("lang_pair", "")))] = cfg
    return out


def _cell(part: pd.DataFrame, name: str, metric: str):
    hit = part[(part["checkpoint"] == name) & (part["metric"] == metric)]
    return hit.iloc[-1] if len(hit) else None


def _ratio_text(r, p) -> str:
    if r is None:
        return "—"
    return fmt_ci(r["value"], r["ci_low"], r["ci_high"], digits=2) + (f", p {_p(p['value'])}" if p is not None else "")


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _wide(task: str, pair: str, m: str, part: pd.DataFrame) -> pd.DataFrame:
    """The CSV: per condition, the trend row and each voice term, the ratios unrounded with the
    score id of each (``ratio_score_id``, ``ratio_adjusted_score_id``, ``effect_score_id``)."""
    rows = []
    names = list(dict.fromkeys(part[part["metric"] == f"{m}:rate_ratio"]["checkpoint"]))
    for name in names + [t for t in VOICE_TERMS if _cell(part, t, f"{m}:voice_effect") is not None]:
        row = {"checkpoint": name, "task": task, "lang_pair": pair}
        for key, metric in (("ratio", "rate_ratio"), ("ratio_adjusted", "rate_ratio_adjusted"),
                            ("effect", "voice_effect")):
            c, p = _cell(part, name, f"{m}:{metric}"), _cell(part, name, f"{m}:{metric}_p")
            if c is not None:
                row.update({key: c["value"], f"{key}_low": c["ci_low"], f"{key}_high": c["ci_high"],
                            f"{key}_p": p["value"] if p is not None else None, f"{key}_score_id": int(c["id"])})
        rows.append(row)
    return pd.DataFrame(rows)


def _answer(m: str, part: pd.DataFrame, names: list[str]) -> str:
    """The section's answer sentences for one task, from its numbers."""
    parts = []
    raw = {n: _cell(part, n, f"{m}:rate_ratio") for n in names}
    adj = {n: _cell(part, n, f"{m}:rate_ratio_adjusted") for n in names}
    called = [n for n, r in raw.items() if r is not None and not (r["ci_low"] <= 1 <= r["ci_high"])]
    left = [n for n in called if adj.get(n) is not None and not (adj[n]["ci_low"] <= 1 <= adj[n]["ci_high"])]
    if raw:
        parts.append(f"The F/M error-rate ratio differs from 1 in {len(called)} of {len(raw)} conditions"
                     + (f" ({', '.join(called)})" if called else "")
                     + (f"; after the voice measures in {len(left)} of them" if called else "") + ".")
    for tag, word in (("rate_ratio", "The trend"), ("rate_ratio_adjusted", "After the voice measures it")):
        t, p = _cell(part, TREND_ROW, f"{m}:{tag}"), _cell(part, TREND_ROW, f"{m}:{tag}_p")
        if t is None:
            continue
        detected = not (t["ci_low"] <= 1 <= t["ci_high"])
        parts.append(f"{word}: F/M changes by a factor {fmt(t['value'], 3)} per 10 points of female share "
                     f"(95 % CI {fmt(t['ci_low'], 3)} to {fmt(t['ci_high'], 3)}"
                     + (f", p {_p(p['value'])}" if p is not None else "") + ")"
                     + ("" if detected else ": a change is not detected") + ".")
    return " ".join(parts)


def _overlap_note(speakers: pd.DataFrame) -> str:
    """Where the genders' median F0 do not overlap, the gap after pitch is an extrapolation: say so."""
    f0 = speakers.dropna(subset=["value"]).groupby(["gender"])["value"]
    lo, hi = f0.min(), f0.max()
    if not {"F", "M"} <= set(lo.index):
        return ""
    text = f"Test voices' median F0: women {lo['F']:.0f}-{hi['F']:.0f} Hz, men {lo['M']:.0f}-{hi['M']:.0f} Hz."
    if hi["M"] < lo["F"] or hi["F"] < lo["M"]:
        text += (" The two ranges do not overlap, so the gap after pitch rests on the pitch effect measured within "
                 "each gender and carried across the space between them: read it as a model's extrapolation, not as "
                 "a comparison of women and men of equal pitch.")
    return text + "\n"


def plot_f0_error(speakers: pd.DataFrame, path: Path, title: str) -> Path | None:
    """Per-speaker error rate against median F0, coloured by gender, one panel per condition."""
    conds = list(dict.fromkeys(speakers["condition"]))
    if not conds:
        return None
    ncols = min(3, len(conds))
    nrows = math.ceil(len(conds) / ncols)
    fig = Figure(figsize=(3.6 * ncols, 2.9 * nrows), layout="constrained")
    top = float(np.nanmax(speakers["rate"])) * 1.05 if len(speakers) else 1.0
    lo, hi = float(np.nanmin(speakers["f0"])) / 1.1, float(np.nanmax(speakers["f0"])) * 1.1
    for i, c in enumerate(conds):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        d = speakers[speakers["condition"] == c]
        for g, colour in GENDER_COLOURS.items():
            s = d[d["gender"] == g]
            ax.plot(s["f0"], s["rate"], "o", color=colour, label={"F": "women", "M": "men"}[g], ms=4)
        ax.set_xscale("log")
        ax.set_xticks(F0_TICKS, [str(t) for t in F0_TICKS])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(lo, hi)
        ax.set_ylim(0, top)
        ax.set_title(c, fontsize=9)
        ax.set_xlabel("median F0, Hz (log)", fontsize=8)
        ax.set_ylabel("error rate, %", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    return save_png(fig, path)


def _speakers(part: pd.DataFrame, m: str) -> pd.DataFrame:
    rate = part[part["metric"].str.startswith(f"{m}:speaker_rate:")]
    f0 = part[part["metric"].str.startswith(f"{m}:speaker_f0:")]
    a = rate.assign(speaker=rate["metric"].str.split(":", n=2).str[2])[["checkpoint", "speaker", "gender", "value"]]
    b = f0.assign(speaker=f0["metric"].str.split(":", n=2).str[2])[["checkpoint", "speaker", "value"]]
    d = a.merge(b, on=["checkpoint", "speaker"], how="left", suffixes=("_rate", "_f0"))
    return pd.DataFrame({"condition": d["checkpoint"], "speaker": d["speaker"], "gender": d["gender"],
                         "rate": d["value_rate"], "f0": d["value_f0"]})


def _text(path: Path, text: str) -> Path:
    write_text(path, text)
    return path


def mixed_section(rows: pd.DataFrame, runs: dict, out_dir: Path, written: dict, write_csv,
                  titles: dict | None = None) -> list[str]:
    """report.md lines of the section, its table files (mixed_<task>.md/.csv) and F0 plots."""
    if not runs:
        return []
    md = ["## The gap by utterance: a mixed model with the voice's own measures\n", INTRO + "\n"]
    for (task, pair), cfg in runs.items():
        label = task + (f"_{pair}" if pair else "")
        head = f"### {task_title(task, titles)}" + (f", {pair}" if pair else "")
        if cfg.get("status") != "fitted":
            md += [head + "\n", f"No model: {cfg.get('reason') or cfg.get('status')}.\n"]
            continue
        m = str(cfg.get("metric", "wer"))
        part = rows[(rows["task"] == task) & (rows["lang_pair"] == pair)]
        names = list(dict.fromkeys(part[part["metric"] == f"{m}:rate_ratio"]["checkpoint"]))
        conds = [n for n in names if n != TREND_ROW]
        table = [[n, _ratio_text(_cell(part, n, f"{m}:rate_ratio"), _cell(part, n, f"{m}:rate_ratio_p")),
                  _ratio_text(_cell(part, n, f"{m}:rate_ratio_adjusted"),
                              _cell(part, n, f"{m}:rate_ratio_adjusted_p"))] for n in names]
        voice = [[t, VOICE_TERMS[t][2], _ratio_text(_cell(part, t, f"{m}:voice_effect"),
                                                    _cell(part, t, f"{m}:voice_effect_p"))]
                 for t in VOICE_TERMS if _cell(part, t, f"{m}:voice_effect") is not None]
        body = (markdown_table(["Condition", "F/M", "F/M after voice"], table) + "\n\n"
                + (markdown_table(["Voice measure", "per", "error-rate ratio"], voice) + "\n" if voice else ""))
        written[f"mixed_{label}.md"] = _text(out_dir / f"mixed_{label}.md", body)
        written[f"mixed_{label}.csv"] = write_csv(_wide(task, pair, m, part), out_dir / f"mixed_{label}.csv")
        speakers = _speakers(part, m)
        md += [head + f" ({m.upper()})\n", _answer(m, part, conds) + "\n", body,
               _overlap_note(speakers.rename(columns={"f0": "value"}).drop_duplicates("speaker"))]
        left_out = cfg.get("left_out") or {}
        if left_out:
            md.append("Left out of the model: " + "; ".join(f"{k}: {v}" for k, v in left_out.items()) + ".\n")
        problems = cfg.get("problems") or []
        md.append("Model notes: none (every fit converged, no variance estimated at 0).\n" if not problems else
                  "Model notes:\n\n" + "\n".join(f"- {p}" for p in problems) + "\n")
        png = plot_f0_error(speakers, out_dir / f"f0_{label}.png",
                            f"{task}{' ' + pair if pair else ''}: per-speaker {m.upper()} against median F0")
        if png:
            written[png.name] = png
            md.append(f"![per-speaker {m.upper()} against median F0, {task}]({png.name})\n")
    return md
