"""What a study's design can detect: the minimum detectable difference of a test.

A test whose estimate has standard error ``se`` (from its resamples: speakers, and the pretraining
runs' and seeds' spread) and ``df`` degrees of freedom (from the replicates that give its
run-to-run term; None: speakers only, a normal reference) detects a true difference
``mde(se, df, alpha, power)`` or larger with probability ``power`` at two-sided level ``alpha``:
(t_{df, 1 - alpha/2} + t_{df, power}) x se, the textbook sample-size relation (a normal
approximation when df is None).

**Before a study runs** (``design_power``, ``design_mde``): the same relation on a planned design.
The variance of a contrast w (sum w = 0) of the conditions' Δrel, each condition with K
pretraining runs (checkpoints) x S downstream seeds scored on n_F / n_M test speakers, is

    V = sum_c w_c^2 [c_spk (1/n_F + 1/n_M) + var_run / K_c + var_seed / (K_c S_c)]

from three variance components of Δrel (docs/design-power.md): ``speaker`` (c_spk: what the test
speakers contribute, paired across conditions), ``run`` (var_run: between checkpoints pretrained
alike) and ``seed`` (var_seed: between downstream seeds of one checkpoint). With 2+ checkpoints of
some share the pretraining run is the unit and the runs' and seeds' part is known on sum(K_c - 1)
df. With one checkpoint per share a comparison is checkpoint against checkpoint, so var_run drops
out (it is not separable from the share's effect) and that part is known on sum(S_c - 1) df; with
one run per condition nothing can be estimated. The test's df are Welch-Satterthwaite's for the
speakers' part (known: many resamples) plus that one, as the study's tests take them
(analysis.contrasts), so a design sized here gets the MDE its report states. The primary test is
the slope over female share (per 10 points) with 4+ distinct shares, else the highest share
against the lowest; every other pair (and with a slope, the curvature test) is the secondary Holm
family, whose first step tests at alpha / m (alpha / 2m when comparisons against a reference
without pretraining share the follow-up level), behind the primary test.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from scipy import special

from analysis.store import ResultsStore
from analysis.tables import clean_scores
from corpora.base.errors import UserError

POWER = 0.80   # the power a minimum detectable difference is stated at
# The tests' definitions, declared here (the lowest of analysis.power, .contrasts, .conditions) and
# imported by the study's tests, so a planned design is sized with the very ones it will run.
ALPHA = 0.05               # the level of the primary test, and the whole table's family-wise error
SLOPE_UNIT = 10.0          # a slope is per 10 points (percent) of female share
TREND_MIN_SHARES = 4       # a dose-response (slope + curvature) needs this many distinct shares
# Where analysis.conditions stores a task's variance components of Δrel: rows of subset
# "conditions", checkpoint COMPONENTS_ROW, gender delta_rel, metric "{metric}:{name}".
CONDITIONS_SUBSET = "conditions"
COMPONENTS_ROW = "variance components"
COMPONENT_METRICS = {"speaker": "var_speaker", "run": "var_run", "seed": "var_seed"}
DEFAULTS_SOURCE = "defaults fitted on the built-in study"


def mde(se: float | None, df: float | None, alpha: float, power: float = POWER) -> float | None:
    """The smallest true difference the test detects with probability ``power`` at level ``alpha``
    (two-sided); None when ``se`` is unknown or not finite."""
    if se is None or not math.isfinite(se) or not 0 < alpha < 1:
        return None
    return float((quantile(1 - alpha / 2, df) + quantile(power, df)) * se)


def quantile(q: float, df: float | None) -> float:
    """The ``q`` quantile of t with ``df`` degrees of freedom (a normal when df is None or infinite);
    scipy.special's function, not a frozen distribution: the calibration tests call this ~10^5 times."""
    if df is None or not math.isfinite(df):
        return float(special.ndtri(q))
    return float(special.stdtrit(df, q))


# --- the documented defaults ------------------------------------------------------------------------

# Fitted on the built-in study (configs/mini.yaml: 12 test voices per gender, 5 shares x 2 pretraining
# runs (1 at 25 %) x 1 seed; the 2026-11-29 run of docs/demo-results.json): its conditions steps'
# speaker and run components (components_from_db of its results.db); with one seed per run its run
# component holds the seeds' variance too. The seed component is the earlier three-seed design's
# (configs/mini-three-shares.yaml, 6 test voices: asr-frozen 0.0, st 4.9). asr-e2e and gender-st ran
# one run per share: their own speaker component, the run and seed ones of asr-frozen (the same voices
# and WER) and st (BLEU). st's runs agreed within the speakers' noise (run 0.0, on 4 df).
DEFAULT_COMPONENTS = {"asr-frozen": {"speaker": 57.0, "run": 12.8, "seed": 0.0},
                      "asr-e2e": {"speaker": 33.7, "run": 12.8, "seed": 0.0},
                      "st": {"speaker": 97.1, "run": 0.0, "seed": 4.9},
                      "gender-st": {"speaker": 177.4, "run": 0.0, "seed": 4.9}}
