"""Probe figures (Agg, atomic PNGs) and the probe-F1 vs gender-accuracy correlation.

``correlate`` reproduces the probing paper's Figure 1: across checkpoints (and language
pairs), gender-translation accuracy on MuST-SHE (task ``mustshe``, metric ``accuracy``,
gender ``all``) against the probe's macro F1; R^2, Pearson r and its p-value (scipy.stats).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from analysis.plots import save_png
from analysis.probing.run import CONTROL_SUFFIX, probe_table
from analysis.store import ResultsStore
from analysis.tables import clean_scores
from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from corpora.feature_request import Layers


def _collapse_positions(t: pd.DataFrame) -> pd.DataFrame:
    """pos0..pos100 -> one 'positions (best of 5)' line per checkpoint and layer, as the paper reports."""
    is_pos = t["probe"].str.match(r"pos\d+")
    pos = t[is_pos].copy()
    pos["probe"] = np.where(pos["probe"].str.endswith(CONTROL_SUFFIX), "positions" + CONTROL_SUFFIX, "positions")
    best = pos.groupby(["checkpoint", "layer", "probe"], as_index=False)["value"].max()
    return pd.concat([t[~is_pos][["checkpoint", "layer", "probe", "value"]], best], ignore_index=True)


def plot_f1_by_layer(table: pd.DataFrame, path: str | os.PathLike) -> Path | None:
    """Macro F1 by layer, one line per checkpoint and probe type (controls dashed).

    ``table``: columns checkpoint, layer, probe, value (F1 percent), e.g. from probe_table()
    filtered to measure f1_macro. Position probes are drawn as their best of five.
    """
    if table.empty:
        return None
    t = _collapse_positions(table)
    fig = Figure(figsize=(8.5, 4.2), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    probes = list(dict.fromkeys(p.replace(CONTROL_SUFFIX, "") for p in t["probe"]))
    markers = dict(zip(probes, "osD^v<>"))
    colours = {c: f"C{i}" for i, c in enumerate(dict.fromkeys(t["checkpoint"]))}
    for (ckpt, probe), g in t.groupby(["checkpoint", "probe"], sort=False):
        g = g.sort_values("layer")
        base = probe.replace(CONTROL_SUFFIX, "")
        ax.plot(g["layer"], g["value"], marker=markers[base], color=colours[ckpt],
                ls="--" if probe.endswith(CONTROL_SUFFIX) else "-", label=f"{ckpt} · {probe}")
    ax.axhline(50, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("layer (0 = transformer input)")
    ax.set_ylabel("macro F1 (%)")
    ax.set_xticks(sorted(t["layer"].unique()))
    ax.set_ylim(0, 102)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    ax.set_title("Gender probe F1 by layer (dashed: shuffled-label control)"
                 if t["probe"].str.endswith(CONTROL_SUFFIX).any() else "Gender probe F1 by layer")
    return save_png(fig, path)


def plot_attention_profiles(profiles: dict[str, list], path: str | os.PathLike) -> Path | None:
    """Mean attention weight over relative position (100 points), one line per label."""
    profiles = {k: v for k, v in profiles.items() if v is not None}
    if not profiles:
        return None
    fig = Figure(figsize=(7, 3.8), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for label, prof in profiles.items():
        prof = np.asarray(prof)
        ax.plot(np.linspace(0, 100, len(prof)), prof, label=label, lw=1.2)
    ax.axhline(1 / len(prof), color="grey", lw=0.8, ls=":", label="uniform")
    ax.set_xlabel("relative position in the utterance (%)")
    ax.set_ylabel("mean attention weight")
    ax.legend(fontsize=7)
    ax.set_title("Where the attention probe looks")
    return save_png(fig, path)


def correlation_points(scores: pd.DataFrame, *, probe: str = "attention", layer: str | int = "last",
                       subset: str = "test", source="<results DB>") -> pd.DataFrame:
    """One row per (checkpoint, language pair) with both a probe F1 and a MuST-SHE accuracy.

    ``layer``: a number, 'last' (each checkpoint's highest probed layer) or 'best' (its best F1).
    """
    df = clean_scores(scores, source)
    t = probe_table(df[df["subset"] == subset])
    t = t[(t["measure"] == "f1_macro") & (t["probe"] == probe)]
    if t.empty:
        raise UserError(f"no probe F1 rows for probe {probe!r} on subset {subset!r}", path=source,
                        fix="run `gendergap probe run ... --db` for the checkpoints first")
    if layer == "last":
        t = t[t["layer"] == t.groupby("checkpoint")["layer"].transform("max")]
    elif layer == "best":
        t = t.loc[t.groupby("checkpoint")["value"].idxmax()]
    else:
        t = t[t["layer"] == int(layer)]
    f1 = t.groupby("checkpoint", sort=False).agg(probe_f1=("value", "last"), layer=("layer", "last")).reset_index()
    acc = df[(df["task"] == "mustshe") & (df["metric"] == "accuracy") & (df["gender"] == "all")
             & (df["subset"] == subset)][["checkpoint", "lang_pair", "value"]].rename(columns={"value": "accuracy"})
    if acc.empty:
        raise UserError(f"no MuST-SHE accuracy rows (task mustshe, metric accuracy) on subset {subset!r}",
                        path=source, fix="score the checkpoints' translations with `gendergap score mustshe --db`")
    return f1.merge(acc, on="checkpoint", how="inner")


def correlate(points: pd.DataFrame, source="<results DB>") -> dict:
    """Pearson r, R^2 and the two-sided p-value of accuracy against probe F1."""
    if len(points) < 3:
        raise UserError(f"only {len(points)} checkpoint(s) have both a probe F1 and a MuST-SHE accuracy",
                        path=source, fix="a correlation needs at least 3 points: probe and score more checkpoints")
    if points["probe_f1"].nunique() < 2 or points["accuracy"].nunique() < 2:
        raise UserError("probe F1 or accuracy is the same for every checkpoint: no correlation can be computed",
                        path=source, fix="probe/score checkpoints that differ")
    res = stats.pearsonr(points["probe_f1"], points["accuracy"])
    fit = stats.linregress(points["probe_f1"], points["accuracy"])
    return {"n": int(len(points)), "pearson_r": float(res.statistic), "r2": float(res.statistic ** 2),
            "p_value": float(res.pvalue), "slope": float(fit.slope), "intercept": float(fit.intercept)}


def plot_correlation(points: pd.DataFrame, result: dict, path: str | os.PathLike) -> Path:
    """Scatter of accuracy vs probe F1 with the least-squares line (the paper's Figure 1)."""
    fig = Figure(figsize=(5, 4), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    for i, (lp, g) in enumerate(points.groupby("lang_pair", sort=False)):
        ax.scatter(g["probe_f1"], g["accuracy"], color=f"C{i}", label=lp or "(no language pair)")
        for _, r in g.iterrows():
            ax.annotate(str(r["checkpoint"]), (r["probe_f1"], r["accuracy"]), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
    xs = np.linspace(points["probe_f1"].min(), points["probe_f1"].max(), 10)
    ax.plot(xs, result["intercept"] + result["slope"] * xs, color="grey", lw=1)
    ax.set_xlabel("gender probe macro F1 (%)")
    ax.set_ylabel("MuST-SHE gender accuracy (%)")
    ax.set_title(f"R² = {result['r2']:.2f}, r = {result['pearson_r']:.2f}, p = {result['p_value']:.3g}")
    ax.legend(fontsize=7)
    return save_png(fig, path)


def correlate_db(*, db: str, probe: str = "attention", layer: str = "last", subset: str = "test",
                 out: str | None = None) -> dict:
    """`probe correlate`: probe F1 against MuST-SHE gender accuracy across the checkpoints of a
    results DB, written to OUT/correlation.json and OUT/correlation.png (default OUT:
    probe_correlation/ next to the DB). Returns the JSON's content with the points' frame and the
    plot's path."""
    # best: each checkpoint's best F1; else one layer (corpora.feature_request.Layers): last or a number
    number = "best" if str(layer).strip().lower() == "best" else Layers.parse(layer, "--layer").one("--layer")
    with ResultsStore(db, readonly=True) as store:
        scores = store.scores()
    points = correlation_points(scores, probe=probe, layer=number, subset=subset, source=db)
    result = correlate(points, source=db)
    folder = Path(out) if out else Path(db).parent / "probe_correlation"
    write_json(folder / "correlation.json", {**result, "probe": probe, "layer": layer,
                                              "points": points.to_dict(orient="records")})
    png = plot_correlation(points, result, folder / "correlation.png")
    return {**result, "points": points, "json": folder / "correlation.json", "png": png}
