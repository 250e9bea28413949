"""Simulated studies for tests/test_conditions_calibration.py: per-utterance errors of every run of
every pretraining condition on one shared test set, and the true value each comparison estimates.

What varies, on the log scale of a run's expected error rate (WER) or n-gram precision (BLEU):

* the **speaker** (shared by every model: what pairing cancels) and the **utterance** (likewise);
* the **speaker x model** interaction: a pretrained checkpoint (and the reference) suits some
  voices more than others; a smaller speaker x run term on top;
* **overdispersion** per utterance and run: gamma-Poisson error counts (WER), beta-binomial
  n-gram matches (BLEU);
* the **checkpoint** (pretraining run) within its condition and the **seed** within its checkpoint:
  a shift common to both genders and one per gender (what moves Δrel from run to run).

Every lognormal factor below the run has mean 1, so a run's corpus-level rate over an unbounded test
set is its condition's rate times exp(checkpoint + seed shifts): the **true** score of a condition is
that score expected over its checkpoints and seeds (Gauss-Hermite quadrature; `true_values`), and
its true Δrel is the Δrel of its true F and M. That is what analysis.conditions estimates: a
condition's F (M) is the mean over its checkpoints of its seeds' mean corpus-level F (M), and its
Δrel that of its own F and M.
With one checkpoint per condition a comparison is checkpoint vs checkpoint (the issue's contract):
the truth is then the checkpoint's own, which the simulator fixes by folding the checkpoint shift
into the condition's rates (`Design.checkpoint_varies` False).

The statistics per speaker are what analysis.metrics takes: WER (hits, sub, del, ins, ref_words);
BLEU (sys_len, ref_len, match_1..4, total_1..4), sacrebleu's additive sentence statistics.
`FastBLEU` scores BLEU statistics as analysis.metrics.BLEU does, vectorised (sacrebleu's
compute_bleu is a Python call per row: too slow for thousands of studies); a test checks them equal.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy import optimize, stats

from analysis.conditions import Condition
from analysis.delta import delta_rel
from analysis.metrics import BLEU, get_metric

ORDERS = 4
PRECISION = np.array([0.62, 0.36, 0.22, 0.14])   # a pretrained model's n-gram precisions (BLEU ~ 27)
CAP = 0.97                                       # the most an utterance's n-gram precision can reach
WER_M = 0.25                                     # a pretrained model's WER on men's speech
REFERENCE_SCALE = {"wer": 1.3, "bleu": 0.85}     # the reference (FBANK): 30 % more errors, 15 % lower precisions
SLOPE_UNIT = 10.0                                # a slope is per 10 points of female share


@dataclass(frozen=True)
class Effects:
    """Standard deviations on the log scale (0.1 = about 10 %), and the overdispersion. The defaults
    give the built-in design (6 voices per gender, 3 seeds) a female-vs-male Δrel standard error of
    about 12 points, near what the built-in study measured (8-12)."""
    speaker: float = 0.35
    utterance: float = 0.30
    speaker_x_model: float = 0.08
    speaker_x_run: float = 0.04
    checkpoint: float = 0.08            # common to both genders
    checkpoint_gender: float = 0.06     # per gender: what moves a checkpoint's Δrel
    seed: float = 0.04
    seed_gender: float = 0.03
    gamma_shape: float = 6.0            # WER: errors ~ Poisson(mean x Gamma(shape, 1/shape))
    beta_precision: float = 30.0        # BLEU: matches ~ Binomial(total, Beta(q phi, (1 - q) phi))

    @property
    def below_run(self) -> float:
        """The sd of everything under a run's shift that the n-gram precision cap sees (BLEU)."""
        return math.sqrt(self.speaker ** 2 + self.utterance ** 2 + self.speaker_x_model ** 2 + self.speaker_x_run ** 2)


@dataclass(frozen=True)
class Design:
    """A study's design: metric, the pretrained conditions' shares with their checkpoints' seeds
    (``seeds[i][j]``: downstream seeds of checkpoint j of share i), the reference's seeds (0: none)."""
    name: str
    metric: str
    shares: tuple
    seeds: tuple
    reference_seeds: int = 0
    n_speakers: int = 8                 # per gender
    utterances: tuple = (12, 24)        # per speaker, uniform
    words: tuple = (5, 20)              # per utterance, uniform
    effects: Effects = field(default_factory=Effects)

    @property
    def checkpoint_varies(self) -> bool:
        """Some condition has 2+ checkpoints: conditions are compared, not checkpoints."""
        return any(len(s) > 1 for s in self.seeds)

    def names(self) -> list[str]:
        return [f"{100 * s:g}% F" for s in self.shares] + (["FBANK"] if self.reference_seeds else [])