RUN_AS_SEED = "var_run from the defaults: that study could not estimate it (one checkpoint per share)"


# --- a planned design -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DesignPower:
    """What a planned design detects: its primary test and that test's minimum detectable difference."""
    primary: str | None              # "slope" (per SLOPE_UNIT points of share), "pair" (highest vs lowest share)
    mde: float | None                # Δrel points (slope: per SLOPE_UNIT points of share); None: see reason
    se: float | None
    df: float | None                 # Welch-Satterthwaite's (None: a normal)
    unit: str | None                 # "checkpoint" (the pretraining run), "seed" (checkpoint vs checkpoint)
    n_secondary: int                 # tests in the secondary Holm family
    secondary_mde: float | None      # the least sensitive secondary pair, at alpha / n_secondary
    reason: str | None = None        # why there is no MDE


def _per_share(value, shares: list[float], what: str) -> list[int]:
    """An int for every share, or a sequence of them in the order of ``shares``."""
    out = [value] * len(shares) if isinstance(value, int) else list(value)
    if len(out) != len(shares) or any(not isinstance(v, int) or v < 1 for v in out):
        raise ValueError(f"{what}: one count (>= 1) per share, or one for all")
    return out


def primary_weights(shares: list[float]) -> tuple[str, list[float]]:
    """The primary test's contrast over the conditions (one per share): the OLS slope per
    SLOPE_UNIT points of share with TREND_MIN_SHARES+ shares, else highest minus lowest share."""
    if len(shares) >= TREND_MIN_SHARES:
        x = [100.0 * s for s in shares]
        mean = sum(x) / len(x)
        ss = sum((v - mean) ** 2 for v in x)
        return "slope", [(v - mean) / ss * SLOPE_UNIT for v in x]
    hi, lo = shares.index(max(shares)), shares.index(min(shares))
    return "pair", [1.0 if i == hi else -1.0 if i == lo else 0.0 for i in range(len(shares))]


def _terms(comp: dict, n_f: int, n_m: int, k: int, s: int, unit: str) -> tuple[float, float]:
    """A condition's Δrel variance (the mean over its checkpoints' seed means): (the speakers' part,
    the pretraining runs' and seeds' part). A missing run component is taken as the seeds'; a missing
    seed component (an earlier study with one seed per checkpoint, whose run term holds the seeds')
    as 0."""
    seed = comp.get("seed") or 0.0
    run = comp["run"] if comp.get("run") is not None else seed
    return comp["speaker"] * (1 / n_f + 1 / n_m), (run / k if unit == "checkpoint" else 0.0) + seed / (k * s)


def welch_df(parts: list[tuple[float, float | None]]) -> float | None:
    """Welch-Satterthwaite degrees of freedom of a sum of variances, each (variance, df); df None:
    known (the speaker part, from many resamples). None when no part has finite df (a normal)."""
    total = sum(v for v, _ in parts)
    den = sum(v * v / df for v, df in parts if df is not None and df > 0)
    if den <= 0 or total <= 0:
        return None
    return total * total / den


