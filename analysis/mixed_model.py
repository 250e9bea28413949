"""The gender gap as a per-utterance mixed model: how much of it the voice's pitch, rate and length explain.

The comparisons (analysis.conditions) take ratios of corpus-level scores and resample speakers.
This is the field's model-based reading of the same rows (Liu, Veliche and Peng, ICASSP 2022:
mixed-effects Poisson regression of per-utterance error counts with a speaker random effect;
Goldwater et al.'s regressions on F0, speaking rate and duration). Per scored utterance of
every checkpoint and seed of a task:

    errors ~ 0 + condition + condition:female + voice measures + offset(log(reference words))
             + (1 | speaker) + (1 | run) + (0 + female | run) + (1 | seed) + (1 | speaker:run)

Poisson, as Liu et al.; a fit whose Pearson residuals are overdispersed (chi2/df over 1.5) is
fitted again as a negative binomial (glmmTMB's ``nbinom2``), and says so. exp(condition:female)
is a condition's female/male error-rate ratio, with its Wald CI. The run is the pretraining run
(a checkpoint): its own gender gap (the female slope per run) makes it the unit of the share's
effect, as in the comparisons. The trend model replaces the condition by the female share (per
10 points) over the pretrained checkpoints: exp(female:share) is how much the ratio changes per 10
points. Each model is fitted without and with the voice measures (median F0 per octave, speaking
rate per word/s, speech length per doubling, SNR per 10 dB), so the report can say what is left of
the gap after them.

A random-effect term enters only where the data can tell it from the fixed effects: a
checkpoint term with more checkpoints than conditions, a seed term with a checkpoint trained
with several seeds. The fits run in R (glmmTMB, the field's reference; Debian's r-cran-glmmtmb)
through one ``Rscript --vanilla`` process for the whole study (analysis/glmm.R). A model that
cannot be fitted, a fit that did not converge and a singular fit are each one line in the
result's ``problems``, never dropped; a term whose variance is estimated at 0 and keeps the fit
from converging is dropped and the fit repeated, which is one such line too. BLEU is no count
with an exposure: an ST task gets a stated reason instead of a model.
"""
from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from analysis.compare import metric_from
from analysis.scoring import align_texts, read_texts
from corpora.base.boundary import parse_json, read_json
from corpora.base.errors import UserError
from corpora.voice_measures import MEASURES_VERSION

R_SCRIPT = Path(__file__).with_name("glmm.R")
MEASURES_TAG = f"v{MEASURES_VERSION}"
FAMILY = "poisson"          # glmm.R refits as nbinom2 when the Poisson fit is overdispersed
GROUPS = ("speaker", "run", "run_gap", "seed", "speaker_run")
Z95 = 1.959963984540054
SINGULAR_SD = 1e-3            # a random-effect sd (log scale) under this is estimated at 0
R_TIMEOUT_S = 600
COUNT_METRICS = ("wer", "cer")
RANDOM_NAMES = {"speaker": "the speaker's intercept", "run": "the pretraining run's intercept",
                "run_gap": "the pretraining run's own gender gap", "seed": "the downstream seed's intercept",
                "speaker_run": "the speaker-by-run intercept"}
# model term -> (measure column, transform, what one unit is)
VOICE_TERMS = {
    "pitch": ("f0_median_hz", np.log2, "octave of median F0"),
    "rate": ("rate_wps", lambda x: x, "word/s of speaking rate"),
    "length": ("speech_s", np.log2, "doubling of speech length"),
    "snr": ("snr_db", lambda x: x / 10.0, "10 dB of SNR"),
}
NOT_COUNTS = ("{metric} is not a count with an exposure: a sentence's BLEU is a ratio of clipped n-gram "
              "matches that is 0 for most short sentences and does not add up to the corpus score, so no "
              "per-utterance count model fits it; this task's gap is the corpus-level comparison above")
INSTALL_FIX = "install R's glmmTMB (Debian: apt-get install r-base-core r-cran-glmmtmb; `make install` does it as root)"


class ModelUnavailable(Exception):
    """No model could be fitted: R or glmmTMB is missing, or the R process failed or ran out of time
    (one line says why; the report shows it where the section's numbers would be)."""