class FastBLEU(BLEU):
    """analysis.metrics.BLEU with a vectorised `scores` (sacrebleu's formula; rows with a zero
    count go through sacrebleu itself)."""

    def scores(self, stats_: np.ndarray) -> np.ndarray:
        s = np.rint(np.asarray(stats_, dtype=float))
        sys_len, ref_len = s[:, 0], s[:, 1]
        correct, total = s[:, 2:2 + ORDERS], s[:, 2 + ORDERS:]
        ok = np.all(correct > 0, axis=1) & np.all(total > 0, axis=1) & (sys_len > 0)
        out = np.empty(len(s))
        with np.errstate(divide="ignore", invalid="ignore"):
            bp = np.where(sys_len < ref_len, np.exp(1 - ref_len / sys_len), 1.0)
            out[ok] = (bp * np.exp(np.log(100.0 * correct / total).mean(axis=1)))[ok]
        if not ok.all():
            out[~ok] = super().scores(s[~ok])
        return out


def metric_for(design: Design):
    """The metric object the analysis gets for ``design`` (BLEU: the vectorised one)."""
    return get_metric("wer") if design.metric == "wer" else FastBLEU()


# --- the truth: a run's score over an unbounded test set, expected over checkpoints and seeds ---------

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(16)     # E[f(Z)], Z ~ N(0, 1)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def _run_sds(design: Design, reference: bool) -> tuple[float, float]:
    """(common, per-gender) sd of a run's log shift around its condition's rates."""
    e = design.effects
    ckpt = not reference and design.checkpoint_varies
    common = math.sqrt(e.seed ** 2 + (e.checkpoint ** 2 if ckpt else 0.0))
    gender = math.sqrt(e.seed_gender ** 2 + (e.checkpoint_gender ** 2 if ckpt else 0.0))
    return common, gender


def _score(design: Design, rate: float, shift: np.ndarray) -> np.ndarray:
    """A run's corpus score (percent) over an unbounded test set, for log shifts ``shift``."""
    if design.metric == "wer":
        return 100.0 * rate * np.exp(shift)
    s = design.effects.below_run
    a = rate * PRECISION[:, None] * np.exp(shift)[None, :]          # (orders, shifts)
    lc = np.log(CAP / a)
    expected = a * stats.norm.cdf((lc - s * s / 2) / s) + CAP * stats.norm.sf((lc + s * s / 2) / s)
    return 100.0 * np.exp(np.log(expected).mean(axis=0))          # brevity penalty 1: hypotheses run longer


def true_values(design: Design, rates: tuple[float, float], reference: bool = False) -> dict:
    """The true F and M of a condition with rates (F, M) (WER rates, or BLEU precision multipliers):
    a run's corpus score expected over its checkpoint's and seed's shifts (quadrature); its true
    Δrel is that of its true F and M, as analysis.conditions defines a condition's Δrel (that of
    the condition's own F and M)."""
    common, gender = _run_sds(design, reference)
    z1, z2, z3 = np.meshgrid(_NODES, _NODES, _NODES, indexing="ij")
    w = (_WEIGHTS[:, None, None] * _WEIGHTS[None, :, None] * _WEIGHTS[None, None, :]).ravel()
    f = _score(design, rates[0], (common * z1 + gender * z2).ravel())
    m = _score(design, rates[1], (common * z1 + gender * z3).ravel())
    f, m = float(w @ f), float(w @ m)
    return {"F": f, "M": m, "delta_rel": delta_rel(f, m)}


@lru_cache(maxsize=None)
def rates_for(design: Design, delta: float, reference: bool = False) -> tuple[float, float]:
    """The (F, M) rates of a condition whose true Δrel is ``delta``; M fixed, F solved."""
    base = 1.0 if design.metric == "bleu" else WER_M
    m = base * (REFERENCE_SCALE[design.metric] if reference else 1.0)
    def gap(log_ratio):
        return true_values(design, (m * math.exp(log_ratio), m), reference)["delta_rel"] - delta
    return m * math.exp(optimize.brentq(gap, -3.0, 3.0, xtol=1e-10)), m


