"""Scores over training seeds: mean ± sd, and one CI that covers both seeds and speakers.

A downstream model trained with another seed gives another WER. On a small test set that spread
can be as large as the speaker-level CI (the built-in study: frozen-ASR WER 66.9 / 68.5 / 67.3
for three seeds of one head), so a gap read from one seed can be the seed's. Given the scoring
results of the same task trained with several seeds (``analysis.scoring.score_files`` dicts,
each with its per-speaker statistics):

* the point estimate of F, M, all and Δrel is the **mean over seeds** (each seed's corpus-level
  score, then averaged: every seed is one equally likely training run), reported with the
  **sd over seeds** (ddof 1);
* the **pooled CI** resamples speakers within each seed's hypotheses -- the same speaker draws
  for every seed, stratified by gender as in analysis/bootstrap.py -- and pools the S x B
  resampled scores into one percentile interval. Its spread is the spread of "one training run
  scored on a resampled test set": the speaker bootstrap inside each seed plus the differences
  between seeds, so it is wider than a single seed's CI whenever seeds disagree, and it reduces
  to the usual speaker CI with one seed.

A gap is *called* (the report's word "significant") only when the pooled Δrel CI excludes 0 and
the mean Δrel exceeds the seed sd in size: outside what the speakers and the seeds produce.
"""
from __future__ import annotations

import numpy as np

from analysis.bootstrap import GENDERS, RESULT_KEYS, draw_counts, percentile_ci, resample_scores
from analysis.compare import metric_from, speaker_arrays
from analysis.store import ResultsStore
from corpora.base.boundary import read_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint


def pool_seed_results(results: list[dict], seeds: list[int], *, bootstrap: int = 1000, seed: int = 12345,
                      level: float = 0.95, source: str = "") -> dict:
    """Pool the scoring results of one task trained with ``seeds`` (same test set, same metric).

    Returns ``{metric, seeds, per_seed: {seed: {F, M, all, delta_rel}}, mean, sd, ci, n_utts,
    n_speakers, signature}``; ``ci`` is the pooled interval per key (None when undefined).
    """
    if len(results) != len(seeds) or not results:
        raise ValueError(f"{len(results)} results for {len(seeds)} seeds")
    first = results[0]
    names = {r["metric"] for r in results}
    if len(names) != 1:
        raise UserError(f"the seeds were scored with different metrics ({', '.join(sorted(names))})", path=source,
                        fix="score every seed's hypotheses with the same metric")
    spk_gender = {s: v["gender"] for s, v in first["speaker_stats"].items()}
    for r, s in zip(results[1:], seeds[1:]):
        other = {k: v["gender"] for k, v in r["speaker_stats"].items()}
        if other != spk_gender:
            raise UserError(f"seed {s} was scored on other speakers than seed {seeds[0]}", path=source,
                            fix="pool seeds of the same task on the same test set only")
    speakers = {g: sorted(s for s, sg in spk_gender.items() if sg == g) for g in GENDERS}
    metric = metric_from(first, source)
    per_seed, pooled = {}, {k: [] for k in RESULT_KEYS}
    counts = draw_counts({g: len(speakers[g]) for g in GENDERS}, bootstrap, seed) if bootstrap else None
    for r, s in zip(results, seeds):
        per_seed[int(s)] = {k: r.get(k) for k in RESULT_KEYS}
        if counts is not None:
            res = resample_scores(metric, speaker_arrays(r, speakers), counts)
            for k in RESULT_KEYS:
                pooled[k].append(res[k])
    # one speaker of a gender is that speaker in every resample: no CI for it, all or Δrel (as in scoring)
    single = [g for g in GENDERS if len(speakers[g]) == 1]
    undefined = set(single) | ({"all", "delta_rel"} if single else set())
    mean, sd, ci = {}, {}, {}
    for k in RESULT_KEYS:
        values = [v[k] for v in per_seed.values()]
        if any(v is None for v in values):
            mean[k] = sd[k] = ci[k] = None
            continue
        mean[k] = float(np.mean(values))
        sd[k] = float(np.std(values, ddof=1)) if len(values) > 1 else None
        interval = percentile_ci(np.concatenate(pooled[k]), level) if counts is not None else None
        if k in undefined:
            interval = None
        ci[k] = list(interval) if interval else None
    base = first["signature"].split("|ci:")[0]
    signature = base + f"|seeds:{','.join(str(int(s)) for s in seeds)}|agg:mean" + (
        f"|ci:speaker-bootstrap-per-seed-pooled:{bootstrap}|level:{level:g}|seed:{seed}" if bootstrap else "|ci:none")
    return {"metric": first["metric"], "seeds": [int(s) for s in seeds], "per_seed": per_seed, "mean": mean,
            "sd": sd, "ci": ci, "ci_level": level,
            "n_utts": first["n_utts"], "n_speakers": first["n_speakers"], "signature": signature}


