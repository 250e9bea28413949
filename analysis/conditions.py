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
one table column (every pair's test of one score; the Δrel and All slopes). A p-value is at
least 1 / (resamples + 1), so with k pairs Holm can call nothing unless resamples > k / ALPHA
(the study's 1,000 resamples: up to 50 pairs). With a handful of seeds the seed term is a t with
few degrees of freedom: heavy tails, which is what three seeds really say about a mean. A difference is **called** only when its
Holm-adjusted p is under ``ALPHA``, its CI excludes 0 and it exceeds, in size, the seed sd of the
difference (sqrt(s_A^2 + s_B^2): what two single runs differ by); a side with one run is "one
seed: not compared" and never called. With fewer than 2 test speakers of a gender the speaker
resamples draw that speaker every time, so an interval would come from the seed draws alone:
nothing is compared ("fewer than 2 test speakers of a gender: not compared"), and a condition's own
interval is left out for that gender, All and Δrel (as analysis/scoring.py does for a run).
tests/test_conditions_calibration.py checks coverage and false calls on simulated studies.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from analysis.bootstrap import GENDERS, RESULT_KEYS, draw_counts, percentile_ci, resample_scores
from analysis.compare import check_pairable, metric_from, speaker_arrays
from analysis.store import ResultsStore
from corpora.base.boundary import read_json
from corpora.base.provenance import file_fingerprint

ALPHA = 0.05
SLOPE_UNIT = 10.0            # a slope is per 10 points (percent) of female share
ONE_SEED = "one seed: not compared"
MIN_SPEAKERS = 2             # test speakers per gender a speaker resample needs to vary at all
FEW_SPEAKERS = f"fewer than {MIN_SPEAKERS} test speakers of a gender: not compared"


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
    single = [g for g in GENDERS if n_spk[g] == 1]   # the same speaker in every resample: no interval
    no_interval = set(single) | ({"all", "delta_rel"} if single else set())
    counts = draw_counts(n_spk, n_resamples, seed)
    rng = np.random.default_rng([int(seed), 1])
    stats = {}
    for i, c in enumerate(conditions):
        cts = counts if paired else draw_counts(n_spk, n_resamples, int(seed) + 1 + i)
        full, boot = _estimates(metric, c.runs, _full(n_spk)), _estimates(metric, c.runs, cts)
        n = len(c.runs)
        # a score undefined in a run (Δrel of two BLEU 0s) is undefined for the condition: no mean, no test
        ok = {k: bool(np.all(np.isfinite(full[k]))) for k in RESULT_KEYS}
        sd = {k: (float(full[k][:, 0].std(ddof=1)) if n > 1 and ok[k] else None) for k in RESULT_KEYS}
        stats[c.name] = {"n": n, "mean": {k: float(full[k][:, 0].mean()) if ok[k] else None for k in RESULT_KEYS},
                         "sd": sd,
                         "shift_sd": {k: _shift_sd(sd[k], boot[k]) for k in RESULT_KEYS},
                         "boot": {k: boot[k].mean(axis=0) for k in RESULT_KEYS}}
    for c in conditions:   # each condition's own interval (the trend plot's bars)
        st = stats[c.name]
        st["ci"] = {}
        for k in RESULT_KEYS:
            if st["mean"][k] is None or k in no_interval:
                st["ci"][k] = None
                continue
            resamples = st["boot"][k]
            if pool_seeds and st["n"] > 1:
                resamples = resamples + _seed_draws([(1.0, st["shift_sd"][k], st["n"])], rng, n_resamples)
            st["ci"][k] = _test(st["mean"][k], resamples, level)[0]
    few = min(n_spk.values()) < MIN_SPEAKERS
    pairs = _pairs(conditions, stats, rng, n_resamples, level, pool_seeds, few)
    for k in RESULT_KEYS:   # Holm within each column of the table: the pairs' tests of one score
        for p, adjusted in zip(pairs, holm([p["p"][k] for p in pairs])):
            p["p_holm"][k] = adjusted
            p["called"][k] = _called(p, k, pool_seeds)
    trend = _trend(conditions, stats, rng, n_resamples, level, pool_seeds, few)
    return {"metric": metric.name, "conditions": {c.name: {"share": c.share, "n_runs": stats[c.name]["n"],
                                                         "mean": stats[c.name]["mean"], "sd": stats[c.name]["sd"],
                                                         "ci": stats[c.name]["ci"]}
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
    if test["status"] != "compared" or ci is None or p is None or test["difference"][k] is None:
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


def _status(few_speakers: bool, one_seed: bool) -> str:
    """Whether a test is made, else why not: too few test speakers first (more seeds would not help)."""
    return FEW_SPEAKERS if few_speakers else ONE_SEED if one_seed else "compared"


def _pairs(conditions, stats, rng, n_resamples, level, pool_seeds, few_speakers) -> list[dict]:
    pretrained = sorted((c for c in conditions if c.share is not None), key=lambda c: -c.share)
    reference = [c for c in conditions if c.share is None]
    pairs = list(itertools.combinations(pretrained, 2)) + [(c, r) for r in reference for c in pretrained]
    out = []
    for a, b in pairs:
        sa, sb = stats[a.name], stats[b.name]
        one = min(sa["n"], sb["n"]) < 2
        test = {"a": a.name, "b": b.name, "status": _status(few_speakers, one), "difference": {}, "ci": {},
                "p": {}, "p_holm": {}, "seed_sd": {}, "called": {}}
        for k in RESULT_KEYS:
            undefined = sa["mean"][k] is None or sb["mean"][k] is None
            d = None if undefined else sa["mean"][k] - sb["mean"][k]
            test["difference"][k] = d
            test["seed_sd"][k] = None if one or undefined else math.hypot(sa["sd"][k], sb["sd"][k])
            if one or undefined or few_speakers:
                test["ci"][k] = test["p"][k] = None
                continue
            resamples = sa["boot"][k] - sb["boot"][k]
            if pool_seeds:
                resamples = resamples + _seed_draws([(1.0, sa["shift_sd"][k], sa["n"]),
                                                     (-1.0, sb["shift_sd"][k], sb["n"])], rng, n_resamples)
            test["ci"][k], test["p"][k] = _test(d, resamples, level)
        out.append(test)
    return out


def _trend(conditions, stats, rng, n_resamples, level, pool_seeds, few_speakers) -> dict | None:
    """The slope over female share (per SLOPE_UNIT points) of Δrel and of every score."""
    pretrained = [c for c in conditions if c.share is not None]
    if len({c.share for c in pretrained}) < 3:
        return None
    x = np.array([100.0 * c.share for c in pretrained])
    w = (x - x.mean()) / np.sum((x - x.mean()) ** 2) * SLOPE_UNIT   # slope = sum(w * y)
    one = min(stats[c.name]["n"] for c in pretrained) < 2
    out = {"status": _status(few_speakers, one), "shares": x.tolist(), "slope": {}, "ci": {}, "p": {},
           "p_holm": {}, "seed_sd": {}, "called": {}, "difference": {}}
    for k in RESULT_KEYS:
        if any(stats[c.name]["mean"][k] is None for c in pretrained):
            out["slope"][k] = out["difference"][k] = out["seed_sd"][k] = out["ci"][k] = out["p"][k] = None
            continue
        y = np.array([stats[c.name]["mean"][k] for c in pretrained])
        out["slope"][k] = out["difference"][k] = float(w @ y)
        sds = [stats[c.name]["sd"][k] for c in pretrained]
        out["seed_sd"][k] = None if one else float(math.sqrt(sum((wi * s) ** 2 for wi, s in zip(w, sds))))
        if one or few_speakers:
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


# --- a study's conditions: from the rows' result files to the results store -----------------------

REFERENCE = "reference"


def female_share(entry: dict) -> float | None:
    """A checkpoint's female share of its pretraining speech from Table 3's F and M percentages
    (speech of unknown gender left out); None when they are not recorded."""
    f, m = entry.get("female_pct"), entry.get("male_pct")
    if f is None or m is None or f + m <= 0:
        return None
    return round(float(f) / (float(f) + float(m)), 4)


def group_conditions(checkpoints: dict[str, dict]) -> tuple[dict[str, tuple[str, float | None]], list[str]]:
    """``{ckpt: {"share": float|None, "set": name|None, "reference": bool}}`` -> (ckpt -> (condition
    name, share)), ckpts left out. Checkpoints of one share are replicates of one condition, named by
    their pretraining set when they agree (``female``), else by the share (``50% F``)."""
    by_share: dict[float, list[str]] = {}
    out, left_out = {}, []
    for ck, info in checkpoints.items():
        if info.get("reference"):
            out[ck] = (ck, None)
        elif info.get("share") is None:
            left_out.append(ck)
        else:
            by_share.setdefault(float(info["share"]), []).append(ck)
    for share, cks in by_share.items():
        sets = {checkpoints[ck].get("set") for ck in cks}
        name = sets.pop() if len(sets) == 1 and None not in sets else f"{100 * share:.0f}% F"
        out.update({ck: (name, share) for ck in cks})
    return out, left_out


def conditions_rows(res: dict, task: str, lang_pair: str, signature: str, n_utts: dict) -> list[dict]:
    """Results-store rows (subset ``conditions``) of a compare_conditions result: per condition its
    mean, seed sd, runs and share; per pair and for the trend the difference (or slope) with its CI,
    p, Holm p, seed sd and call (1/0)."""
    m, rows = res["metric"], []
    n_spk = {"F": res["n_speakers"]["F"], "M": res["n_speakers"]["M"]}
    n_spk["all"] = n_spk["delta_rel"] = n_spk["F"] + n_spk["M"]

    def row(name, k, metric, value, ci=None):
        return {"checkpoint": name, "task": task, "lang_pair": lang_pair, "subset": "conditions", "gender": k,
                "metric": metric, "value": float(value), "ci_low": ci[0] if ci else None,
                "ci_high": ci[1] if ci else None, "n_utts": n_utts.get("all" if k == "delta_rel" else k),
                "n_speakers": n_spk[k], "signature": signature}
    for name, c in res["conditions"].items():
        rows.append(row(name, "all", f"{m}:n_runs", c["n_runs"]))
        if c.get("n_checkpoints"):
            rows.append(row(name, "all", f"{m}:n_checkpoints", c["n_checkpoints"]))
        if c["share"] is not None:
            rows.append(row(name, "all", f"{m}:female_share", 100 * c["share"]))
        for k in RESULT_KEYS:
            if c["mean"][k] is None:
                continue
            rows.append(row(name, k, f"{m}:condition", c["mean"][k], c["ci"][k]))
            if c["sd"][k] is not None:
                rows.append(row(name, k, f"{m}:condition_sd", c["sd"][k]))
    tests = [(f"{p['a']} vs {p['b']}", "diff", p) for p in res["pairs"]]
    if res["trend"] is not None:
        tests.append(("female share (slope per 10 points)", "slope", res["trend"]))
    for name, what, t in tests:
        for k in RESULT_KEYS:
            if t["difference"][k] is None:
                continue
            rows.append(row(name, k, f"{m}:{what}", t["difference"][k], t["ci"][k]))
            rows.append(row(name, k, f"{m}:{what}_compared", t["status"] == "compared"))
            if t["status"] == FEW_SPEAKERS:   # the report's reason for "not compared" (else: one seed)
                rows.append(row(name, k, f"{m}:{what}_few_speakers", True))
            for field in ("p", "p_holm", "seed_sd"):
                if t[field].get(k) is not None:
                    rows.append(row(name, k, f"{m}:{what}_{field}", t[field][k]))
            rows.append(row(name, k, f"{m}:{what}_called", bool(t["called"][k])))
    return rows


def compare_and_store(results: dict[str, list[str]], result_key: str | None, checkpoints: dict[str, dict], db: str,
                      task: str, lang_pair: str, bootstrap: int, seed: int) -> dict | None:
    """Compare the conditions of one task's rows and store the rows in ``db`` as one run.

    ``results``: checkpoint -> its runs' result JSON files (one per seed); ``checkpoints``: what
    group_conditions takes. Returns the compare_conditions result (None with fewer than 2 conditions).
    """
    named, left_out = group_conditions(checkpoints)
    loaded = {ck: [read_json(p, "result JSON", shape=dict) for p in paths] for ck, paths in results.items()}
    loaded = {ck: [r[result_key] if result_key else r for r in rs] for ck, rs in loaded.items() if ck in named}
    if len({named[ck][0] for ck in loaded}) < 2:
        return None
    first_ck = next(iter(loaded))
    first = loaded[first_ck][0]
    speakers = None
    for ck, rs in loaded.items():
        for r, path in zip(rs, results[ck]):
            speakers = check_pairable(first, r, results[first_ck][0], path)
    runs: dict[str, list] = {}
    for ck, rs in loaded.items():
        runs.setdefault(named[ck], []).extend(speaker_arrays(r, speakers) for r in rs)
    conditions = [Condition(name, share, tuple(rs)) for (name, share), rs in runs.items()]
    res = compare_conditions(metric_from(first), conditions, n_resamples=bootstrap, seed=seed)
    res["left_out"] = left_out
    for name, c in res["conditions"].items():   # pretrained checkpoints (replicates) behind each condition
        c["n_checkpoints"] = sum(1 for ck in loaded if named[ck][0] == name)
    signature = (first["signature"].split("|ci:")[0] + f"|conditions:{len(conditions)}|runs:"
                 + ",".join(str(len(c.runs)) for c in conditions)
                 + f"|test:paired-speaker-bootstrap+seed-t:{bootstrap}|holm|alpha:{ALPHA:g}|seed:{seed}")
    config = {"kind": "conditions", "task": task, "lang_pair": lang_pair, "signature": signature,
              "conditions": {ck: name for ck, (name, _) in named.items()}, "left_out": left_out, "results": results}
    files = [file_fingerprint(p) for paths in results.values() for p in paths]
    with ResultsStore(db) as store:
        store.store_run("conditions", config, conditions_rows(res, task, lang_pair, signature, first["n_utts"]),
                        name=task, seed=seed, inputs=files)
    return res