# --- planted truths ---------------------------------------------------------------------------------

NULL_DELTA = -8.0      # every condition's true Δrel under the global null (women a little better served)


def slope_weights(shares) -> np.ndarray:
    """OLS slope of a condition value on the female share, per SLOPE_UNIT points: slope = w @ y."""
    x = 100.0 * np.asarray(shares, dtype=float)
    return (x - x.mean()) / np.sum((x - x.mean()) ** 2) * SLOPE_UNIT


def curvature_weights(shares) -> np.ndarray:
    """The lack-of-fit contrast the contract names: the orthogonal quadratic (x^2 less its constant
    and linear parts), scaled so that its positive weights sum to 1."""
    x = np.asarray(shares, dtype=float)
    basis = np.stack([np.ones_like(x), x], 1)
    q = x * x - basis @ np.linalg.lstsq(basis, x * x, rcond=None)[0]
    return q / q[q > 0].sum()


def bump_pattern(shares) -> np.ndarray:
    """Δrel at the middle share alone, made orthogonal to a constant and to the slope (a
    dose-response that is not a line: what a lack-of-fit test is for)."""
    x = np.asarray(shares, dtype=float)
    p = (np.abs(x - np.median(x)) < 1e-9).astype(float)
    basis = np.stack([np.ones_like(x), x - x.mean()], 1)
    p = p - basis @ np.linalg.lstsq(basis, p, rcond=None)[0]
    return p


def planted(design: Design, primary: float = 0.0, curvature: float = 0.0, ends: bool = False) -> dict:
    """Condition name -> true Δrel: the null plus a primary effect of size ``primary`` (the slope
    per 10 points with 4+ shares, else female-only minus male-only) plus, with 4+ shares, a bump at
    the middle share whose lack-of-fit contrast (curvature_weights) is ``curvature``. ``ends``: the
    primary effect carried by the highest and lowest shares alone, the others equal (a partial
    null: the comparisons among the middle shares, and the curvature, are null)."""
    shares = np.asarray(design.shares, dtype=float)
    if ends:
        pattern = (shares == shares.max()).astype(float) - (shares == shares.min())
        unit = slope_weights(shares) @ pattern if len(set(design.shares)) >= 4 else 2.0
        line = primary * pattern / unit
    elif len(set(design.shares)) >= 4:
        line = primary * (100.0 * shares - 100.0 * shares.mean()) / SLOPE_UNIT
    else:
        line = primary * (shares - shares.mean()) / (shares.max() - shares.min())
    bump = 0.0
    if curvature:
        p = bump_pattern(shares)
        bump = curvature * p / float(curvature_weights(shares) @ p)
    values = NULL_DELTA + line + bump
    out = {name: float(v) for name, v in zip(design.names(), values)}
    if design.reference_seeds:
        out["FBANK"] = NULL_DELTA
    return out


def rates_of(design: Design, truth: dict) -> dict:
    """Condition name -> (F, M) rates that make its true Δrel ``truth[name]``."""
    return {name: rates_for(design, d, reference=(name == "FBANK")) for name, d in truth.items()}


# --- simulation -------------------------------------------------------------------------------------

def _lognormal(rng, sd: float, shape) -> np.ndarray:
    """Mean-1 lognormal factors."""
    return np.exp(rng.normal(-sd * sd / 2, sd, shape)) if sd > 0 else np.ones(shape)


def _wer_stats(rng, design: Design, words, mean) -> np.ndarray:
    """Per-speaker WER rows (hits, sub, del, ins, ref_words) from per-utterance expected errors."""
    k = design.effects.gamma_shape
    errors = rng.poisson(mean * rng.gamma(k, 1.0 / k, mean.shape))
    ins = rng.binomial(errors, 0.15)
    rest = errors - ins
    sub_del = np.minimum(rest, words)          # a reference word is wrong at most once; the rest are insertions
    ins = ins + rest - sub_del
    sub = rng.binomial(sub_del, 0.7)
    rows = np.stack([words - sub_del, sub, sub_del - sub, ins, words], -1)
    return rows.sum(axis=-2)                   # over utterances