def pooled_rows(pooled: dict, checkpoint: str, task: str, lang_pair: str = "", subset: str = "test") -> list[dict]:
    """Results-store rows: mean with the pooled CI (gender F/M/all/delta_rel, metric wer|bleu),
    the seed sd (metric ``<metric>:seed_sd``) and the number of seeds (metric ``n_seeds``)."""
    m, rows = pooled["metric"], []
    for k in RESULT_KEYS:
        if pooled["mean"][k] is None:
            continue
        n_key = "all" if k == "delta_rel" else k
        common = {"checkpoint": checkpoint, "task": task, "lang_pair": lang_pair, "subset": subset, "gender": k,
                  "n_utts": pooled["n_utts"][n_key], "n_speakers": pooled["n_speakers"][n_key],
                  "signature": pooled["signature"]}
        ci = pooled["ci"][k]
        rows.append({**common, "metric": m, "value": pooled["mean"][k], "ci_low": ci[0] if ci else None,
                     "ci_high": ci[1] if ci else None})
        if pooled["sd"][k] is not None:
            rows.append({**common, "metric": f"{m}:seed_sd", "value": pooled["sd"][k], "ci_low": None,
                         "ci_high": None})
    rows.append({"checkpoint": checkpoint, "task": task, "lang_pair": lang_pair, "subset": subset, "gender": "all",
                 "metric": f"{m}:n_seeds", "value": float(len(pooled["seeds"])), "ci_low": None, "ci_high": None,
                 "n_utts": pooled["n_utts"]["all"], "n_speakers": pooled["n_speakers"]["all"],
                 "signature": pooled["signature"]})
    return rows


def pool_and_store(results: list[str], seeds: list[int], key: str | None, db: str, checkpoint: str, task: str,
                   lang_pair: str, subset: str, bootstrap: int, seed: int) -> dict:
    """Pool one task's per-seed scoring results (their JSON files; ``key``: where the scoring
    result sits in each, e.g. ``bleu``) and store mean ± sd and the seed-and-speaker CI in the
    results DB as one run (a second call with the same inputs stores nothing new)."""
    loaded = [read_json(r, "result JSON", shape=dict) for r in results]
    loaded = [r[key] if key else r for r in loaded]
    pooled = pool_seed_results(loaded, seeds, bootstrap=bootstrap, seed=seed, source=results[0])
    config = {"kind": "seeds", "checkpoint": checkpoint, "task": task, "lang_pair": lang_pair, "subset": subset,
              "signature": pooled["signature"], "results": results}
    with ResultsStore(db) as store:
        store.store_run("seeds", config, pooled_rows(pooled, checkpoint, task, lang_pair, subset), name=checkpoint,
                        seed=seed, inputs=[file_fingerprint(r) for r in results])
    print(f"{checkpoint} {task} {lang_pair} over seeds {seeds}: " + ", ".join(
        f"{k} {pooled['mean'][k]:.2f} ± {pooled['sd'][k] or 0:.2f}" for k in ("all", "delta_rel")
        if pooled["mean"][k] is not None) + f" (Δrel CI {pooled['ci']['delta_rel']})", flush=True)
    return pooled