def utterance_counts(result: dict, source) -> pd.DataFrame:
    """``id, errors, words`` per scored utterance of one result JSON (analysis.scoring's), recomputed
    from the references and hypotheses it records with the metric it was scored with. The sums must
    equal the result's totals: a hypotheses file changed since scoring is refused."""
    metric = metric_from(result, source)
    inputs = result.get("inputs") or {}
    refs, hyps = (inputs.get(k, {}).get("path") if isinstance(inputs.get(k), dict) else None for k in ("refs", "hyps"))
    if not refs or not hyps:
        raise UserError("the result records no references/hypotheses files", path=source,
                        fix="re-score it with `gendergap score asr`, which records them")
    column = (result.get("options") or {}).get("hyp_column")
    ids, ref_list, hyp_list = align_texts(read_texts(refs, "references"), read_texts(hyps, "hypotheses", column),
                                          refs, hyps)
    stats = metric.utterance_stats(ref_list, hyp_list)
    names = list(result["stat_names"])
    if stats.sum(axis=0).tolist() != list(result["totals"]["all"]):
        raise UserError("the hypotheses no longer give the scores this result records (changed since scoring?)",
                        path=source, fix="score the run again")
    col = {n: stats[:, names.index(n)] for n in names}
    errors = col["sub"] + col["del"] + col["ins"]
    words = col["hits"] + col["sub"] + col["del"]
    return pd.DataFrame({"id": ids, "errors": errors, "words": words})


def voice_covariates(measures: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str]]:
    """``id`` and one centred column per usable VOICE_TERMS term; {term: why it was left out}."""
    out, left_out = pd.DataFrame({"id": measures["id"].astype(str)}), {}
    for term, (col, transform, _) in VOICE_TERMS.items():
        x = pd.to_numeric(measures[col], errors="coerce").astype(float)
        x = x.where(x > 0) if transform is np.log2 else x
        x = transform(x)
        if x.notna().sum() == 0:
            left_out[term] = f"no {col} measured"
        elif float(x.std(skipna=True) or 0) < 1e-9:
            left_out[term] = f"{col} is the same for every utterance"
        else:
            out[term] = x - x.mean(skipna=True)
    return out, left_out


def model_data(results: dict[str, list[str]], conditions: dict[str, tuple[str, float | None]],
               measures: pd.DataFrame, voice: pd.DataFrame, result_key: str | None = None) -> tuple[pd.DataFrame, str]:
    """One row per scored utterance, checkpoint and seed: errors, words, speaker, gender, condition,
    share, checkpoint, seed and the voice covariates (``voice``: voice_covariates of ``measures``); and
    the metric's name. ``results``: checkpoint -> its seeds' result JSONs; ``conditions``: checkpoint ->
    (condition, female share or None)."""
    frames, metric = [], None
    who = measures[["id", "speaker", "gender"]].astype(str)
    for ck, files in results.items():
        if ck not in conditions:
            continue
        for seed, path in enumerate(files):
            r = read_json(path, "result JSON", shape=dict)
            r = r[result_key] if result_key else r
            metric = metric or r["metric"]
            if r["metric"] not in COUNT_METRICS:
                return pd.DataFrame(), r["metric"]
            rows = utterance_counts(r, path).merge(who, on="id", how="left")
            missing = rows["speaker"].isna()
            if missing.any():
                raise UserError(f"utterance {rows['id'][missing].iloc[0]} has no voice measures", path=path,
                                fix="measure the task's test set (`gendergap corpus measure`) from the table it scored")
            name, share = conditions[ck]
            rows = rows.assign(condition=name, share=share, checkpoint=ck, run=ck, run_gap=ck, seed=f"{ck}/{seed}",
                               speaker_run=rows["speaker"] + "@" + ck)
            frames.append(rows.merge(voice, on="id", how="left"))
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(data):
        data = data[data["words"] > 0].reset_index(drop=True)   # no exposure, no rate
        data["female"] = (data["gender"] == "F").astype(int)
    return data, metric or ""


def _random_terms(d: pd.DataFrame, n_fixed_groups: int) -> dict[str, str]:
    """{grouping column: term} the data can carry. The run's own gap (a female slope per pretraining
    run) is what makes the run the unit of the share's effect; it and the run's intercept enter only
    with more runs than fixed groups, the seed's with a run trained with several seeds."""
    terms = {"speaker": "(1 | speaker)"}
    n_runs = d["run"].nunique()
    if n_runs > n_fixed_groups:
        terms["run"] = "(1 | run)"
        terms["run_gap"] = "(0 + female | run_gap)"
    if d.groupby("run")["seed"].nunique().max() > 1:
        terms["seed"] = "(1 | seed)"          # seeds are named <run>/<i>: nested by construction
    if n_runs > 1 and d.groupby(["speaker", "run"]).size().min() >= 2:
        terms["speaker_run"] = "(1 | speaker_run)"
    return terms