def design_power(components: dict, n_f: int, n_m: int, shares, checkpoints, seeds, alpha: float = ALPHA,
                 power: float = POWER, reference: bool = False) -> DesignPower:
    """The primary test of a planned design and its MDE (module docstring). ``components``:
    {"speaker", "run" (None: taken as "seed"), "seed"}; ``shares``: the distinct female shares
    (0..1) of the pretrained conditions; ``checkpoints`` / ``seeds``: per share, or one for all;
    ``reference``: a condition without pretraining is compared too (its family then shares the
    follow-up level with the secondary one: alpha / 2 each, analysis.contrasts.family_levels)."""
    shares = [float(s) for s in shares]
    if len(set(shares)) != len(shares):
        raise ValueError("shares: each distinct female share once")
    if len(shares) < 2:
        return DesignPower(None, None, None, None, None, 0, None, "fewer than two shares: nothing to compare")
    if min(n_f, n_m) < 2:
        return DesignPower(None, None, None, None, None, 0, None, "fewer than 2 test speakers of a gender")
    ks, ss = _per_share(checkpoints, shares, "checkpoints"), _per_share(seeds, shares, "seeds")
    unit = "checkpoint" if max(ks) >= 2 else "seed"
    df_runs = sum(k - 1 for k in ks) if unit == "checkpoint" else sum(s - 1 for s in ss)
    kind, w = primary_weights(shares)
    pairs = len(shares) * (len(shares) - 1) // 2
    n_secondary = pairs + 1 if kind == "slope" else pairs - 1    # a slope's curvature test; else the pair is primary
    if df_runs == 0:
        return DesignPower(kind, None, None, None, None, n_secondary, None,
                           "cannot be estimated: one run per condition")
    terms = [_terms(components, n_f, n_m, k, s, unit) for k, s in zip(ks, ss)]

    def test(weights: list[float], level: float) -> tuple[float | None, float, float | None]:
        v_spk = sum(wi * wi * t[0] for wi, t in zip(weights, terms))
        v_run = sum(wi * wi * t[1] for wi, t in zip(weights, terms))
        df = welch_df([(v_spk, None), (v_run, df_runs)])
        return mde(math.sqrt(v_spk + v_run), df, level, power), math.sqrt(v_spk + v_run), df
    primary, se, df = test(w, alpha)
    secondary = None
    if n_secondary and pairs:   # the least sensitive pair, at Holm's first step
        pair_weights = [[1.0 if i == a else -1.0 if i == b else 0.0 for i in range(len(shares))]
                        for a, b in combinations(range(len(shares)), 2)]
        secondary = max(test(pw, alpha / (2 if reference else 1) / n_secondary)[0] for pw in pair_weights)
    return DesignPower(kind, primary, se, df, unit, n_secondary, secondary)


def design_mde(components: dict, n_f: int, n_m: int, shares, checkpoints, seeds, alpha: float = ALPHA,
               power: float = POWER) -> float | None:
    """The primary test's MDE in Δrel points (slope: per 10 points of share) for a planned design;
    None when it cannot be estimated (one run per condition). See design_power."""
    return design_power(components, n_f, n_m, shares, checkpoints, seeds, alpha, power).mde


# --- components measured by an earlier study --------------------------------------------------------

def components_from_db(db: str | os.PathLike) -> dict[str, dict]:
    """{task type: {"speaker", "run", "seed"}} from the variance-component rows a study's
    conditions steps stored in results DB ``db`` (read by the checked reader: the project's schema
    only, finite values, the latest row per key), averaged over a task's language pairs and
    metrics; a component no run of the task could estimate is None. A DB without such rows, or with
    a negative variance, is a UserError."""
    path = Path(db)
    with ResultsStore(path, readonly=True) as store:
        raw = store.scores(subset=CONDITIONS_SUBSET, checkpoint=COMPONENTS_ROW)
    if raw.empty:
        raise UserError("the results DB holds no variance components (rows 'variance components' of the "
                        "conditions comparison)", path=path,
                        fix="name the folder or DB of a study whose conditions were compared by this version of "
                            "gendergap, or leave --variance-from out to use the defaults fitted on the built-in study")
    rows = clean_scores(raw, path)
    names = {m: c for c, m in COMPONENT_METRICS.items()}
    found: dict[str, dict[str, list[float]]] = {}
    for r in rows[rows["gender"] == "delta_rel"].itertuples():
        comp = names.get(str(r.metric).rsplit(":", 1)[-1])
        if comp is None:
            continue
        if r.value < 0:
            raise UserError(f"score row id={int(r.id)} ({r.task} {r.metric}) is a negative variance ({r.value:g})",
                            path=path, fix="re-run the study's conditions step that wrote it, or delete the row")
        found.setdefault(str(r.task), {}).setdefault(comp, []).append(float(r.value))
    return {task: {c: (sum(v) / len(v) if (v := got.get(c)) else None) for c in COMPONENT_METRICS}
            for task, got in found.items() if got.get("speaker")}


# --- the docs' table ------------------------------------------------------------------------------

