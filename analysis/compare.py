"""Paired speaker-level tests: do two systems' scores, or their Δrel, differ?

Both systems were scored on the same test set, so they are compared on the *same* resamples:
one count matrix per gender is drawn once and applied to both systems' per-speaker
statistics (analysis/bootstrap.py). That reuse is what makes the test paired, as in
``sacrebleu/significance.py``; the unit resampled is the speaker, as for the CIs.

Two tests, mirroring sacrebleu's two paired tests but over speakers:

- ``bootstrap`` (paired bootstrap): d = q_A - q_B for q in {F, M, all, delta_rel}; over the
  shared resamples d*_b = q_A(b) - q_B(b); the bootstrap distribution shifted to the null
  (d*_b - mean d*) gives p = (1 + #{|d*_b - mean d*| >= |d|}) / (1 + B). Also a percentile CI
  of the difference.
- ``ar`` (approximate randomisation): under the null the two systems are exchangeable per
  speaker, so each trial swaps each speaker's statistics between A and B with probability
  1/2 (one shared swap matrix); p = (1 + #{|q_A' - q_B'| >= |d|}) / (1 + B).

Comparing a system with itself gives p = 1 with both (>=, unlike sacrebleu's strict >).
For BLEU, ``sacrebleu_utterance_tests`` also runs sacrebleu's own paired tests at the
utterance level (its functions, our seed) when the hypothesis files are at hand.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from analysis.bootstrap import GENDERS, RESULT_KEYS, check_resamples, draw_counts, percentile_ci, resample_scores
from analysis.delta import delta_rel, delta_rel_array
from analysis.metrics import get_metric, sacrebleu_sentence_stats
from analysis.score_runs import fmt_score
from analysis.scoring import align_texts, check_tokenizer, read_texts, score_files
from analysis.store import ResultsStore
from corpora.base.boundary import parse_json, read_json, read_state_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint

log = logging.getLogger(__name__)

METHODS = ("bootstrap", "ar")


def _metric_signature(result: dict) -> str:
    return result["signature"].split("|ci:")[0]


def speaker_arrays(result: dict, speakers: dict[str, list[str]]) -> dict[str, np.ndarray]:
    st = result["speaker_stats"]
    k = len(result["stat_names"])
    return {g: np.array([st[s]["stats"] for s in speakers[g]], dtype=np.int64).reshape(len(speakers[g]), k)
            for g in GENDERS}


def check_pairable(a: dict, b: dict, name_a: str = "A", name_b: str = "B") -> dict[str, list[str]]:
    """Speakers per gender shared by both results; UserError if they cannot be paired."""
    for res, name in ((a, name_a), (b, name_b)):
        if "speaker_stats" not in res:
            raise UserError(f"{name} has no per-speaker statistics (speaker_stats)", path=name,
                            fix="re-score it with `gendergap score asr|st --json`, which stores them")
    if a["metric"] != b["metric"] or a["stat_names"] != b["stat_names"]:
        raise UserError(f"cannot pair {a['metric']} with {b['metric']}", path=name_b,
                        fix="compare two runs scored with the same metric")
    if _metric_signature(a) != _metric_signature(b):
        raise UserError(f"the runs were scored differently ({_metric_signature(a)} vs {_metric_signature(b)})",
                        path=name_b, fix="re-score both with the same normalisation/tokeniser/versions")
    sa, sb = a["speaker_stats"], b["speaker_stats"]
    if set(sa) != set(sb):
        only = sorted(set(sa) ^ set(sb))
        raise UserError(f"the runs cover different speakers ({len(only)} not shared, e.g. {only[:3]})",
                        path=name_b, fix="a paired test needs both systems scored on the same test set")
    bad = [s for s in sa if sa[s]["gender"] != sb[s]["gender"] or sa[s]["n_utts"] != sb[s]["n_utts"]]
    if bad:
        raise UserError(f"speaker {bad[0]!r} differs between the runs (gender or number of utterances)",
                        path=name_b, fix="score both systems against the same references and utterance table")
    speakers = {g: sorted(s for s in sa if sa[s]["gender"] == g) for g in GENDERS}
    metric = metric_from(a, name_a)
    metric_from(b, name_b)
    for g in GENDERS:
        if speakers[g] and not metric.same_references(speaker_arrays(a, speakers)[g], speaker_arrays(b, speakers)[g]):
            raise UserError("the runs were scored against different references (reference lengths differ)",
                            path=name_b, fix="score both systems against the same reference file")
    return speakers


def metric_from(result: dict, source=None):
    """The metric a result was scored with, from its recorded options. A result JSON is handed data:
    a tokeniser it names that would download a model is refused (``source``: the file, for the line)."""
    opts = result.get("options") or {}
    return get_metric(result["metric"], normalization=opts.get("normalization", "none"),
                      tokenize=check_tokenizer(opts.get("tokenize", "13a"), source),
                      lowercase=opts.get("lowercase", False))


def _points(metric, spk: dict[str, np.ndarray]) -> dict[str, float | None]:
    tot = {g: spk[g].sum(0) for g in GENDERS}
    out = {g: (metric.score(tot[g]) if len(spk[g]) else None) for g in GENDERS}
    out["all"] = metric.score(tot["F"] + tot["M"])
    out["delta_rel"] = delta_rel(out["F"], out["M"])
    return out


def compare_results(a: dict, b: dict, *, n_resamples: int = 1000, seed: int = 12345, method: str = "bootstrap",
                    level: float = 0.95, name_a: str = "A", name_b: str = "B") -> dict:
    """Paired speaker-level test of A vs B on F, M, all and Δrel; see the module docstring.

    ``a`` and ``b`` are result dicts of analysis.scoring.score_files (or their JSON files).
    Returns the two systems' scores, the differences A - B, their CIs (bootstrap only) and
    p-values; a p-value is None where the speaker-level test is undefined (< 2 speakers).
    """
    if method not in METHODS:
        raise UserError(f"unknown test {method!r}", fix="use --method bootstrap or --method ar")
    n_resamples = check_resamples(n_resamples, "--resamples", lo=1)   # ar's swap matrix is resamples x speakers too
    speakers = check_pairable(a, b, name_a, name_b)
    metric = metric_from(a)
    spk_a, spk_b = speaker_arrays(a, speakers), speaker_arrays(b, speakers)
    pa, pb = _points(metric, spk_a), _points(metric, spk_b)
    n_spk = {g: len(speakers[g]) for g in GENDERS}
    observed = {k: (None if pa[k] is None or pb[k] is None else pa[k] - pb[k]) for k in RESULT_KEYS}

    if method == "bootstrap":
        p, ci = _paired_bootstrap(metric, spk_a, spk_b, n_spk, observed, n_resamples, seed, level)
    else:
        p, ci = _approximate_randomisation(metric, spk_a, spk_b, n_spk, observed, n_resamples, seed)

    warnings = []
    for g, word in (("F", "female"), ("M", "male")):
        if n_spk[g] < 2:
            for k in (g, "all", "delta_rel"):
                p[k], ci[k] = None, None
            warnings.append(f"{n_spk[g]} {word} speaker(s): the speaker-level test is undefined for {g}, all "
                            f"and delta_rel (null)")
    for w in warnings:
        log.warning(w)
    return {
        "metric": a["metric"], "method": method, "n_resamples": int(n_resamples), "seed": int(seed),
        "unit": "speaker", "a": pa, "b": pb, "difference": observed, "ci_difference": ci, "ci_level": level,
        "p_value": p, "n_speakers": {**n_spk, "all": sum(n_spk.values())},
        "signature": f"{_metric_signature(a)}|test:paired-{method}:{n_resamples}|unit:speaker|seed:{seed}",
        "warnings": warnings,
    }


def _paired_bootstrap(metric, spk_a: dict, spk_b: dict, n_spk: dict, observed: dict, n_resamples: int, seed: int,
                      level: float) -> tuple[dict, dict]:
    """p-values and percentile CIs of A - B over shared speaker resamples (module docstring)."""
    counts = draw_counts(n_spk, n_resamples, seed)  # ONE matrix per gender, used for both systems
    ra, rb = resample_scores(metric, spk_a, counts), resample_scores(metric, spk_b, counts)
    diffs = {k: ra[k] - rb[k] for k in RESULT_KEYS}
    p = {}
    for k in RESULT_KEYS:
        d = diffs[k]
        if observed[k] is None or not np.all(np.isfinite(d)):
            p[k] = None
            continue
        centred = np.abs(d - d.mean())
        p[k] = float((1 + np.sum(centred >= abs(observed[k]) - 1e-12)) / (1 + n_resamples))
    ci = {k: percentile_ci(diffs[k], level) for k in RESULT_KEYS}
    return p, {k: (list(v) if v else None) for k, v in ci.items()}


def _approximate_randomisation(metric, spk_a: dict, spk_b: dict, n_spk: dict, observed: dict, n_resamples: int,
                               seed: int) -> tuple[dict, dict]:
    """p-values from swapping each speaker's statistics between A and B (no CI)."""
    rng = np.random.default_rng(int(seed))
    swaps = {g: rng.integers(2, size=(n_resamples, n_spk[g])).astype(np.int64) for g in GENDERS}
    keep = {g: 1 - swaps[g] for g in GENDERS}
    # Pseudo-system A' takes B's statistics on swapped speakers, B' the rest; both as count matrices.
    shuf_a = {g: keep[g] @ spk_a[g] + swaps[g] @ spk_b[g] for g in GENDERS}
    shuf_b = {g: swaps[g] @ spk_a[g] + keep[g] @ spk_b[g] for g in GENDERS}
    ra = _scores_from_sums(metric, shuf_a, n_spk, n_resamples)
    rb = _scores_from_sums(metric, shuf_b, n_spk, n_resamples)
    p = {}
    for k in RESULT_KEYS:
        d = np.abs(ra[k] - rb[k])
        if observed[k] is None or not np.all(np.isfinite(d)):
            p[k] = None
            continue
        p[k] = float((1 + np.sum(d >= abs(observed[k]) - 1e-12)) / (1 + n_resamples))
    return p, {k: None for k in RESULT_KEYS}