def fit_specs(task: str, d: pd.DataFrame, voice_terms: list[str]) -> tuple[list[dict], dict]:
    """The fits of one task (by condition and, with two or more shares, the trend; each without and
    with the voice terms) and the code of each condition in the formulas."""
    codes = {c: f"c{i}" for i, c in enumerate(dict.fromkeys(d["condition"]))}
    fits = []
    pre = d[d["share"].notna()]
    models = [("condition", "errors ~ 0 + cond + cond:female", f"{task}|all", _random_terms(d, len(codes)),
               {c: {f"cond{code}:female": 1} for c, code in codes.items()})]
    if pre["share"].nunique() >= 2:
        models.append(("trend", "errors ~ female * share10", f"{task}|pretrained", _random_terms(pre, 2),
                       {"interaction": {"female:share10": 1}, "female_at_0": {"female": 1}}))
    for kind, fixed, data, random, contrasts in models:
        for tag in ("raw", "adjusted"):
            extra = "".join(f" + {t}" for t in voice_terms) if tag == "adjusted" else ""
            fits.append({"id": f"{task}|{kind}|{tag}", "data": data, "family": FAMILY,
                         "fixed": fixed + extra + " + offset(log(words))", "random": random, "keep": ["speaker"],
                         "contrasts": contrasts, "factors": ["cond", *GROUPS]})
    return fits, codes


