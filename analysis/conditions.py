"""Pretraining conditions compared: does the female share of pretraining change the gap?

A **condition** is a pretraining composition: its female share (0 = male-only, 0.5 = balanced,
1 = female-only), or no pretraining at all (the FBANK reference). A condition holds **runs**:
every downstream training seed of every checkpoint (replicate) pretrained with that share, each
scored on the same test speakers. Per task and metric, for q in F, M, all and Δrel:

* a condition's estimate is the mean of q over its runs;
* **pairs**: d = estimate(A) - estimate(B) for every pair of pretrained conditions and each
  against the reference;
* **trend** (3+ distinct shares): the OLS slope of the conditions' estimates on the female
  share, per 10 points of share.

Uncertainty has two sources, and each resample b carries both:

* **speakers** -- one count matrix per gender (analysis/bootstrap.py) is drawn once and applied
  to every run of every condition, so both sides of a difference see the same speakers (paired,
  as analysis/compare.py; a speaker who is hard for every model cancels out), and the runs are
  averaged within each resample;
* **seeds** -- a condition's runs scatter around its mean by the seed (and replicate) sd s_c
  measured on the full test set. Part of that scatter is run-by-speaker noise which the speaker
  resamples of the runs' mean already carry (u^2: the spread of a run around the mean across
  resamples); the rest, e_c^2 = max(0, s_c^2 - u^2), is the runs' shift as a whole, and the
  mean's share of it is e_c^2 / n_c. Each resample adds a draw ``e_c / sqrt(n_c) * t(n_c - 1)``
  per side (a t: e_c comes from a handful of seeds).

The CI is the percentile interval of these pooled resamples; the p-value is two-sided, from the
resamples shifted to the null (as analysis/compare.py). Holm's correction runs over the tests of
one table (every pair x every score; the two slopes). A difference is **called** only when its
Holm-adjusted p is under ``ALPHA``, its CI excludes 0 and it exceeds, in size, the seed sd of the
difference (sqrt(s_A^2 + s_B^2): what two single runs differ by); a side with one run is "one
seed: not compared" and never called. tests/test_conditions_calibration.py checks coverage and
false calls on simulated studies.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from analysis.bootstrap import GENDERS, RESULT_KEYS, draw_counts, percentile_ci, resample_scores

ALPHA = 0.05
SLOPE_UNIT = 10.0            # a slope is per 10 points (percent) of female share
ONE_SEED = "one seed: not compared"


@dataclass(frozen=True)
class Condition:
    """One condition: its name, female share (None: the no-pretraining reference) and runs, each
    ``{"F": (n_F, k), "M": (n_M, k)}`` per-speaker statistics in one shared speaker order."""
    name: str
    share: float | None
    runs: tuple


def _estimates(metric, runs, counts) -> dict[str, np.ndarray]:
    """q of every run (rows) in every resample (columns) of ``counts``."""
    per_run = [resample_scores(metric, r, counts) for r in runs]
    return {k: np.stack([p[k] for p in per_run]) for k in RESULT_KEYS}


def _full(n_by_gender: dict[str, int]) -> dict[str, np.ndarray]:
    """The test set itself, as one 'resample' drawing every speaker once."""
    return {g: np.ones((1, n_by_gender[g]), dtype=np.int64) for g in GENDERS}


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and is not counted)."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - rank) * pvalues[i]))
        out[i] = running
    return out


def _welch_df(parts: list[tuple[float, int]]) -> float:
    """Welch-Satterthwaite degrees of freedom of sum(s^2 / n) over (s, n) parts."""
    num = sum(s * s / n for s, n in parts) ** 2
    den = sum((s * s / n) ** 2 / (n - 1) for s, n in parts)
    return num / den if den > 0 else float(sum(n - 1 for _, n in parts))


def _test(point: float, resamples: np.ndarray, level: float) -> tuple[list | None, float | None]:
    """Percentile CI and two-sided p (null-shifted resamples) of one statistic."""
    if not np.all(np.isfinite(resamples)):
        return None, None
    ci = percentile_ci(resamples, level)
    centred = np.abs(resamples - resamples.mean())
    p = float((1 + np.sum(centred >= abs(point) - 1e-12)) / (1 + resamples.size))
    return (list(ci) if ci else None), p


def compare_conditions(metric, conditions: list[Condition], *, n_resamples: int = 1000, seed: int = 12345,
                       level: float = 0.95, paired: bool = True, pool_seeds: bool = True) -> dict:
    """Every pair of conditions and the trend over female share; see the module docstring.

    ``paired=False`` (each condition its own speaker draws) and ``pool_seeds=False`` (no seed
    term, no seed-sd rule) are what a naive analysis does: the calibration tests run them to show
    that each breaks the inference.
    """
    if not conditions or any(not c.runs for c in conditions):
        raise ValueError("every condition needs at least one run")
    n_spk = {g: conditions[0].runs[0][g].shape[0] for g in GENDERS}
    counts = draw_counts(n_spk, n_resamples, seed)
    rng = np.random.default_rng([int(seed), 1])
    stats = {}
    for i, c in enumerate(conditions):
        cts = counts if paired else draw_counts(n_spk, n_resamples, int(seed) + 1 + i)
        full, boot = _estimates(metric, c.runs, _full(n_spk)), _estimates(metric, c.runs, cts)
        n = len(c.runs)
        sd = {k: (float(full[k][:, 0].std(ddof=1)) if n > 1 else None) for k in RESULT_KEYS}
        stats[c.name] = {"n": n, "mean": {k: float(full[k][:, 0].mean()) for k in RESULT_KEYS}, "sd": sd,
                         "shift_sd": {k: _shift_sd(sd[k], boot[k]) for k in RESULT_KEYS},
                         "boot": {k: boot[k].mean(axis=0) for k in RESULT_KEYS}}
    pairs = _pairs(conditions, stats, rng, n_resamples, level, pool_seeds)
    adjusted = holm([p["p"][k] for p in pairs for k in RESULT_KEYS])
    for i, (p, k) in enumerate(itertools.product(pairs, RESULT_KEYS)):
        p["p_holm"][k] = adjusted[i]
        p["called"][k] = _called(p, k, pool_seeds)
    trend = _trend(conditions, stats, rng, n_resamples, level, pool_seeds)
    return {"metric": metric.name, "conditions": {c.name: {"share": c.share, "n_runs": stats[c.name]["n"],
                                                         "mean": stats[c.name]["mean"], "sd": stats[c.name]["sd"]}
                                                for c in conditions},
            "pairs": pairs, "trend": trend, "n_speakers": n_spk, "n_resamples": int(n_resamples), "seed": int(seed),
            "level": level, "alpha": ALPHA}


def _shift_sd(sd: float | None, boot: np.ndarray) -> float | None:
    """e_c: the part of the runs' sd that the speaker resamples do not carry (module docstring).
    ``boot``: (runs, resamples) scores of each run in each resample."""
    if sd is None or not np.all(np.isfinite(boot)):
        return sd
    n = boot.shape[0]
    within = float((boot - boot.mean(axis=0)).var(axis=1).mean()) * n / (n - 1)
    return math.sqrt(max(0.0, sd * sd - within))


def _called(test: dict, k: str, pool_seeds: bool) -> bool:
    ci, p, sd = test["ci"][k], test["p_holm"][k], test["seed_sd"][k]
    if test["status"] != "compared" or ci is None or p is None:
        return False
    big_enough = (sd is not None and abs(test["difference"][k]) > sd) if pool_seeds else True
    return p < ALPHA and not (ci[0] <= 0.0 <= ci[1]) and big_enough


def _seed_draws(parts: list[tuple[float, int, float]], rng, n_resamples: int) -> np.ndarray:
    """The seed term of each resample: sum of weight x s/sqrt(n) x t(n-1) draws, one per part
    (weight, s, n) -- independent t's, so the total keeps each mean's heavy tails."""
    out = np.zeros(n_resamples)
    for w, s, n in parts:
        out += w * s / math.sqrt(n) * rng.standard_t(n - 1, n_resamples)
    return out


def _pairs(conditions, stats, rng, n_resamples, level, pool_seeds) -> list[dict]:
    pretrained = sorted((c for c in conditions if c.share is not None), key=lambda c: -c.share)
    reference = [c for c in conditions if c.share is None]
    pairs = list(itertools.combinations(pretrained, 2)) + [(c, r) for r in reference for c in pretrained]
    out = []
    for a, b in pairs:
        sa, sb = stats[a.name], stats[b.name]
        one = min(sa["n"], sb["n"]) < 2
        test = {"a": a.name, "b": b.name, "status": ONE_SEED if one else "compared", "difference": {}, "ci": {},
                "p": {}, "p_holm": {}, "seed_sd": {}, "called": {}}
        for k in RESULT_KEYS:
            d = sa["mean"][k] - sb["mean"][k]
            test["difference"][k] = d
            test["seed_sd"][k] = None if one else math.hypot(sa["sd"][k], sb["sd"][k])
            if one:
                test["ci"][k] = test["p"][k] = None
                continue
            resamples = sa["boot"][k] - sb["boot"][k]
            if pool_seeds:
                resamples = resamples + _seed_draws([(1.0, sa["shift_sd"][k], sa["n"]),
                                                     (-1.0, sb["shift_sd"][k], sb["n"])], rng, n_resamples)
            test["ci"][k], test["p"][k] = _test(d, resamples, level)
        out.append(test)
    return out


def _trend(conditions, stats, rng, n_resamples, level, pool_seeds) -> dict | None:
    """The slope over female share (per SLOPE_UNIT points) of Δrel and of every score."""
    pretrained = [c for c in conditions if c.share is not None]
    if len({c.share for c in pretrained}) < 3:
        return None
    x = np.array([100.0 * c.share for c in pretrained])
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2) * SLOPE_UNIT   # slope = sum(w * y)
    one = min(stats[c.name]["n"] for c in pretrained) < 2
    out = {"status": ONE_SEED if one else "compared", "shares": x.tolist(), "slope": {}, "ci": {}, "p": {},
           "p_holm": {}, "seed_sd": {}, "called": {}, "difference": {}}
    for k in RESULT_KEYS:
        y = np.array([stats[c.name]["mean"][k] for c in pretrained])
        out["slope"][k] = out["difference"][k] = float(w @ y)
        sds = [stats[c.name]["sd"][k] for c in pretrained]
        out["seed_sd"][k] = None if one else float(math.sqrt(sum((wi * s) ** 2 for wi, s in zip(w, sds))))
        if one:
            out["ci"][k] = out["p"][k] = None
            continue
        resamples = w @ np.stack([stats[c.name]["boot"][k] for c in pretrained])
        if pool_seeds:
            resamples = resamples + _seed_draws([(wi, stats[c.name]["shift_sd"][k], stats[c.name]["n"])
                                                 for wi, c in zip(w, pretrained)], rng, n_resamples)
        out["ci"][k], out["p"][k] = _test(out["slope"][k], resamples, level)
    keys = ("delta_rel", "all")   # the trend table's two tests
    for k, p in zip(keys, holm([out["p"][k] for k in keys])):
        out["p_holm"][k] = p
    for k in RESULT_KEYS:
        out["p_holm"].setdefault(k, out["p"][k])
        out["called"][k] = _called(out, k, pool_seeds)
    return out
