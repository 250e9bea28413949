"""One machinery for every test of the pretraining conditions: a linear contrast of the conditions'
estimates, its resamples, CI, p, Holm within a family, equivalence and minimum detectable difference.

A test is a weight per condition (summing to 0): a pair (1, -1), the slope over female share, the
curvature (lack of fit). Its resamples are the contrast of the conditions' speaker-resampled
estimates (the speakers drawn once for every run: paired) plus ONE draw per resample of the
non-speaker term, ``sqrt(sum_c w_c^2 v_c) * t(df)`` (v_c: the variance of condition c's estimate
over pretraining runs and seeds; analysis/conditions.py estimates it), and for a side that is the
reference (no pretraining) its own seeds' term with its own t. The speaker part is first widened
for few speakers (``expansion``). The CI is the percentile interval of the finite resamples; the
p-value is two-sided, from the resamples centred on their median (the null-shifted distribution;
the median, not the mean: with df 1 or 2 the t draws have no mean). A test's standard error adds
the speaker variance and the non-speaker terms, its degrees of freedom are Welch-Satterthwaite's
over them, and its minimum detectable difference is analysis.power.mde at its family's level.

Resamples in which a statistic is undefined (Δrel or F/M of two BLEU 0s) are dropped and counted
(``nonfinite``); a test whose resamples are undefined in more than half of them is not made.
"""
from __future__ import annotations

import math

import numpy as np

from analysis.bootstrap import percentile_ci
from analysis.power import ALPHA, POWER, mde, quantile

FAMILIES = ("primary", "secondary", "reference")


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and is not counted)."""
    idx = sorted((i for i, p in enumerate(pvalues) if p is not None), key=lambda i: pvalues[i])
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(idx):
        running = max(running, min(1.0, (len(idx) - rank) * pvalues[i]))
        out[i] = running
    return out


def family_levels(tests: list[dict], alpha: float = ALPHA) -> dict[str, float]:
    """The level each family is tested at, so that the whole table's family-wise error stays at
    ``alpha``: the primary test at alpha; the follow-up families (secondary, reference) only behind
    it (a gate: tested once the primary is called) and sharing alpha (alpha / 2 each when both are
    there: Bonferroni over the two). Without a primary test (one share against the reference) the
    reference family stands alone at alpha."""
    present = {t["family"] for t in tests}
    follow = [f for f in FAMILIES[1:] if f in present]
    levels = {"primary": alpha}
    levels.update({f: alpha / len(follow) if "primary" in present else alpha for f in follow})
    return levels


def family_alpha(family: str, size: int, level: float) -> float:
    """The level a test of a family of ``size`` tests at ``level`` is held to at Holm's first step."""
    return level / max(1, size)


def t_draws(rng, scale: float, df: float | None, n: int) -> np.ndarray:
    """``n`` draws of scale x t(df) (a normal when df is None); zeros when the scale is 0."""
    if scale <= 0:
        return np.zeros(n)
    return scale * (rng.standard_normal(n) if df is None else rng.standard_t(df, n))


def speaker_df(k: str, n_spk: dict) -> int | None:
    """Degrees of freedom of a statistic's speaker variance: a gender's speakers less one, both
    genders' for a statistic of both (All, Δrel, the gap, the ratio); None below 2 speakers."""
    n = [n_spk[k]] if k in n_spk else list(n_spk.values())
    return sum(x - 1 for x in n) if min(n) >= 2 else None


def expansion(k: str, n_spk: dict, level: float) -> float:
    """How much a statistic's speaker resamples are widened about their mean: by sqrt(n / (n - 1)),
    since a bootstrap over n speakers spreads like the plug-in variance ((n - 1) / n of the unbiased
    one), and by t over z at the level, since that variance is itself estimated from few speakers (the
    expanded percentile interval, Hesterberg 2015, "What teachers should know about the bootstrap")."""
    df = speaker_df(k, n_spk)
    if df is None:
        return 1.0
    n = n_spk[k] if k in n_spk else min(n_spk.values())
    q = 0.5 + level / 2
    return math.sqrt(n / (n - 1)) * quantile(q, df) / quantile(q, None)


def expand(resamples: np.ndarray, factor: float) -> np.ndarray:
    """Resamples widened about their (finite) mean by ``factor``."""
    resamples = np.asarray(resamples, dtype=float)
    values = resamples[np.isfinite(resamples)]
    if factor == 1.0 or values.size == 0:
        return resamples
    centre = values.mean()
    return centre + (resamples - centre) * factor


def finite_part(resamples: np.ndarray) -> tuple[np.ndarray, int]:
    """The finite resamples, and how many were not."""
    ok = np.isfinite(resamples)
    return resamples[ok], int(resamples.size - ok.sum())


