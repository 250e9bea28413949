"""Δrel: the relative female-male gap of a score, Eq. 1 of the reference study.

    Δrel = 100 * (score_F - score_M) / (0.5 * (score_F + score_M))

It is the difference divided by the mean of the two, in percent. The sign follows the
score, not "who is better": for WER a negative Δrel means women get fewer errors; for BLEU a
positive Δrel means women get better translations (the study's Table 5 footnote).
"""
from __future__ import annotations

import math

import numpy as np

from corpora.base.errors import UserError


def delta_rel(female: float | None, male: float | None) -> float | None:
    """Δrel in percent; None when either score is missing or both are 0 (the mean is 0)."""
    if female is None or male is None:
        return None
    female, male = float(female), float(male)
    if not (math.isfinite(female) and math.isfinite(male)) or female + male == 0:
        return None
    return 100.0 * (female - male) / (0.5 * (female + male))


def delta_rel_array(female: np.ndarray, male: np.ndarray) -> np.ndarray:
    """Vectorised Δrel (one value per bootstrap resample); NaN where the mean is 0."""
    female = np.asarray(female, dtype=float)
    male = np.asarray(male, dtype=float)
    mean = 0.5 * (female + male)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 100.0 * (female - male) / mean
    return np.where(mean == 0, np.nan, out)


def delta_rel_rounding_interval(female: float, male: float, half_width: float = 0.05) -> tuple[float, float]:
    """The range of Δrel that scores printed as ``female`` and ``male`` can have.

    A table that prints scores rounded to one decimal (e.g. WER 17.7 and 20.9) only says the
    true scores lie within ±0.05 of them. Δrel grows with the female score and shrinks with the
    male score (for positive scores), so its extremes are at the corners
    (F - h, M + h) and (F + h, M - h). Recomputing Δrel from the rounded scores can therefore
    miss the Δrel printed by authors who computed it from unrounded scores by up to half this
    interval's width. Table 4(b) of the reference study is such a case: its printed Δrel are up
    to ~0.4 away from what its rounded WERs give (e.g. F-1K-Large: 17.7 vs 20.9 gives -16.58,
    printed -16.9), yet every printed value lies inside the interval the rounding allows
    (-17.10 .. -16.06 for that row), so the table is consistent with Eq. 1 on unrounded WERs.
    Tables 4(a) and 5 reproduce to within 0.05 from their printed scores directly.
    """
    lo = delta_rel(female - half_width, male + half_width)
    hi = delta_rel(female + half_width, male - half_width)
    return (lo, hi)


def checked_delta_rel(*, female: float, male: float) -> float:
    """Δrel of two scores as printed (`score delta`); a negative or an all-zero pair is a UserError."""
    negative = [f"--{k} {v:g}" for k, v in (("female", female), ("male", male)) if v < 0]
    if negative:  # WER and BLEU are never negative: a sign slip, not a score
        raise UserError(f"{', '.join(negative)}: a WER or BLEU score cannot be negative",
                        fix="pass the two scores as printed, e.g. --female 22.3 --male 25.7")
    d = delta_rel(female, male)
    if d is None:
        raise UserError("delta_rel is undefined when female + male = 0", fix="pass the two scores, e.g. 22.3 25.7")
    return d