def _scores_from_sums(metric, sums: dict[str, np.ndarray], n_spk: dict[str, int], n: int) -> dict[str, np.ndarray]:
    """Scores of already-summed pseudo-systems (rows = trials); NaN for a gender without speakers."""
    out = {g: (metric.scores(sums[g]) if n_spk[g] else np.full(n, np.nan)) for g in GENDERS}
    out["all"] = metric.scores(sums["F"] + sums["M"])
    out["delta_rel"] = delta_rel_array(out["F"], out["M"])
    return out


def sacrebleu_utterance_tests(refs: list[str], hyps_a: list[str], hyps_b: list[str], *, seed: int = 12345,
                              n_bootstrap: int = 1000, n_ar: int = 10000, tokenize: str = "13a",
                              lowercase: bool = False) -> dict:
    """sacrebleu's own paired bootstrap and approximate-randomisation tests (utterance level).

    These resample utterances, not speakers: a cross-check, not the speaker-level answer.
    """
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize=check_tokenizer(tokenize), lowercase=lowercase, force=True)
    score_b = metric.corpus_score(hyps_b, [refs]).score
    out = {name: {"p_value": _sacrebleu_paired_p(name, metric, refs, hyps_a, hyps_b, score_b, n, seed), "n_samples": n}
           for name, n in (("bootstrap", n_bootstrap), ("ar", n_ar))}
    out["a"], out["b"] = float(metric.corpus_score(hyps_a, [refs]).score), float(score_b)
    out["unit"] = "utterance"
    return out


