"""Pretraining conditions compared: does the female share of pretraining change the gap?

A **condition** is a pretraining composition: its female share (0 = male-only, 0.5 = balanced,
1 = female-only), or no pretraining at all (the FBANK reference). A condition holds
**checkpoints** (pretraining runs with that share), each scored after one or more downstream
training **seeds** on the same test speakers. The pretraining run is the unit: a checkpoint's
estimate is its seeds' mean, a condition's the mean of its checkpoints' (F, M, All and the F - M
gap); Δrel and F / M are those of the condition's own F and M, so its columns reproduce them.

Statistics (STATS): F, M, All, Δrel, gap = F - M (points) and ratio = F / M. Every test is a linear
contrast of the conditions (analysis/contrasts.py): pairs of pretrained conditions, each against
the reference, and with 4 or more distinct shares the slope over share (per 10 points) and the
curvature (lack of fit). Uncertainty is nested:

* **speakers** -- one count matrix per gender (analysis/bootstrap.py) drawn once for every run of
  every condition (paired: a speaker hard for every model cancels), a test's resamples widened
  for few speakers (contrasts.expansion: 6 voices a gender would give intervals ~20 % narrow);
* **pretraining runs** (unit "checkpoint", when a pretrained condition has 2+ checkpoints) -- the
  spread of checkpoint estimates within conditions beyond the run-by-speaker noise the speaker
  resamples already carry: e^2 = max(0, s_b^2 - u_b^2), df = sum over conditions of (K_c - 1);
* **seeds** (unit "seed", when every pretrained condition has one checkpoint) -- the same within
  checkpoints, df = sum of (S - 1). A comparison is then checkpoint against checkpoint: the share's
  effect and the pretraining run's cannot be told apart, and the report says so.

With one checkpoint and one seed everywhere nothing is compared (ONE_RUN); with fewer than 2 test
speakers of a gender nothing is compared either (FEW_SPEAKERS: the resamples would draw the same
speaker every time). The **primary** test is the slope with 4+ distinct shares, else the highest
share against the lowest; every other pretrained comparison is one secondary Holm family (the
curvature included), the comparisons with the reference another. A difference is called when its
Holm-adjusted p is under ALPHA and its CI excludes 0; each test carries its minimum detectable
difference (analysis.power.mde) at the level in force, and with a margin Δrel's equivalence (TOST).
tests/test_conditions_calibration.py checks coverage, family-wise false calls and power.
"""
from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

import numpy as np

from analysis.bootstrap import GENDERS, RESULT_KEYS, draw_counts, resample_scores
from analysis.compare import check_pairable, metric_from, speaker_arrays
from analysis.contrasts import (
    adjust_families,
    curvature_weights,
    excess_spread,
    expand,
    expansion,
    finite_part,
    run_test,
    slope_weights,
    speaker_df,
    t_draws,
)
from analysis.delta import delta_rel_array
from analysis.power import ALPHA, COMPONENTS_ROW, SLOPE_UNIT, TREND_MIN_SHARES, welch_df
from analysis.store import ResultsStore
from corpora.base.boundary import read_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint, file_sha256

STATS = (*RESULT_KEYS, "gap", "ratio")   # RESULT_KEYS, the F - M gap in points and the F / M ratio
LINEAR = ("F", "M", "all")               # averaged over seeds and checkpoints; the others follow from F and M
SLOPE = "female share (slope per 10 points)"
CURVATURE = "lack of fit (curvature)"
MIN_SPEAKERS = 2                         # test speakers per gender a speaker resample needs to vary at all
FEW_SPEAKERS = f"fewer than {MIN_SPEAKERS} test speakers of a gender: not compared"
ONE_RUN = "one run (one checkpoint, one seed): not compared"
ROW_FIELD = {"pair": "diff", "reference": "diff", "slope": "slope", "curvature": "curvature"}