def run_glmm(frames: dict[str, pd.DataFrame], fits: list[dict], timeout: float = R_TIMEOUT_S) -> dict:
    """Fit ``fits`` on ``frames`` ({fit data name: rows}) in one Rscript process; glmm.R's output.
    ModelUnavailable when R or glmmTMB is missing, or the R process fails or times out."""
    rscript = shutil.which("Rscript")
    if rscript is None:
        raise ModelUnavailable(f"R is not installed (no Rscript on PATH): {INSTALL_FIX}")
    numeric = ["errors", "words", "female", "share10", *VOICE_TERMS]
    data = pd.concat([d.assign(fit_data=name) for name, d in frames.items()], ignore_index=True)
    factors = list(dict.fromkeys(c for f in fits for c in f["factors"]))
    missing = [c for c in factors if c not in data.columns]
    if missing:
        raise ValueError(f"the model data lack the grouping column(s) {missing}")
    cols = ["fit_data", *factors] + [c for c in numeric if c in data.columns]
    with tempfile.TemporaryDirectory(prefix="gendergap-glmm-") as tmp:
        tmp = Path(tmp)
        data[cols].to_csv(tmp / "data.csv", index=False, na_rep="NA", float_format="%.10g")
        (tmp / "spec.json").write_text(json.dumps({"fits": fits, "numeric": [c for c in numeric if c in cols]}))
        try:   # --vanilla: no site or user profile, no .Rprofile of the folder it runs in, no saved workspace
            done = subprocess.run([rscript, "--vanilla", str(R_SCRIPT), "data.csv", "spec.json", "out.json"],
                                  cwd=tmp, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise ModelUnavailable(f"the mixed models took over {timeout:.0f} s in R and were stopped") from None
        if done.returncode != 0:
            last = [ln for ln in done.stderr.strip().splitlines() if ln.strip()] or ["no message"]
            if "there is no package called" in done.stderr:
                raise ModelUnavailable(f"R has no glmmTMB ({last[-1].strip()[:120]}): {INSTALL_FIX}")
            raise ModelUnavailable(f"R failed fitting the mixed models: {last[-1].strip()[:200]}")
        return parse_json((tmp / "out.json").read_text(encoding="utf-8"), "glmm.R output", path=tmp / "out.json")


def _ratio(c: dict | None) -> dict | None:
    if not c or "estimate" not in c or c.get("se") is None or not math.isfinite(c["se"]):
        return None
    b, se = c["estimate"], c["se"]
    p = math.erfc(abs(b / se) / math.sqrt(2)) if se > 0 else None
    return {"ratio": math.exp(b), "low": math.exp(b - Z95 * se), "high": math.exp(b + Z95 * se), "p": p,
            "log": b, "se": se}


def fit_problems(fit: dict, label: str) -> list[str]:
    """One line per problem of a fit: could not be fitted, did not converge, singular."""
    if fit.get("error"):
        return [f"{label}: could not be fitted ({str(fit['error']).strip().splitlines()[0][:160]})"]
    notes = fit.get("notes") or []
    notes = [notes] if isinstance(notes, str) else notes     # R's JSON writes a vector of one as a string
    out = [f"{label}: {note}" for note in notes]
    if not fit.get("pd_hessian"):
        out.append(f"{label}: did not converge (non-positive-definite Hessian): its CIs are not to be trusted")
    elif fit.get("convergence") not in (0, None):
        out.append(f"{label}: the optimiser stopped with code {fit['convergence']} ({fit.get('optimizer_message')})")
    for group, sd in (fit.get("re_sd") or {}).items():
        sd = sd[0] if isinstance(sd, list) else sd
        if sd is not None and sd < SINGULAR_SD:
            out.append(f"{label}: singular fit: the sd of {RANDOM_NAMES.get(group, group)} is estimated at 0 "
                       "(kept: the fit converged with it)")
    return out


def summarise(task: str, fits: dict, codes: dict, voice_terms: list[str], left_out: dict) -> dict:
    """A task's answer from its fits: the ratio per condition before and after the voice terms, the
    interaction with the share, the voice effects, the problems in one line each."""
    out = {"task": task, "ratios": {}, "interaction": {}, "voice": {}, "problems": [], "seconds": 0.0,
           "voice_terms": voice_terms, "left_out": left_out}
    for tag in ("raw", "adjusted"):
        for kind in ("condition", "trend"):
            f = fits.get(f"{task}|{kind}|{tag}")
            if f is None:
                continue
            label = f"{task}, {'the model by condition' if kind == 'condition' else 'the trend model'}" \
                    + (" with the voice measures" if tag == "adjusted" else "")
            out["problems"] += fit_problems(f, label)
            out["seconds"] += float(f.get("seconds") or 0)
            usable = not f.get("error") and f.get("pd_hessian")
            if kind == "condition":
                for c in codes:
                    out["ratios"].setdefault(c, {})[tag] = _ratio(f["contrasts"].get(c)) if usable else None
            else:
                out["interaction"][tag] = _ratio(f["contrasts"].get("interaction")) if usable else None
            if kind == "condition" and tag == "adjusted" and usable:
                for t in voice_terms:
                    out["voice"][t] = _ratio({"estimate": f["coef"][t], "se": f["se"][t]})
    return out


def speaker_summary(d: pd.DataFrame, measures: pd.DataFrame) -> pd.DataFrame:
    """Per condition and speaker: gender, errors over words (all its checkpoints and seeds pooled),
    and the speaker's median F0 (median over its utterances)."""
    f0 = measures.groupby("speaker")["f0_median_hz"].median()
    g = d.groupby(["condition", "speaker"], sort=False)
    out = g.agg(gender=("gender", "first"), errors=("errors", "sum"), words=("words", "sum")).reset_index()
    out["error_rate"] = 100.0 * out["errors"] / out["words"]
    out["f0_median_hz"] = out["speaker"].map(f0)
    return out


def fit_study(blocks: dict[str, dict], measures: dict[str, pd.DataFrame], timeout: float = R_TIMEOUT_S) -> dict:
    """Every task's models in one R process. ``blocks``: task label -> {results, conditions, result_key,
    measures (its test set's key in ``measures``)}. Returns {versions, tasks: {label: summary with
    ``status`` fitted / not modelled / unavailable, ``data`` and ``speakers``}}."""
    tasks, frames, all_fits, plan = {}, {}, [], {}
    for label, b in blocks.items():
        m = measures[b["measures"]]
        voice, left_out = voice_covariates(m)
        d, metric = model_data(b["results"], b["conditions"], m, voice, b.get("result_key"))
        if metric and metric not in COUNT_METRICS:
            tasks[label] = {"task": label, "metric": metric, "status": "not modelled",
                            "reason": NOT_COUNTS.format(metric=metric.upper())}
            continue
        if d.empty:
            tasks[label] = {"task": label, "metric": metric, "status": "not modelled", "reason": "no scored rows"}
            continue
        terms = [t for t in VOICE_TERMS if t in voice.columns]
        complete = d.dropna(subset=terms)
        if len(complete) < len(d):
            left_out["rows"] = f"{len(d) - len(complete)} utterance(s) without every measure (no voiced frame) left out"
        fits, codes = fit_specs(label, complete, terms)
        complete = complete.assign(cond=complete["condition"].map(codes), share10=complete["share"] * 10)
        frames[f"{label}|all"] = complete
        frames[f"{label}|pretrained"] = complete[complete["share"].notna()]
        all_fits += fits
        plan[label] = (metric, codes, terms, left_out, complete, m)
    versions = {}
    if all_fits:
        try:
            out = run_glmm(frames, all_fits, timeout)
        except ModelUnavailable as e:
            for label, (metric, *_rest) in plan.items():
                tasks[label] = {"task": label, "metric": metric, "status": "unavailable", "reason": str(e)}
            return {"versions": {}, "tasks": tasks}
        versions = out["versions"]
        for label, (metric, codes, terms, left_out, d, m) in plan.items():
            s = summarise(label, out["fits"], codes, terms, left_out)
            mine = {k: f for k, f in out["fits"].items() if k.startswith(label + "|")}
            s.update(metric=metric, status="fitted", rows=len(d), speakers=speaker_summary(d, m),
                     formulas={k: f.get("formula") for k, f in mine.items()},
                     families={k: f.get("family") for k, f in mine.items()})
            tasks[label] = s
    return {"versions": versions, "tasks": tasks}


# --- the results store -------------------------------------------------------------------------
SUBSET = "mixed-model"
TREND_ROW = "trend"     # the table row of the interaction: the ratio's change per 10 points of female share


def signature(s: dict, versions: dict) -> str:
    """How a task's model numbers were made, sacrebleu-style."""
    fams = sorted(set((s.get("families") or {}).values())) or [FAMILY]
    return (f"{s['metric']}|glmm:glmmTMB:{versions.get('glmmTMB', '?')}|R:{versions.get('R', '?')}"
            f"|family:{'+'.join(fams)}|offset:log(ref-{'words' if s['metric'] == 'wer' else 'chars'})"
            f"|re:speaker+run+run-gap+seed+speaker:run|voice:{','.join(s.get('voice_terms') or []) or 'none'}"
            f"|f0:praat-ac:{MEASURES_TAG}|ci:wald:0.95")


def mixed_rows(s: dict, task: str, lang_pair: str, versions: dict) -> list[dict]:
    """Results-store rows (subset ``mixed-model``) of one fitted task: per condition the F/M rate
    ratio before and after the voice measures (``{m}:rate_ratio``, ``{m}:rate_ratio_adjusted``, with
    CI, and ``_p``); the trend row's interaction; the voice effects (checkpoint = the term); per
    condition and speaker its error rate and median F0 (gender = the speaker's)."""
    if s.get("status") != "fitted":
        return []
    m, sig, rows = s["metric"], signature(s, versions), []

    def row(name, metric, value, r=None, gender="n/a"):
        rows.append({"checkpoint": name, "task": task, "lang_pair": lang_pair, "subset": SUBSET, "gender": gender,
                     "metric": f"{m}:{metric}", "value": float(value), "ci_low": r["low"] if r else None,
                     "ci_high": r["high"] if r else None, "signature": sig})

    def ratio(name, metric, r):
        if r:
            row(name, metric, r["ratio"], r)
            if r.get("p") is not None:
                row(name, metric + "_p", r["p"])
    for cond, by in s["ratios"].items():
        ratio(cond, "rate_ratio", by.get("raw"))
        ratio(cond, "rate_ratio_adjusted", by.get("adjusted"))
    ratio(TREND_ROW, "rate_ratio", s["interaction"].get("raw"))
    ratio(TREND_ROW, "rate_ratio_adjusted", s["interaction"].get("adjusted"))
    for term, r in s["voice"].items():
        ratio(term, "voice_effect", r)
    for sp in s["speakers"].itertuples(index=False):
        row(sp.condition, f"speaker_rate:{sp.speaker}", sp.error_rate, gender=sp.gender)
        if pd.notna(sp.f0_median_hz):
            row(sp.condition, f"speaker_f0:{sp.speaker}", sp.f0_median_hz, gender=sp.gender)
    row("all", "fit_seconds", s["seconds"])
    return rows


def run_config(s: dict, task: str, lang_pair: str, versions: dict, results: dict) -> dict:
    """What the store records as the run's config: the model, its status and every problem line."""
    keep = ("status", "reason", "metric", "problems", "formulas", "families", "voice_terms", "left_out", "rows")
    return {"kind": SUBSET, "task": task, "lang_pair": lang_pair, "versions": versions, "results": results,
            **{k: s[k] for k in keep if k in s}}