def _sacrebleu_paired_p(test: str, metric, refs: list[str], hyps_a: list[str], hyps_b: list[str], score_b: float,
                        n: int, seed: int) -> float:
    """p-value of sacrebleu's paired ``bootstrap`` or ``ar`` test of A against baseline B.

    Calls its private test functions with our seed: the public ``PairedTest`` reads the seed
    from $SACREBLEU_SEED and turns a seed of 0 into "no seed". The only use of sacrebleu's
    private significance API (bounded in setup.cfg, checked with 2.6.0); the baseline's rows
    come from analysis/metrics.py's adapter.
    """
    from sacrebleu.significance import Result, _paired_ar_test, _paired_bs_test

    info = {"BLEU": (sacrebleu_sentence_stats(metric, refs, hyps_b), Result(score_b))}
    fn = _paired_bs_test if test == "bootstrap" else _paired_ar_test
    _, res = fn(info, "A", hyps_a, [refs], {"BLEU": metric}, n_samples=n, seed=int(seed))
    return float(res["BLEU"].p_value)


# --- the two results to compare: JSON files, or scoring runs of a results DB ----------------------

def load_result_json(path: str) -> dict:
    """A result JSON written by `gendergap score asr|st --json` (one clear error if it is not one)."""
    p = Path(path)
    if not p.is_file():
        raise UserError("no such result JSON", path=p, fix="write it with `gendergap score asr|st --json`")
    return read_json(p, "result JSON", shape=dict, fix="pass a file written by `score asr|st --json`")