@dataclass(frozen=True)
class Condition:
    """One condition: its name, female share (None: the reference without pretraining) and
    checkpoints, each a tuple of runs (one per downstream seed), a run ``{"F": (n_F, k), "M": (n_M,
    k)}`` per-speaker statistics in one shared speaker order; ``checkpoint_names`` optional."""
    name: str
    share: float | None
    checkpoints: tuple
    checkpoint_names: tuple = ()

    def __post_init__(self):
        ok = isinstance(self.checkpoints, tuple) and self.checkpoints and all(
            isinstance(ck, tuple) and ck and all(isinstance(r, dict) for r in ck) for ck in self.checkpoints)
        if not ok:
            raise ValueError(f"condition {self.name!r}: checkpoints must be a non-empty tuple of checkpoints, each a "
                             "non-empty tuple of runs ({'F': array, 'M': array})")
        if self.checkpoint_names and len(self.checkpoint_names) != len(self.checkpoints):
            raise ValueError(f"condition {self.name!r}: {len(self.checkpoint_names)} names for "
                             f"{len(self.checkpoints)} checkpoints")

    @property
    def runs(self) -> tuple:
        return tuple(r for ck in self.checkpoints for r in ck)


def design_unit(designs: list[tuple[int, int]]) -> str | None:
    """The unit a pretrained comparison rests on, from each pretrained condition's (checkpoints,
    runs): "checkpoint", "seed", or None (one run everywhere: nothing to compare)."""
    if any(k >= 2 for k, _ in designs):
        return "checkpoint"
    return "seed" if any(n >= 2 for _, n in designs) else None