def run_test(point: float, resamples: np.ndarray, level: float, *, margin: float | None = None,
             alpha: float = ALPHA) -> dict:
    """CI, p, the count of undefined resamples and (with ``margin``) the two one-sided tests' verdict
    of one statistic of one test."""
    values, nonfinite = finite_part(np.asarray(resamples, dtype=float))
    out = {"ci": None, "p": None, "nonfinite": nonfinite, "equivalent": None}
    if values.size < 2 or nonfinite > values.size:
        return out
    ci = percentile_ci(values, level)
    out["ci"] = list(ci) if ci else None
    centred = np.abs(values - np.median(values))
    out["p"] = float((1 + np.sum(centred >= abs(point) - 1e-12)) / (1 + values.size))
    if margin is not None:   # TOST at alpha: the (1 - 2 alpha) interval inside (-margin, +margin)
        lo, hi = percentile_ci(values, 1 - 2 * alpha)
        out["equivalent"] = bool(-margin < lo and hi < margin)
    return out


def called(test: dict, k: str, alpha: float = ALPHA) -> bool:
    """A difference is called when its test was made, its family-adjusted p is under its family's
    level and its CI excludes 0."""
    ci, p = test["ci"].get(k), test["p_adj"].get(k)
    if test["status"] != "compared" or ci is None or p is None:
        return False
    return p < alpha and not (ci[0] <= 0.0 <= ci[1])


def adjust_families(tests: list[dict], stats: tuple, alpha: float = ALPHA, ci_level: float = 0.95) -> None:
    """Holm within each family, per statistic, at the family's level (family_levels); a follow-up
    test is called only when the primary test of the same statistic is (the gate); the MDE at the
    level in force (Holm's first step: the family's level over its size)."""
    levels = family_levels(tests, alpha)
    primary = [t for t in tests if t["family"] == "primary"]
    for family in FAMILIES:
        members = [t for t in tests if t["family"] == family]
        for t in members:
            t["family_size"], t["family_level"] = len(members), levels.get(family, alpha)
        for k in stats:
            for t, adjusted in zip(members, holm([t["p"].get(k) for t in members])):
                t["p_adj"][k] = adjusted
        for t in members:
            level = levels[family]
            for k in stats:
                gate = family == "primary" or not primary or bool(primary[0]["called"].get(k))
                t["called"][k] = gate and called(t, k, level)
                t["gated"] = family != "primary" and bool(primary)
                t["mde"][k] = (test_mde(t, k, family_alpha(family, len(members), level), ci_level)
                               if t["status"] == "compared" else None)


def test_mde(t: dict, k: str, level: float, ci_level: float = 0.95) -> float | None:
    """The test's minimum detectable difference at ``level``: analysis.power.mde's relation, with the
    critical value the test really uses. A percentile interval of resamples widened for few speakers
    and carrying t draws is wider than t x se (by ~5 % with 6 voices a gender); the ratio of the
    test's own ``ci_level`` interval to t x se scales the critical value (never below 1), so that a
    difference of the stated size is called with the stated power (tests/test_conditions_calibration.py)."""
    se, df, ci = t["se"].get(k), t["df"].get(k), t["ci"].get(k)
    if se is None or not math.isfinite(se) or se <= 0:
        return mde(se, df, level)
    ratio = 1.0
    if ci is not None:
        ratio = max(1.0, (ci[1] - ci[0]) / 2 / (quantile(0.5 + ci_level / 2, df) * se))
    return float((ratio * quantile(1 - level / 2, df) + quantile(POWER, df)) * se)


def excess_spread(groups: list[tuple[np.ndarray, np.ndarray]]) -> tuple[float | None, int]:
    """Pooled variance of values around their group's mean beyond what the speaker resamples carry,
    and its df. Each group: (values (n,), their resamples (n, B)). The resamples' part u^2 is the
    spread of a value's deviation from its group mean across resamples: the run-by-speaker noise
    that the observed spread holds and the speaker resamples already carry (s^2 - u^2, floored at 0)."""
    ss = u = 0.0
    df = 0
    for v, b in groups:
        v = np.asarray(v, dtype=float)
        ok = np.all(np.isfinite(b), axis=0)
        if len(v) < 2 or not np.all(np.isfinite(v)) or ok.sum() < 2:
            continue
        dev = b[:, ok] - b[:, ok].mean(axis=0)
        ss += float(np.sum((v - v.mean()) ** 2))
        u += float(dev.var(axis=1).sum())
        df += len(v) - 1
    return (max(0.0, (ss - u) / df) if df else None), df


def slope_weights(shares_pct: np.ndarray, unit: float) -> np.ndarray:
    """OLS slope weights over the conditions' female shares (percent), per ``unit`` points:
    slope = sum(w * y)."""
    x = np.asarray(shares_pct, dtype=float)
    return (x - x.mean()) / np.sum((x - x.mean()) ** 2) * unit


def curvature_weights(shares_pct: np.ndarray) -> np.ndarray:
    """The orthogonal quadratic contrast (x^2 with its constant and linear parts removed), scaled so
    that its positive weights sum to 1: the ends' weighted mean minus the middle's, in the
    statistic's own points; 0 when the estimates lie on a line."""
    x = np.asarray(shares_pct, dtype=float) / 100.0
    design = np.stack([np.ones_like(x), x], 1)
    q = x * x - design @ np.linalg.lstsq(design, x * x, rcond=None)[0]
    return q / q[q > 0].sum()