def _written_result(inputs: list[dict]) -> dict | None:
    """The result JSON a model's command wrote beside the hypotheses it scored (`asr finetune|frozen|decode|
    transcribe`: NAME.wer.json; `st decode`: HYPS.json; `asr transcribe --task translate`: NAME.bleu.json),
    when it scored the same files as the run (``inputs``: the run's recorded files); else None."""
    scored = sorted(str(f.get("path")) for f in inputs)
    for f in inputs:
        hyps = Path(str(f.get("path")))
        for path in {hyps.with_name(hyps.name.replace(".hyp.tsv", ".wer.json")), Path(f"{hyps}.json"),
                     hyps.with_name(hyps.name.replace(".hyp.tsv", ".bleu.json"))} - {hyps}:
            written = read_state_json(path, "result JSON")
            if written is None:
                continue
            result = written.get("bleu", written) if isinstance(written, dict) else None
            if isinstance(result, dict) and "speaker_stats" in result and \
                    sorted(str(x.get("path")) for x in (result.get("inputs") or {}).values()) == scored:
                return result
    return None


def result_from_db(db: str, run_id: int) -> dict:
    """Re-derive a stored scoring run's per-speaker statistics from its recorded inputs (a run stored by a
    model's command, which records no utterance table: from the result JSON it wrote, _written_result)."""
    with ResultsStore(db, readonly=True) as store:
        runs = store.runs()
        stored = store.scores(run_id=int(run_id))
    row = runs[runs["id"] == run_id]
    if row.empty or not str(row["kind"].iloc[0]).startswith("score-"):
        raise UserError(f"run {run_id} is not a scoring run in this DB", path=db,
                        fix="see the run ids with `gendergap report` or sqlite3; pass --run-a/--run-b")
    cfg = parse_json(row["config"].iloc[0], f"run {run_id}'s config", path=db, shape=dict)
    opts = {k: cfg[k] for k in ("normalization", "tokenize", "lowercase") if k in cfg}
    try:
        result = score_files(cfg["metric"], cfg["refs"], cfg["hyps"], cfg["table"], bootstrap=0,
                             seed=cfg.get("seed", 0), **opts)
    except KeyError:   # a run scored by a model's command: the result JSON it wrote holds the statistics
        result = _written_result(parse_json(row["inputs"].iloc[0] or "[]", f"run {run_id}'s inputs", path=db,
                                            shape=list))
        if result is None:
            raise UserError(f"run {run_id} does not record its input files", path=db,
                            fix="re-score it with `gendergap score asr|st --db`, or compare JSONs (--a/--b)") from None
    except UserError as e:
        raise UserError(f"cannot re-read run {run_id}'s inputs ({e})", path=db,
                        fix="compare the result JSONs instead (--a/--b)") from None
    # The per-speaker statistics are re-derived from the recorded files: they must still give
    # the stored scores, or the files changed since the run was scored.
    for _, r in stored.iterrows():
        if r["gender"] in ("F", "M", "all") and r["metric"] == result["metric"]:
            if result[r["gender"]] is None or abs(result[r["gender"]] - r["value"]) > 1e-9:
                raise UserError(f"run {run_id}'s input files changed since it was scored ({r['gender']} "
                                f"{r['value']:.4f} stored, {result[r['gender']]} now)", path=cfg.get("hyps", db),
                                fix="re-score the run, or compare the result JSONs (--a/--b)")
    return result