def _derive(lin: dict) -> dict:
    """Every statistic from F, M and All (arrays of any one shape)."""
    f, m = np.asarray(lin["F"], dtype=float), np.asarray(lin["M"], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(m == 0, np.nan, f / m)
    return {"F": f, "M": m, "all": np.asarray(lin["all"], dtype=float), "delta_rel": delta_rel_array(f, m),
            "gap": f - m, "ratio": ratio}


def _levels(metric, c: Condition, counts, n_spk) -> dict:
    """A condition's statistics at the full test set and in every resample: per run, per checkpoint
    (its seeds' mean) and for the condition (its checkpoints' mean)."""
    full = {g: np.ones((1, n_spk[g]), dtype=np.int64) for g in GENDERS}   # the test set itself, once
    runs_full, runs_boot, ck_full, ck_boot = [], [], [], []
    for runs in c.checkpoints:
        f = {k: np.array([resample_scores(metric, r, full)[k][0] for r in runs]) for k in LINEAR}
        b = [resample_scores(metric, r, counts) for r in runs]
        b = {k: np.stack([x[k] for x in b]) for k in LINEAR}
        runs_full.append(_derive(f)), runs_boot.append(_derive(b))
        ck_full.append({k: f[k].mean() for k in LINEAR}), ck_boot.append({k: b[k].mean(axis=0) for k in LINEAR})
    mean_full = _derive({k: np.mean([x[k] for x in ck_full]) for k in LINEAR})
    mean_boot = _derive({k: np.mean([x[k] for x in ck_boot], axis=0) for k in LINEAR})
    return {"runs_full": runs_full, "runs_boot": runs_boot, "ck_full": [_derive(x) for x in ck_full],
            "ck_boot": [_derive(x) for x in ck_boot], "full": mean_full, "boot": mean_boot}


def _components(levels: dict, pre: list[Condition], ref: list[Condition], unit: str | None) -> dict:
    """Per statistic: var_seed (within checkpoints), e2 (a checkpoint estimate's non-speaker variance,
    within conditions), var_run, and each condition's non-speaker variance v with its df."""
    out = {}
    for k in STATS:
        seed, df_seed = excess_spread([(lv["runs_full"][i][k], lv["runs_boot"][i][k]) for c in pre
                                       for lv in [levels[c.name]] for i in range(len(c.checkpoints))])
        e2, df_ck = excess_spread([(np.array([x[k] for x in levels[c.name]["ck_full"]], dtype=float),
                                    np.stack([x[k] for x in levels[c.name]["ck_boot"]])) for c in pre])
        n_seeds = [len(ck) for c in pre for ck in c.checkpoints]
        run = None if e2 is None else max(0.0, e2 - (seed or 0.0) * float(np.mean([1 / s for s in n_seeds])))
        v, df = {}, {}
        for c in pre:
            v[c.name] = (e2 / len(c.checkpoints) if unit == "checkpoint" and e2 is not None else
                         seed / len(c.runs) if unit == "seed" and seed is not None else None)
            df[c.name] = df_ck if unit == "checkpoint" else df_seed
        for c in ref:   # the reference: its own runs' spread (no pretraining run), its own t
            lv = levels[c.name]
            own, own_df = excess_spread([(np.concatenate([x[k] for x in lv["runs_full"]]),
                                          np.concatenate([x[k] for x in lv["runs_boot"]]))])
            v[c.name], df[c.name] = (own / len(c.runs) if own is not None else None), own_df
        out[k] = {"seed": seed, "e2": e2, "run": run, "v": v, "df": df}
    return out


def compare_conditions(metric, conditions: list[Condition], *, n_resamples: int = 1000, seed: int = 12345,
                       level: float = 0.95, paired: bool = True, margin: float | None = None) -> dict:
    """Every test of the conditions; see the module docstring. ``paired=False`` (each condition its
    own speaker draws) is what a naive analysis does: the calibration shows it breaks the inference.
    ``margin``: the equivalence margin for Δrel, in points (None: no equivalence test)."""
    if not conditions:
        raise ValueError("no conditions to compare")
    n_spk = {g: conditions[0].runs[0][g].shape[0] for g in GENDERS}
    single = [g for g in GENDERS if n_spk[g] == 1]   # the same speaker in every resample: no interval
    no_interval = set(single) | ({"all", "delta_rel", "gap", "ratio"} if single else set())
    few = min(n_spk.values()) < MIN_SPEAKERS
    counts = draw_counts(n_spk, n_resamples, seed)
    rng = np.random.default_rng([int(seed), 1])
    levels = {c.name: _levels(metric, c, counts if paired else draw_counts(n_spk, n_resamples, int(seed) + 1 + i),
                              n_spk) for i, c in enumerate(conditions)}
    pre = [c for c in conditions if c.share is not None]
    ref = [c for c in conditions if c.share is None]
    unit = design_unit([(len(c.checkpoints), len(c.runs)) for c in pre])
    comp = _components(levels, pre, ref, unit)
    ctx = {"n_spk": n_spk, "rng": rng, "n_resamples": n_resamples, "level": level, "margin": margin, "unit": unit,
           "few": few, "no_interval": no_interval}
    out_conditions = {c.name: _condition(c, levels[c.name], comp, ctx) for c in conditions}
    tests = _plan_tests(pre, ref)
    for t in tests:
        _fill(t, conditions, levels, comp, ctx)
    adjust_families(tests, STATS, ci_level=level)
    return {"metric": metric.name, "n_speakers": n_spk, "n_resamples": int(n_resamples), "seed": int(seed),
            "level": level, "alpha": ALPHA, "margin": margin, "n_shares": len({c.share for c in pre}), "unit": unit,
            "df": (comp["delta_rel"]["df"][pre[0].name] if pre and unit else None),
            "components": _export_components(levels, pre, comp, ctx), "conditions": out_conditions,
            "tests": tests, "primary": next((t["name"] for t in tests if t["family"] == "primary"), None)}


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _speaker_part(resamples: np.ndarray, k: str, ctx: dict) -> tuple[np.ndarray, float, int | None]:
    """A statistic's speaker resamples widened for few speakers (contrasts.expansion), the unbiased
    variance they stand for, and its degrees of freedom."""
    finite, _ = finite_part(resamples)
    n = ctx["n_spk"][k] if k in GENDERS else min(ctx["n_spk"].values())
    var = float(finite.var()) * n / (n - 1) if finite.size > 1 and n > 1 else 0.0
    return (expand(resamples, expansion(k, ctx["n_spk"], ctx["level"])), var, speaker_df(k, ctx["n_spk"]))


def _condition(c: Condition, lv: dict, comp: dict, ctx: dict) -> dict:
    """A condition's estimates, sd over its runs, and CI (speakers plus its own non-speaker term)."""
    out = {"share": c.share, "n_checkpoints": len(c.checkpoints), "n_runs": len(c.runs),
           "n_seeds": [len(ck) for ck in c.checkpoints], "checkpoint_names": list(c.checkpoint_names),
           "mean": {}, "sd": {}, "ci": {}, "nonfinite": {}}
    for k in STATS:
        mean = _finite(lv["full"][k])
        values = np.concatenate([x[k] for x in lv["runs_full"]])
        out["mean"][k] = mean
        out["sd"][k] = float(values.std(ddof=1)) if len(values) > 1 and np.all(np.isfinite(values)) else None
        out["ci"][k], out["nonfinite"][k] = None, 0
        if mean is None or k in ctx["no_interval"]:
            continue
        v, df = comp[k]["v"].get(c.name), comp[k]["df"].get(c.name)
        extra = t_draws(ctx["rng"], math.sqrt(v), df, ctx["n_resamples"]) if v is not None else 0.0   # None: speakers
        res = run_test(mean, _speaker_part(lv["boot"][k], k, ctx)[0] + extra, ctx["level"])
        out["ci"][k], out["nonfinite"][k] = res["ci"], res["nonfinite"]
    return out


def _plan_tests(pre: list[Condition], ref: list[Condition]) -> list[dict]:
    """The tests, primary first: with 4+ shares the slope (its curvature secondary), else the highest
    share against the lowest; the other pairs secondary; each pretrained condition against each
    reference in the reference family."""
    pre = sorted(pre, key=lambda c: -c.share)
    shares = sorted({c.share for c in pre})
    tests = []

    def add(name, kind, weights, family, a=None, b=None):
        tests.append({"name": name, "kind": kind, "a": a, "b": b, "weights": weights, "family": family})
    primary_pair = None
    if len(shares) >= TREND_MIN_SHARES:
        x = np.array([100.0 * c.share for c in pre])
        add(SLOPE, "slope", dict(zip([c.name for c in pre], slope_weights(x, SLOPE_UNIT).tolist())), "primary")
    elif len(shares) >= 2:
        primary_pair = (pre[0].name, pre[-1].name)
        add(f"{pre[0].name} vs {pre[-1].name}", "pair", {pre[0].name: 1.0, pre[-1].name: -1.0}, "primary",
            pre[0].name, pre[-1].name)
    for a, b in itertools.combinations(pre, 2):
        if (a.name, b.name) != primary_pair:
            add(f"{a.name} vs {b.name}", "pair", {a.name: 1.0, b.name: -1.0}, "secondary", a.name, b.name)
    if len(shares) >= TREND_MIN_SHARES:
        x = np.array([100.0 * c.share for c in pre])
        add(CURVATURE, "curvature", dict(zip([c.name for c in pre], curvature_weights(x).tolist())), "secondary")
    for r in ref:
        for c in pre:
            add(f"{c.name} vs {r.name}", "reference", {c.name: 1.0, r.name: -1.0}, "reference", c.name, r.name)
    return tests


def _fill(t: dict, conditions, levels, comp, ctx) -> None:
    """Estimate, resamples, CI, p, se, df and the undefined resamples of test ``t``, per statistic."""
    by_name = {c.name: c for c in conditions}
    pre_w = {n: w for n, w in t["weights"].items() if by_name[n].share is not None}
    ref_w = {n: w for n, w in t["weights"].items() if by_name[n].share is None}
    # a side's non-speaker spread must be measurable: the pretrained design's unit, the reference's seeds
    known = ctx["unit"] is not None and all(len(by_name[n].runs) >= 2 for n in ref_w)
    t["status"] = FEW_SPEAKERS if ctx["few"] else "compared" if known else ONE_RUN
    t["margin"] = ctx["margin"]
    if t["margin"] is not None and t["kind"] == "slope":   # the margin bounds the change over the shares' span
        span = [100.0 * by_name[n].share for n in t["weights"]]
        t["margin"] = t["margin"] * SLOPE_UNIT / (max(span) - min(span))
    rng, n_resamples = ctx["rng"], ctx["n_resamples"]
    for field in ("estimate", "ci", "p", "p_adj", "called", "se", "df", "mde", "nonfinite", "equivalent"):
        t[field] = {}
    for k in STATS:
        means = [levels[n]["full"][k] for n in t["weights"]]
        est = float(sum(w * m for w, m in zip(t["weights"].values(), means)))
        t["estimate"][k] = est if math.isfinite(est) else None
        t["ci"][k] = t["p"][k] = t["se"][k] = t["df"][k] = t["equivalent"][k] = None
        t["nonfinite"][k] = 0
        if t["estimate"][k] is None or t["status"] != "compared":
            continue
        spk, v_spk, df_spk = _speaker_part(sum(w * levels[n]["boot"][k] for n, w in t["weights"].items()), k, ctx)
        v, dfs = comp[k]["v"], comp[k]["df"]
        if any(v.get(n) is None for n in t["weights"]):
            continue   # this statistic's run-to-run spread is undefined (a run's Δrel of two BLEU 0s)
        v_pre = sum(w * w * v[n] for n, w in pre_w.items())
        df_pre = dfs[next(iter(pre_w))] if pre_w else None
        draws = t_draws(rng, math.sqrt(v_pre), df_pre, n_resamples)
        for n, w in ref_w.items():
            draws = draws + t_draws(rng, abs(w) * math.sqrt(v[n]), dfs[n], n_resamples)
        res = run_test(est, spk + draws, ctx["level"], margin=t["margin"] if k == "delta_rel" else None)
        t["ci"][k], t["p"][k], t["nonfinite"][k], t["equivalent"][k] = (res["ci"], res["p"], res["nonfinite"],
                                                                       res["equivalent"])
        parts = [(v_spk, df_spk), (v_pre, df_pre)]
        parts += [(w * w * v[n], dfs[n]) for n, w in ref_w.items()]
        t["se"][k] = math.sqrt(sum(p for p, _ in parts))
        t["df"][k] = welch_df(parts)


def _export_components(levels, pre, comp, ctx) -> dict:
    """Δrel's variance components (contract: a dry run reuses them on another design). speaker:
    c_spk with Var(pair difference) = 2 c_spk (1/n_F + 1/n_M), the mean over pretrained pairs, the
    unbiased variance a test uses (_speaker_part); run: a pretraining run's variance beyond its
    seeds' (with one seed per checkpoint it holds the seeds' too); seed: a downstream seed's; None
    where the design cannot estimate it."""
    k, n_spk, unit = "delta_rel", ctx["n_spk"], ctx["unit"]
    inv = sum(1 / n_spk[g] for g in GENDERS) if min(n_spk.values()) >= MIN_SPEAKERS else None
    spk = []
    for a, b in itertools.combinations(pre, 2):
        var = _speaker_part(levels[a.name]["boot"][k] - levels[b.name]["boot"][k], k, ctx)[1]
        if var > 0 and inv:
            spk.append(var / (2 * inv))
    return {"speaker": float(np.mean(spk)) if spk else None,
            "run": comp[k]["run"] if unit == "checkpoint" else None, "seed": comp[k]["seed"],
            "n_checkpoints": float(np.mean([len(c.checkpoints) for c in pre])) if pre else None,
            "n_seeds": float(np.mean([len(ck) for c in pre for ck in c.checkpoints])) if pre else None}


# --- a study's conditions: from the rows' result files to the results store -----------------------



def female_share(entry: dict) -> float | None:
    """A checkpoint's female share of its pretraining speech from Table 3's F and M percentages
    (speech of unknown gender left out); None when they are not recorded."""
    f, m = entry.get("female_pct"), entry.get("male_pct")
    if f is None or m is None or f + m <= 0:
        return None
    return round(float(f) / (float(f) + float(m)), 4)


def unknown_share_note(name: str, entry: dict) -> str | None:
    """Where a checkpoint's pretraining speech is partly of unknown gender (Table 3's U), what its
    female share means: F/(F+M) of the speech of known gender, and the range of its share of all
    its speech (U counted as all male .. all female); None when U is 0 or not recorded."""
    share, u = female_share(entry), entry.get("unknown_pct")
    if share is None or not u:
        return None
    f = float(entry["female_pct"])
    return (f"{name}: {100 * share:.1f} % F of its speech of known gender; {float(u):g} % of its speech is of "
            f"unknown gender, so its female share of all its speech is {f:g}-{f + float(u):g} %")


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


def stat_row_key(m: str, field: str, k: str) -> tuple[str, str]:
    """(gender, metric) of statistic ``k``'s row of ``field``: F, M, All and Δrel are genders of the
    results DB; the gap and the ratio, which are not, are named in the metric (gender n/a)."""
    return (k, f"{m}:{field}") if k in RESULT_KEYS else ("n/a", f"{m}:{field}:{k}")


def conditions_rows(res: dict, task: str, lang_pair: str, signature: str, n_utts: dict) -> list[dict]:
    """Results-store rows (subset ``conditions``) of a compare_conditions result. Per condition: its
    runs, checkpoints, share, and per statistic its mean (with CI) and sd over runs; per checkpoint its
    condition (``{m}:in_condition:<name>``, value: its seeds); per test (named as the report names it):
    its family (``{m}:family:<family>``, value: the family's size) and per statistic the estimate
    (``{m}:diff``, ``slope`` or ``curvature``, with CI) and ``_compared``, ``_p``, ``_p_adj``, ``_se``,
    ``_df``, ``_mde``, ``_nonfinite``, ``_equivalent``, ``_margin``, ``_called``; Δrel's variance
    components under ``COMPONENTS_ROW``. The gap and ratio rows: stat_row_key."""
    m, rows = res["metric"], []
    n_spk = {"F": res["n_speakers"]["F"], "M": res["n_speakers"]["M"]}
    total = n_spk["F"] + n_spk["M"]

    def row(name, k, field, value, ci=None):
        gender, metric = stat_row_key(m, field, k)
        return {"checkpoint": name, "task": task, "lang_pair": lang_pair, "subset": "conditions", "gender": gender,
                "metric": metric, "value": float(value), "ci_low": ci[0] if ci else None,
                "ci_high": ci[1] if ci else None, "n_utts": n_utts.get(k if k in GENDERS else "all"),
                "n_speakers": n_spk.get(k, total), "signature": signature}
    for name, c in res["conditions"].items():
        rows += [row(name, "all", "n_runs", c["n_runs"]), row(name, "all", "n_checkpoints", c["n_checkpoints"])]
        rows += [row(ck, "all", f"in_condition:{name}", s) for ck, s in zip(c["checkpoint_names"], c["n_seeds"])]
        if c["share"] is not None:
            rows.append(row(name, "all", "female_share", 100 * c["share"]))
        if c.get("unknown_pct") is not None:
            rows.append(row(name, "all", "unknown_share", c["unknown_pct"]))
        for k in STATS:
            if c["mean"][k] is None:
                continue
            rows.append(row(name, k, "condition", c["mean"][k], c["ci"][k]))
            for field in ("sd", "nonfinite"):
                if c[field][k]:
                    rows.append(row(name, k, f"condition_{field}", c[field][k]))
    for t in res["tests"]:
        what = ROW_FIELD[t["kind"]]
        rows.append(row(t["name"], "all", f"family:{t['family']}", t["family_size"]))
        for k in STATS:
            if t["estimate"][k] is None:
                continue
            rows.append(row(t["name"], k, what, t["estimate"][k], t["ci"][k]))
            rows.append(row(t["name"], k, f"{what}_compared", t["status"] == "compared"))
            if t["status"] == FEW_SPEAKERS:   # the report's reason for "not compared" (else: one run)
                rows.append(row(t["name"], k, f"{what}_few_speakers", True))
            for field in ("p", "p_adj", "se", "df", "mde", "nonfinite", "equivalent"):
                value = t[field].get(k)
                if value is not None and math.isfinite(float(value)):
                    rows.append(row(t["name"], k, f"{what}_{field}", value))
            if k == "delta_rel" and t["equivalent"].get(k) is not None:
                rows.append(row(t["name"], k, f"{what}_margin", t["margin"]))
            rows.append(row(t["name"], k, f"{what}_called", bool(t["called"][k])))
    for part in ("speaker", "run", "seed"):
        if res["components"][part] is not None:
            rows.append(row(COMPONENTS_ROW, "delta_rel", f"var_{part}", res["components"][part]))
    return rows


def _hyps_record(result: dict) -> tuple | None:
    """The scored hypotheses file a result records (``inputs.hyps``: path, size, mtime), if it does."""
    inputs = result.get("inputs") if isinstance(result, dict) else None
    hyps = inputs.get("hyps") if isinstance(inputs, dict) else None
    if not isinstance(hyps, dict) or not hyps.get("path"):
        return None
    return (hyps.get("path"), hyps.get("size"), hyps.get("mtime"))


def _refuse_same_runs(results: dict[str, list[str]], loaded: dict, named: dict, checkpoints: dict) -> None:
    """Two runs that are one run counted twice make a difference look replicated: one result file
    listed twice, two result files recording the same scored hypotheses (byte-identical copies of a
    file that records its inputs are such a pair), or two checkpoints of one condition that are the
    same file (their runs with the same downstream seeds are the same runs). One UserError line.
    Identical results that record no inputs are not refused: two runs of a model that outputs
    nothing score identically, and nothing in them says which run they are."""
    seen_file: dict[str, str] = {}
    seen_hyps: dict[tuple, str] = {}
    fix = "give each checkpoint and seed its own run's result file (a replicate is another pretraining run, not a copy)"
    for ck in loaded:
        for path, r in zip(results[ck], loaded[ck]):
            real = os.path.realpath(path)
            if real in seen_file:
                raise UserError(f"the same run counted twice: this result file is listed for {seen_file[real]} too",
                                path=path, fix=fix)
            seen_file[real] = ck
            hyps = _hyps_record(r)
            if hyps in seen_hyps:
                raise UserError(f"the same run counted twice: this result file scores the same hypotheses file "
                                f"({hyps[0]}) as {seen_hyps[hyps]}", path=path, fix=fix)
            if hyps:
                seen_hyps[hyps] = path
    by_size: dict[tuple, str] = {}
    for ck, (name, share) in named.items():
        path = checkpoints[ck].get("path")
        if share is None or not path or not os.path.isfile(path):
            continue
        key = (name, os.path.getsize(path))
        other = by_size.get(key)
        if other and file_sha256(path) == file_sha256(checkpoints[other]["path"]):
            raise UserError(f"checkpoints {other!r} and {ck!r} of condition {name!r} are the same file: their runs "
                            "are the same runs counted twice", path=path,
                            fix="pretrain the replicate anew (another pretraining seed), or list the checkpoint once")
        by_size.setdefault(key, ck)


def compare_and_store(results: dict[str, list[str]], result_key: str | None, checkpoints: dict[str, dict], db: str,
                      task: str, lang_pair: str, bootstrap: int, seed: int, margin: float | None = None) -> dict | None:
    """Compare the conditions of one task's rows and store the rows in ``db`` as one run.

    ``results``: checkpoint -> its runs' result JSON files (one per downstream seed); ``checkpoints``:
    what group_conditions takes, with the checkpoint file's ``path`` when known (a replicate that is
    the same file is refused); ``margin``: the Δrel equivalence margin (the config's ``report:
    equivalence_margin``). Returns the compare_conditions result (None with fewer than 2 conditions).
    """
    named, left_out = group_conditions(checkpoints)
    named = {ck: v for ck, v in named.items() if ck in results}
    if len({name for name, _ in named.values()}) < 2:
        return None
    loaded = {ck: [read_json(p, "result JSON", shape=dict) for p in results[ck]] for ck in named}
    loaded = {ck: [r[result_key] if result_key else r for r in rs] for ck, rs in loaded.items()}
    _refuse_same_runs(results, loaded, named, checkpoints)
    first_ck = next(iter(loaded))
    first = loaded[first_ck][0]
    speakers = None
    for ck, rs in loaded.items():
        for r, path in zip(rs, results[ck]):
            speakers = check_pairable(first, r, results[first_ck][0], path)
    members: dict[tuple, list[str]] = {}
    for ck in loaded:
        members.setdefault(named[ck], []).append(ck)
    conditions = [Condition(name, share, tuple(tuple(speaker_arrays(r, speakers) for r in loaded[ck]) for ck in cks),
                            tuple(cks)) for (name, share), cks in members.items()]
    res = compare_conditions(metric_from(first), conditions, n_resamples=bootstrap, seed=seed, margin=margin)
    res["left_out"] = left_out
    for (name, _), cks in members.items():   # Table 3's U, kept beside the share it is not part of
        unknown = [float(checkpoints[ck]["unknown_pct"]) for ck in cks
                   if checkpoints[ck].get("unknown_pct") is not None]
        res["conditions"][name]["unknown_pct"] = sum(unknown) / len(unknown) if unknown else None
    signature = (first["signature"].split("|ci:")[0] + f"|conditions:{len(conditions)}|checkpoints:"
                 + ",".join(str(len(c.checkpoints)) for c in conditions) + "|runs:"
                 + ",".join(str(len(c.runs)) for c in conditions) + f"|unit:{res['unit']}"
                 + f"|test:paired-speaker-bootstrap+run-t:{bootstrap}|holm-by-family|alpha:{ALPHA:g}|seed:{seed}"
                 + (f"|margin:{margin:g}" if margin is not None else ""))
    config = {"kind": "conditions", "task": task, "lang_pair": lang_pair, "signature": signature,
              "conditions": {ck: name for ck, (name, _) in named.items()}, "left_out": left_out, "results": results}
    files = [file_fingerprint(p) for ck in named for p in results[ck]]
    with ResultsStore(db) as store:
        store.store_run("conditions", config, conditions_rows(res, task, lang_pair, signature, first["n_utts"]),
                        name=task, seed=seed, inputs=files)
    return res
