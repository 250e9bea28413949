"""Speaker-level bootstrap over additive statistics.

Utterances of one speaker are not independent (same voice, same talk), so confidence
intervals resample *speakers*, not utterances. The recipe:

1. sum the per-utterance statistic rows per speaker (``speaker_sums``);
2. draw, for each gender separately, one multinomial count matrix ``counts`` of shape
   (n_resamples, n_speakers_of_that_gender): row b says how many times each speaker is
   drawn in resample b (``draw_counts``). Resampling within each gender keeps every
   resample's gender make-up equal to the test set's;
3. the summed statistics of every resample at once are ``counts @ speaker_stats``
   (no gathered (n_resamples x n_utterances) array), and the metric turns each row into a
   score. The "all" resample is the F resample plus the M resample; Δrel pairs resample b
   of F with resample b of M.

The same count matrices serve every system compared (analysis/compare.py): reusing them is
what makes a comparison paired (as ``sacrebleu/significance.py`` reuses its index matrix).

Seeds: an ``int`` seed, 0 included, is always a real seed; there is no "no seed" value.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from analysis.delta import delta_rel_array
from corpora.base.boundary import whole

GENDERS = ("F", "M")
# The most resamples a CI or test draws: a count matrix is resamples x speakers int64 per gender, so
# 10^8 resamples of 6 speakers take 4.5 GB each. At 100,000 the ends of a 95 % percentile interval
# move by about 1 % of the standard error between bootstrap seeds: more buys nothing (the study: 1,000).
MAX_RESAMPLES = 100_000
# what a gender-gap result holds: the score per gender, overall, and Δrel (compare, seeds)
RESULT_KEYS = ("F", "M", "all", "delta_rel")


def speaker_sums(stats: np.ndarray, speakers: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """Sum utterance rows per speaker. Returns (speaker ids sorted, (n_speakers, k) int64 sums)."""
    stats = np.asarray(stats)
    codes, uniques = pd.factorize(pd.Series(list(speakers), dtype=str), sort=True)
    sums = np.zeros((len(uniques), stats.shape[1]), dtype=stats.dtype)
    np.add.at(sums, codes, stats)
    return list(uniques), sums


def check_resamples(n, what: str = "resamples", lo: int = 0, path=None, line=None) -> int:
    """``n`` (an int, or a command-line text) as a resample count, ``lo`` to MAX_RESAMPLES; anything
    else (a fraction, a negative count, more than the bound) is a UserError naming ``what``."""
    return whole(n, what, lo=lo, hi=MAX_RESAMPLES, path=path, line=line,
                 fix=f"give a whole number of resamples from {lo} to {MAX_RESAMPLES:,} (1,000 is the usual)")


def draw_counts(n_by_gender: dict[str, int], n_resamples: int, seed: int) -> dict[str, np.ndarray]:
    """One multinomial count matrix per gender, drawn F first then M from one seeded generator.

    ``counts[g][b, j]`` is how often speaker j of gender g is drawn in resample b; each row
    sums to the number of speakers of that gender (a bootstrap sample of the same size).
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int (0 is a valid seed), got {seed!r}")
    check_resamples(n_resamples)   # every CI and test draws here: the bound holds whichever door it came in by
    rng = np.random.default_rng(int(seed))
    out = {}
    for g in GENDERS:
        n = int(n_by_gender.get(g, 0))
        if n == 0:
            out[g] = np.zeros((n_resamples, 0), dtype=np.int64)
        else:
            out[g] = rng.multinomial(n, np.full(n, 1.0 / n), size=n_resamples)
    return out


def resample_scores(metric, spk_stats: dict[str, np.ndarray], counts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Scores of every resample: ``{"F", "M", "all", "delta_rel"}`` -> array (n_resamples,).

    ``spk_stats[g]`` holds the per-speaker sums of gender g in the column order of ``counts[g]``.
    A gender without speakers gives NaN scores (and so NaN Δrel).
    """
    summed = {}
    for g in GENDERS:
        c, s = counts[g], spk_stats[g]
        # float64 matmul: exact for integer counts far beyond any corpus size, and BLAS-fast.
        summed[g] = c.astype(np.float64) @ s.astype(np.float64) if s.shape[0] else None
    n_resamples = next(iter(counts.values())).shape[0]
    out = {}
    for g in GENDERS:
        out[g] = metric.scores(summed[g]) if summed[g] is not None else np.full(n_resamples, np.nan)
    present = [summed[g] for g in GENDERS if summed[g] is not None]
    out["all"] = metric.scores(sum(present)) if present else np.full(n_resamples, np.nan)
    out["delta_rel"] = delta_rel_array(out["F"], out["M"])
    return out


def percentile_ci(values: np.ndarray, level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval; None when any resample is undefined (NaN)."""
    values = np.asarray(values, dtype=float)
    if values.size == 0 or not np.all(np.isfinite(values)):
        return None
    alpha = 100.0 * (1.0 - level) / 2.0
    lo, hi = np.percentile(values, [alpha, 100.0 - alpha])
    return (float(lo), float(hi))