# --- `score compare`: the two runs, the test, the sacrebleu cross-check, the lines printed ---------

def compare_runs(*, a: str | None = None, b: str | None = None, db: str | None = None, run_a: int | None = None,
                 run_b: int | None = None, method: str = "bootstrap", resamples: int | None = None,
                 seed: int = 12345) -> dict:
    """compare_results of two result JSONs (``a``, ``b``) or two scoring runs of ``db``; for BLEU
    with the scored files unchanged, sacrebleu's utterance-level tests too (``sacrebleu_paired``)."""
    if db:
        if run_a is None or run_b is None:
            raise UserError("--db needs --run-a and --run-b", fix="pass the two scoring runs' ids")
        ra, rb = result_from_db(db, run_a), result_from_db(db, run_b)
        name_a, name_b = f"{db} run {run_a}", f"{db} run {run_b}"
    elif a and b:
        ra, rb, name_a, name_b = load_result_json(a), load_result_json(b), a, b
    else:
        raise UserError("compare needs --a and --b (result JSONs) or --db with --run-a and --run-b",
                        fix="e.g. gendergap score compare --a F.json --b M.json")
    n = resamples or (1000 if method == "bootstrap" else 10000)
    res = compare_results(ra, rb, n_resamples=n, seed=seed, method=method, name_a=name_a, name_b=name_b)
    texts = _unchanged_texts(ra, rb) if ra["metric"] == "bleu" else None
    if texts:
        opts = ra.get("options") or {}
        sp = sacrebleu_utterance_tests(*texts, seed=seed, tokenize=opts.get("tokenize", "13a"),
                                       lowercase=opts.get("lowercase", False))
        if sp["a"] == ra["all"] and sp["b"] == rb["all"]:  # the files still give the scored numbers
            res["sacrebleu_paired"] = sp
    return res


def _unchanged_texts(a: dict, b: dict):
    """(refs, hyps_a, hyps_b) when both runs' input files are still as they were scored, else None."""
    ia, ib = a.get("inputs") or {}, b.get("inputs") or {}
    try:
        for fp in (ia["refs"], ia["hyps"], ib["refs"], ib["hyps"]):
            now = file_fingerprint(fp["path"])
            if (now["size"], now["mtime"]) != (fp["size"], fp["mtime"]):
                return None
        if ia["refs"]["path"] != ib["refs"]["path"]:
            return None
        refs = read_texts(ia["refs"]["path"], "references")
        col_a, col_b = ((r.get("options") or {}).get("hyp_column") for r in (a, b))
        _, ref_list, hyp_a = align_texts(refs, read_texts(ia["hyps"]["path"], "hypotheses", col_a),
                                           ia["refs"]["path"], ia["hyps"]["path"])
        _, _, hyp_b = align_texts(refs, read_texts(ib["hyps"]["path"], "hypotheses", col_b), ib["refs"]["path"],
                                  ib["hyps"]["path"])
    except (KeyError, OSError, UserError):
        return None
    return ref_list, hyp_a, hyp_b


def comparison_text(res: dict) -> str:
    """What `score compare` prints: one line per score (A, B, A - B with its CI, p) and the signature."""
    out = [f"{res['metric'].upper()} paired {res['method']} over speakers ({res['n_resamples']} resamples, "
           f"seed {res['seed']}): A - B"]
    for k in ("all", "F", "M", "delta_rel"):
        d, p = res["difference"][k], res["p_value"][k]
        out.append(f"  {k:9s} A {fmt_score(res['a'][k])}  B {fmt_score(res['b'][k])}  "
                   f"diff {fmt_score(d, res['ci_difference'][k])}  p {'undefined' if p is None else f'{p:.4f}'}")
    if "sacrebleu_paired" in res:
        sp = res["sacrebleu_paired"]
        out.append(f"  sacrebleu utterance-level: bootstrap p {sp['bootstrap']['p_value']:.4f}, "
                   f"ar p {sp['ar']['p_value']:.4f}")
    out.append(f"signature: {res['signature']}")
    return "\n".join(out)