def _bleu_stats(rng, design: Design, words, sys_len, quality) -> np.ndarray:
    """Per-speaker BLEU rows (sys_len, ref_len, match_1..4, total_1..4); ``quality`` multiplies
    each utterance's n-gram precisions."""
    phi = design.effects.beta_precision
    present = words > 0
    totals = np.stack([np.where(present, np.maximum(sys_len - n, 0), 0) for n in range(ORDERS)], -1)
    q = np.clip(PRECISION * quality[..., None], 1e-6, CAP)
    matches = rng.binomial(totals, rng.beta(q * phi, (1 - q) * phi))
    rows = np.concatenate([np.stack([np.where(present, sys_len, 0), words], -1), matches, totals], -1)
    return rows.sum(axis=-2)


def simulate(design: Design, rates: dict, n_studies: int, rng) -> list[list[Condition]]:
    """``n_studies`` studies of ``design``: every run of every condition on one test set per study.
    ``rates``: condition name -> (F, M) rates (rates_of)."""
    e, b, n = design.effects, n_studies, design.n_speakers
    u_max = design.utterances[1]
    shape = (b, 2, n, u_max)                                   # study, gender (F, M), speaker, utterance
    n_utts = rng.integers(design.utterances[0], u_max + 1, (b, 2, n))
    words = np.where(np.arange(u_max) < n_utts[..., None], rng.integers(design.words[0], design.words[1] + 1, shape), 0)
    sys_len = words + rng.integers(-1, 3, shape)               # hypotheses a little longer on average
    shared = _lognormal(rng, e.speaker, (b, 2, n))[..., None] * _lognormal(rng, e.utterance, shape)
    plan = [(name, share, seeds) for name, share, seeds in zip(design.names(), design.shares, design.seeds)]
    if design.reference_seeds:
        plan.append(("FBANK", None, (design.reference_seeds,)))
    studies: list[list] = [[] for _ in range(b)]
    for name, share, seeds in plan:
        ckpt_moves = share is not None and design.checkpoint_varies
        checkpoints = []
        for n_seeds in seeds:
            ck_shift = (rng.normal(0, e.checkpoint, (b, 1)) + rng.normal(0, e.checkpoint_gender, (b, 2))
                        if ckpt_moves else np.zeros((b, 2)))
            ck_fit = _lognormal(rng, e.speaker_x_model, (b, 2, n))
            runs = []
            for _ in range(n_seeds):
                shift = ck_shift + rng.normal(0, e.seed, (b, 1)) + rng.normal(0, e.seed_gender, (b, 2))
                fit = ck_fit * _lognormal(rng, e.speaker_x_run, (b, 2, n))
                quality = (np.array(rates[name])[None, :] * np.exp(shift))[..., None, None] * shared * fit[..., None]
                if design.metric == "wer":
                    spk = _wer_stats(rng, design, words, words * quality)
                else:
                    spk = _bleu_stats(rng, design, words, sys_len, quality)
                runs.append(spk.astype(np.int64))
            checkpoints.append(runs)
        for i in range(b):
            cks = tuple(tuple({"F": r[i, 0], "M": r[i, 1]} for r in runs) for runs in checkpoints)
            studies[i].append(Condition(name, share, cks))
    return studies


def corpus_scores(metric, run: dict) -> dict:
    """F, M and Δrel of one run on its whole test set."""
    f = metric.score(run["F"].sum(axis=0))
    m = metric.score(run["M"].sum(axis=0))
    return {"F": f, "M": m, "delta_rel": delta_rel(f, m)}


def primary_truth(design: Design, truth: dict) -> float:
    """The primary test's true value: the slope per 10 points of share with 4+ shares, else the
    highest share's Δrel minus the lowest's (the contract)."""
    names = design.names()[:len(design.shares)]
    values = np.array([truth[n] for n in names])
    if len(set(design.shares)) >= 4:
        return float(slope_weights(design.shares) @ values)
    return float(values[int(np.argmax(design.shares))] - values[int(np.argmin(design.shares))])


def contrast_truth(design: Design, weights: dict, truth: dict) -> float:
    """A test's true value from its weights over the conditions (a test of the result)."""
    return float(sum(w * truth[name] for name, w in weights.items()))
