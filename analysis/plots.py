"""Report figures (PNG): Δrel with CI bars per model and task; per-speaker score distributions;
gender-probe macro F1 by layer.

Figures are drawn on matplotlib ``Figure`` objects with the Agg canvas, never through pyplot's
global state, so they work headless and in parallel workers. Files are written atomically.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.tables import UNUSABLE_WER, checkpoint_order, is_reference, label
from corpora.base.atomic import atomic_open

GENDER_COLOURS = {"F": "tab:orange", "M": "tab:blue"}


def save_png(fig: Figure, path: str | os.PathLike) -> Path:
    FigureCanvasAgg(fig)
    with atomic_open(path, "wb", encoding=None) as f:
        fig.savefig(f, format="png", dpi=120, bbox_inches="tight")
    return Path(path)


def plot_delta_rel(gap_tables: list[tuple[str, pd.DataFrame]], path: str | os.PathLike) -> Path | None:
    """One panel per (table, task, language pair): Δrel per checkpoint with its 95% CI; None if empty.

    ``gap_tables`` are (metric name, analysis.tables.gap_table output) pairs, e.g. ("WER", asr_table).
    A point without a CI (Δrel computed from F and M) is drawn hollow; a reference row (FBANK, no
    pretraining) is a square with a dotted vertical line at its Δrel, the gap to read the others
    against; a recogniser too poor for its gap to mean anything (WER All >= UNUSABLE_WER) is grey.
    """
    panels = []
    for metric, t in gap_tables:
        if t is None or t.empty:
            continue
        for (task, lang_pair), g in t.groupby(["task", "lang_pair"], sort=False):
            rank = {c: i for i, c in enumerate(checkpoint_order(g["checkpoint"]))}
            g = g.assign(_r=g["checkpoint"].map(rank)).sort_values("_r", kind="stable")
            unusable = (g["all"].to_numpy(float) >= UNUSABLE_WER) if metric == "WER" else np.zeros(len(g), bool)
            panels.append((f"{metric} — {task}" + (f" {lang_pair}" if lang_pair else ""), g, unusable))
    if not panels:
        return None
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    height = max(2.2, 0.45 * max(len(g) for _, g, _ in panels) + 1.2)
    fig = Figure(figsize=(4.2 * ncols, height * nrows), layout="constrained")
    for i, (title, g, unusable) in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        y = np.arange(len(g))[::-1]
        x = g["delta_rel"].to_numpy(float)
        low, high = g["delta_rel_low"].to_numpy(float), g["delta_rel_high"].to_numpy(float)
        has_ci = ~(np.isnan(low) | np.isnan(high))
        ref = g["checkpoint"].map(is_reference).to_numpy(bool)
        for j in range(len(g)):
            colour = "0.65" if unusable[j] else "k"
            marker = "s" if ref[j] else "o"
            if has_ci[j]:
                ax.errorbar(x[j], y[j], xerr=[[x[j] - low[j]], [high[j] - x[j]]], fmt=marker, color=colour, capsize=3)
            else:
                ax.plot(x[j], y[j], marker, mfc="none", color=colour)
            if ref[j] and np.isfinite(x[j]):
                ax.axvline(x[j], color="C3", lw=0.8, ls=":")
        notes = (["hollow: no CI"] if (~has_ci).any() else []) + (["grey: not a working recogniser"]
                                                                  if unusable.any() else [])
        if notes:
            ax.text(0.01, 0.01, "; ".join(notes), transform=ax.transAxes, fontsize=6, color="0.4")
        ax.axvline(0.0, color="grey", lw=0.8, ls="--")
        ax.margins(x=0.15, y=0.25)
        ax.set_yticks(y, [label(c, short=True) for c in g["checkpoint"]])
        ax.set_xlabel("Δrel, % (F vs M)")
        ax.set_title(title, fontsize=9)
    fig.suptitle("Relative gender gap per pre-trained model (95% CI)", fontsize=10)
    return save_png(fig, path)


def plot_per_speaker(speaker_scores: pd.DataFrame, path: str | os.PathLike) -> Path | None:
    """Per-speaker score distributions: one panel per (task, lang_pair, metric), a box per
    checkpoint and speaker gender, speakers as dots. Rows: checkpoint, task, lang_pair, metric,
    gender (F/M), value, speaker. None when there are no such rows."""
    if speaker_scores is None or speaker_scores.empty:
        return None
    d = speaker_scores[speaker_scores["gender"].isin(["F", "M"])]
    if d.empty:
        return None
    groups = list(d.groupby(["task", "lang_pair", "metric"], sort=False))
    ncols = min(2, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig = Figure(figsize=(5.5 * ncols, 3.4 * nrows), layout="constrained")
    rng = np.random.default_rng(0)  # jitter of the dots: fixed seed, same figure every time
    for i, ((task, lang_pair, metric), g) in enumerate(groups):
        ax = fig.add_subplot(nrows, ncols, i + 1)
        checkpoints = list(dict.fromkeys(g["checkpoint"]))
        ticks = []
        for j, ck in enumerate(checkpoints):
            for k, gender in enumerate(("F", "M")):
                vals = g[(g["checkpoint"] == ck) & (g["gender"] == gender)]["value"].to_numpy(float)
                pos = 3 * j + k
                if len(vals):
                    ax.boxplot([vals], positions=[pos], widths=0.7, patch_artist=True, showfliers=False,
                               boxprops={"facecolor": GENDER_COLOURS[gender], "alpha": 0.35},
                               medianprops={"color": "black"})
                    ax.plot(pos + rng.uniform(-0.15, 0.15, len(vals)), vals, ".", color=GENDER_COLOURS[gender])
            ticks.append(3 * j + 0.5)
        ax.set_xticks(ticks, [str(c) for c in checkpoints], rotation=20, fontsize=8)
        ax.set_ylabel(metric.upper())
        ax.set_title(f"{task}" + (f" {lang_pair}" if lang_pair else "") + " — per speaker (orange F, blue M)",
                     fontsize=9)
    return save_png(fig, path)


RANDOM_INIT_SUFFIX = "+random-init"
SHUFFLED_SUFFIX = "+shuffled"
PROBE_STYLES = {"attention": "-", "mean": "--"}
MARKERS = "osD^v<>ph"


def plot_probes_by_layer(grid: pd.DataFrame, path: str | os.PathLike) -> Path | None:
    """Gender-probe macro F1 (%) against layer: one line per checkpoint and probe; None if empty.

    ``grid``: columns checkpoint, layer and one per probe type (the report's probes.csv). The
    attention probe is solid and mean pooling dashed; other probe types are drawn only when
    neither is present (the table has them all). ``NAME+random-init`` twins are grey with their
    trained model's marker; ``<probe>+shuffled`` controls are dotted and should sit near 50. A
    reference row with one layer (FBANK) is a red horizontal line. Models of different depths (a
    HuBERT Base beside a WavLM Large, say) are drawn against layer / depth, so that their first and
    last layers line up.
    """
    if grid is None or grid.empty:
        return None
    columns = [str(c) for c in grid.columns if c not in ("checkpoint", "layer")]
    real = [c for c in columns if not c.endswith(SHUFFLED_SUFFIX)]
    probes = [p for p in PROBE_STYLES if p in real] or real
    if not probes:
        return None
    bases = list(dict.fromkeys(str(c).removesuffix(RANDOM_INIT_SUFFIX) for c in grid["checkpoint"]))
    depth = {c: int(g["layer"].max()) for c, g in grid.groupby("checkpoint", sort=False)
             if not (is_reference(c) and g["layer"].nunique() == 1)}
    relative = len(set(depth.values())) > 1

    def x_of(ckpt, layers):
        return layers / max(depth[ckpt], 1) if relative else layers

    fig = Figure(figsize=(8.5, 4.2), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for ckpt, g in grid.groupby("checkpoint", sort=False):
        g = g.sort_values("layer")
        base = str(ckpt).removesuffix(RANDOM_INIT_SUFFIX)
        i = bases.index(base)
        if is_reference(ckpt) and g["layer"].nunique() == 1:
            # filterbanks have one "layer": a horizontal line to read every layer against
            for probe in probes:
                if probe in g and g[probe].notna().any():
                    ax.axhline(float(g[probe].iloc[0]), color="C3", lw=1.2, ls=PROBE_STYLES.get(probe, "-."),
                               label=f"{label(ckpt, short=True)} · {probe}")
            continue
        colour = "0.6" if str(ckpt).endswith(RANDOM_INIT_SUFFIX) else f"C{i % 10}"
        for probe in probes:
            for col, ls in ((probe, PROBE_STYLES.get(probe, "-.")), (probe + SHUFFLED_SUFFIX, ":")):
                if col not in g or g[col].isna().all():
                    continue
                ax.plot(x_of(ckpt, g["layer"]), g[col], marker=MARKERS[i % len(MARKERS)], ms=4, color=colour, ls=ls,
                        label=f"{ckpt} · {col}")
    ax.axhline(50, color="grey", lw=0.8, ls=(0, (1, 4)))  # chance for two balanced classes
    if relative:
        ax.set_xlabel("layer / depth (0 = transformer input, 1 = last layer; depths: "
                      + ", ".join(f"{c} {d}" for c, d in depth.items() if not str(c).endswith(RANDOM_INIT_SUFFIX))
                      + ")")
    else:
        ax.set_xlabel("layer (0 = transformer input)")
        ax.set_xticks(sorted(int(x) for x in grid["layer"].unique()))
    ax.set_ylabel("macro F1 (%)")
    ax.set_ylim(0, 102)
    # long handles, or a dashed line shows as solid in the legend
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, handlelength=3.5)
    ax.set_title("Gender probe macro F1 by layer (grey: random init; dotted: shuffled labels)", fontsize=10)
    return save_png(fig, path)