def _cell(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def mde_table(task: str, speakers=(6, 12, 24), runs=(1, 2, 3), seeds=(1, 3), share_counts=(3, 5),
              components: dict | None = None) -> str:
    """A Markdown table of the primary test's MDE for ``task``'s DEFAULT_COMPONENTS (or
    ``components``): a row per shares x pretraining runs x seeds, a column per test speakers per
    gender; shares evenly spaced from 0 to 1 (3: a pair, female-only vs male-only; 5: a slope)."""
    comp = components or DEFAULT_COMPONENTS[task]
    head = ["shares (primary test)", "runs per share", "seeds"] + [f"{n} + {n} speakers" for n in speakers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * len(speakers)]
    for n_shares in share_counts:
        shares = [i / (n_shares - 1) for i in range(n_shares)]
        test = "slope per 10 points" if n_shares >= TREND_MIN_SHARES else "female-only vs male-only"
        for k in runs:
            for s in seeds:
                cells = [_cell(design_mde(comp, n, n, shares, k, s)) for n in speakers]
                unit = "" if k >= 2 else " (checkpoint vs checkpoint)"
                lines.append(f"| {n_shares} ({test}) | {k}{unit} | {s} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- what one more of each replicate buys -----------------------------------------------------------

SPEND_OPTIONS = ("test voices", "pretraining run", "downstream seed")


def spend_table(components: dict, n: int, shares, runs: int, seeds: int, costs: dict[str, float],
                voices_step: int | None = None) -> list[dict]:
    """For a planned design (``n`` test voices a gender, ``runs`` pretraining runs per share, ``seeds``
    downstream seeds per run), what each way of spending more buys: ``voices_step`` more test voices a
    gender (default ``n``: twice as many), one more pretraining run per share, one more seed per run.
    ``costs``: CPU-seconds of one more test voice pair (one female, one male voice through every job),
    of one more run of every share (pretraining and its downstream jobs), of one more seed on every
    run. Each row: option, what it adds, CPU-s, the primary test's MDE before and after, and the MDE
    points it removes per 1,000 CPU-s (None where an MDE cannot be estimated)."""
    step = voices_step or n
    before = design_mde(components, n, n, shares, runs, seeds)
    plans = {"test voices": (f"+{step} a gender", step * costs["voice_pair"], (n + step, runs, seeds)),
             "pretraining run": ("+1 a share", costs["run"], (n, runs + 1, seeds)),
             "downstream seed": ("+1 a run", costs["seed"], (n, runs, seeds + 1))}
    rows = []
    for option in SPEND_OPTIONS:
        what, cpu, (n2, k2, s2) = plans[option]
        after = design_mde(components, n2, n2, shares, k2, s2)
        gain = None if before is None or after is None or cpu <= 0 else (before - after) / cpu * 1000
        rows.append({"option": option, "adds": what, "cpu_s": cpu, "mde_before": before, "mde_after": after,
                     "per_1000_cpu_s": gain})
    return rows


def spend_markdown(task: str, n: int, shares, runs: int, seeds: int, costs: dict[str, float],
                   components: dict | None = None) -> str:
    """spend_table as the docs' Markdown table, for ``task``'s DEFAULT_COMPONENTS (or ``components``)."""
    rows = spend_table(components or DEFAULT_COMPONENTS[task], n, shares, runs, seeds, costs)
    lines = ["| one more | adds | CPU-s | primary MDE before | after | MDE points per 1,000 CPU-s |",
             "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        gain = "–" if r["per_1000_cpu_s"] is None else f"{r['per_1000_cpu_s']:.3f}"
        lines.append(f"| {r['option']} | {r['adds']} | {r['cpu_s']:,.0f} | {_cell(r['mde_before'])} | "
                     f"{_cell(r['mde_after'])} | {gain} |")
    return "\n".join(lines)


# The built-in study's design (configs/mini.yaml) as planned: 12 test voices a gender, five shares,
# two pretraining runs per share, one downstream seed per run.
BUILTIN_DESIGN = {"voices": 12, "shares": (0.0, 0.25, 0.5, 0.75, 1.0), "runs": 2, "seeds": 1}
# What one more of each replicate costs that design, in CPU-seconds, from its recorded run of 2026-11-29
# (2-core AMD EPYC, docs/measurements.md), per task: a test voice pair (two voices' 17 utterances each,
# extracted by every checkpoint and FBANK, 7.6 ms an utterance, and decoded by every job of the task: ST's
# beam search 8.6 ms an utterance, frozen ASR's greedy decoding within its job's noise),
# a run of every share (pretraining with its first seed accepted, ~1,090 CPU-s, then the run's
# feature extraction and the task's job), and a seed on every run (the task's job on each).
SPEND_COSTS = {"asr-frozen": {"voice_pair": 3.0, "run": 5 * (1090 + 20 + 61), "seed": 10 * 61},
               "st": {"voice_pair": 6.0, "run": 5 * (1090 + 20 + 102), "seed": 10 * 102}}


def builtin_spend_markdown(task: str) -> str:
    """The docs' table of what one more voice pair, run or seed buys the built-in design (SPEND_COSTS)."""
    d = BUILTIN_DESIGN
    return spend_markdown(task, d["voices"], list(d["shares"]), d["runs"], d["seeds"], SPEND_COSTS[task])
