"""The comparison of pretraining conditions is itself tested: on simulated studies with a planted
difference of known size (and with none), its CIs cover the planted value at their nominal level
and it calls a difference under the null at most 5 % of the time (analysis/conditions.py).

A simulated study: 6 test speakers per gender with their own difficulty (shared by every model:
what pairing cancels), 3 downstream seeds per condition, each run with its own shift per gender
(what pooling the seeds accounts for; the size of the shifts seen between machines), words drawn
binomially per speaker. Error rates are WER-like: the statistics are (hits, sub, del, ins, words).
500 studies per check, 300 resamples each (a few seconds). Stated tolerance: the 95 % CI covers
the planted value in 92-99 % of studies (500 studies: +-2 points of binomial noise; the speaker
bootstrap with 6 speakers runs a little narrow, the seed term a little wide).

Each check fails when the pairing or the pooling is removed (the ablation tests below): unpaired
resamples give intervals far too wide (coverage ~100 %, no power), unpooled ones far too narrow
(coverage ~50 %, ~40 % false calls).
"""
from __future__ import annotations

import numpy as np
import pytest

from analysis.conditions import ONE_SEED, Condition, compare_conditions, holm
from analysis.delta import delta_rel
from analysis.metrics import get_metric

WER = get_metric("wer")
N_STUDIES, N_RESAMPLES = 500, 300
COVERAGE = (0.92, 0.99)
NULL = {1.0: (0.30, 0.36), 0.5: (0.30, 0.36), 0.0: (0.30, 0.36)}        # share -> (WER F, WER M)
PLANTED = {1.0: (0.25, 0.36), 0.5: (0.275, 0.36), 0.0: (0.30, 0.36)}    # women gain with the female share


def simulate(rng, rates: dict, n_speakers: int = 6, seeds: int = 3, words: int = 270, speaker_sd: float = 0.5,
             seed_sd: float = 0.08) -> list[Condition]:
    """One study: every condition's runs on the same speakers."""
    difficulty = {g: np.exp(rng.normal(-speaker_sd ** 2 / 2, speaker_sd, n_speakers)) for g in "FM"}
    n_words = {g: rng.integers(int(0.8 * words), int(1.2 * words), n_speakers) for g in "FM"}
    out = []
    for share, (p_f, p_m) in rates.items():
        runs = []
        for _ in range(seeds):
            run = {}
            for g, p in (("F", p_f), ("M", p_m)):
                shift = np.exp(rng.normal(-seed_sd ** 2 / 2, seed_sd))
                errors = rng.binomial(n_words[g], np.minimum(p * difficulty[g] * shift, 0.95))
                zeros = np.zeros_like(errors)
                run[g] = np.stack([n_words[g] - errors, errors, zeros, zeros, n_words[g]], 1).astype(np.int64)
            runs.append(run)
        out.append(Condition(f"share {share:g}", share, tuple(runs)))
    return out


def true_delta_rel(rates: dict) -> dict:
    return {share: delta_rel(100 * f, 100 * m) for share, (f, m) in rates.items()}


def planted_slope(rates: dict) -> float:
    x = np.array([100 * s for s in rates])
    y = np.array(list(true_delta_rel(rates).values()))
    return float(10 * np.polyfit(x, y, 1)[0])


def run_studies(rates: dict, *, only: tuple = (1.0, 0.0), **options) -> dict:
    """Coverage of the planted Δrel difference (female-only minus male-only) and of the planted
    slope, and the rate of calls of each, over N_STUDIES simulated studies."""
    rng = np.random.default_rng(2026)
    truth = true_delta_rel(rates)
    want_pair, want_slope = truth[only[0]] - truth[only[1]], planted_slope(rates)
    hits = {"pair": 0, "slope": 0, "pair_called": 0, "slope_called": 0}
    for i in range(N_STUDIES):
        res = compare_conditions(WER, simulate(rng, rates), n_resamples=N_RESAMPLES, seed=i, **options)
        pair = next(p for p in res["pairs"] if (p["a"], p["b"]) == (f"share {only[0]:g}", f"share {only[1]:g}"))
        lo, hi = pair["ci"]["delta_rel"]
        hits["pair"] += lo <= want_pair <= hi
        hits["pair_called"] += pair["called"]["delta_rel"]
        lo, hi = res["trend"]["ci"]["delta_rel"]
        hits["slope"] += lo <= want_slope <= hi
        hits["slope_called"] += res["trend"]["called"]["delta_rel"]
    return {k: v / N_STUDIES for k, v in hits.items()}


@pytest.fixture(scope="module")
def null_studies():
    return run_studies(NULL)


@pytest.fixture(scope="module")
def planted_studies():
    return run_studies(PLANTED)


def test_cis_cover_a_planted_difference_and_slope_at_their_nominal_level(planted_studies):
    assert COVERAGE[0] <= planted_studies["pair"] <= COVERAGE[1], planted_studies
    assert COVERAGE[0] <= planted_studies["slope"] <= COVERAGE[1], planted_studies


def test_under_the_null_cis_cover_zero_and_at_most_5_percent_are_called(null_studies):
    assert COVERAGE[0] <= null_studies["pair"] <= COVERAGE[1], null_studies
    assert COVERAGE[0] <= null_studies["slope"] <= COVERAGE[1], null_studies
    assert null_studies["pair_called"] <= 0.05 and null_studies["slope_called"] <= 0.05, null_studies


def test_without_the_pairing_the_intervals_lose_their_calibration():
    """Each condition drawing its own speakers: the shared speaker difficulty no longer cancels."""
    unpaired = run_studies(PLANTED, paired=False)
    assert unpaired["pair"] > COVERAGE[1] and unpaired["slope"] > COVERAGE[1], unpaired


def test_without_pooling_the_seeds_the_intervals_lose_their_calibration():
    """Ignoring the seeds' spread: intervals too narrow and the null called far too often."""
    planted = run_studies(PLANTED, pool_seeds=False)
    assert planted["pair"] < COVERAGE[0] and planted["slope"] < COVERAGE[0], planted
    null = run_studies(NULL, pool_seeds=False)
    assert null["pair_called"] > 0.05 and null["slope_called"] > 0.05, null


def test_a_side_trained_once_is_not_compared_and_never_called():
    rng = np.random.default_rng(0)
    conditions = simulate(rng, {1.0: (0.10, 0.60), 0.0: (0.60, 0.10)}, seeds=1)   # a huge gap, one seed
    res = compare_conditions(WER, conditions, n_resamples=200, seed=0)
    (pair,) = res["pairs"]
    assert pair["status"] == ONE_SEED and abs(pair["difference"]["delta_rel"]) > 100
    assert pair["ci"]["delta_rel"] is None and not any(pair["called"].values())
    assert res["trend"] is None   # two shares: no trend


def test_holm_adjusts_step_down_and_keeps_order():
    assert holm([0.01, 0.04, None, 0.03]) == [0.03, 0.06, None, 0.06]
    assert holm([0.5]) == [0.5] and holm([]) == []
