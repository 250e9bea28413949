"""Speaker-level bootstrap and paired tests: intervals, seeds, pairing, undefined cases."""
import jiwer
import numpy as np
import pytest

from analysis.bootstrap import draw_counts, percentile_ci, resample_scores, speaker_sums
from analysis.compare import compare_results
from analysis.metrics import WER
from analysis.scoring import score_utterances
from corpora.base.errors import UserError
from scoring_data import make_corpus


@pytest.fixture(scope="module")
def data():
    return make_corpus(n_utts=240, n_speakers=12, seed=1)


@pytest.mark.parametrize("metric", ["wer", "bleu"])
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_ci_contains_the_point_estimate(data, metric, seed):
    ids, refs, hyps, spk, gen = data
    res = score_utterances(metric, refs, hyps, spk, gen, bootstrap=1000, seed=seed)
    for k in ("F", "M", "all", "delta_rel"):
        lo, hi = res["ci"][k]
        assert lo < res[k] < hi, (k, lo, res[k], hi)
    assert f"seed:{seed}" in res["signature"] and "speaker-bootstrap:1000" in res["signature"]


def test_seed_zero_is_a_real_seed_and_results_are_deterministic(data):
    ids, refs, hyps, spk, gen = data
    run = lambda s: score_utterances("wer", refs, hyps, spk, gen, bootstrap=300, seed=s)["ci"]  # noqa: E731
    assert run(0) == run(0)
    assert run(0) != run(1)
    with pytest.raises(TypeError):
        draw_counts({"F": 3, "M": 3}, 10, None)


def test_count_matrix_is_a_bootstrap_of_speakers():
    counts = draw_counts({"F": 5, "M": 7}, 2000, 0)
    assert counts["F"].shape == (2000, 5) and counts["M"].shape == (2000, 7)
    assert (counts["F"].sum(1) == 5).all() and (counts["M"].sum(1) == 7).all()
    assert counts["M"].mean(0) == pytest.approx(np.ones(7), abs=0.1)


def test_counts_times_speaker_stats_equals_rescoring_the_gathered_texts(data):
    ids, refs, hyps, spk, gen = data
    metric = WER()
    names, sums = speaker_sums(metric.utterance_stats(refs, hyps), spk)
    g_of = dict(zip(spk, gen))
    per_g = {g: [n for n in names if g_of[n] == g] for g in ("F", "M")}
    stats = {g: sums[[names.index(n) for n in per_g[g]]] for g in ("F", "M")}
    counts = draw_counts({g: len(per_g[g]) for g in per_g}, 4, 7)
    fast = resample_scores(metric, stats, counts)
    for b in range(4):
        idx = [i for g in ("F",) for n, c in zip(per_g[g], counts[g][b]) for _ in range(c)
               for i in range(len(spk)) if spk[i] == n]
        assert fast["F"][b] == pytest.approx(100 * jiwer.wer([refs[i] for i in idx], [hyps[i] for i in idx]))


def test_one_speaker_per_gender_gives_no_interval(data):
    ids, refs, hyps, spk, gen = data
    keep = [i for i, s in enumerate(spk) if s in ("spk0", "spk1")]  # one F, one M speaker
    res = score_utterances("wer", [refs[i] for i in keep], [hyps[i] for i in keep], [spk[i] for i in keep],
                           [gen[i] for i in keep], bootstrap=500, seed=0)
    assert res["n_speakers"] == {"F": 1, "M": 1, "all": 2}
    assert res["F"] is not None and res["delta_rel"] is not None  # the point estimates stay
    assert res["ci"] == {"F": None, "M": None, "all": None, "delta_rel": None}
    assert any("CI is undefined" in w for w in res["warnings"])


def test_no_speaker_of_one_gender_leaves_that_score_undefined(data):
    ids, refs, hyps, spk, gen = data
    keep = [i for i, g in enumerate(gen) if g == "F"]
    res = score_utterances("bleu", [refs[i] for i in keep], [hyps[i] for i in keep], [spk[i] for i in keep],
                           ["F"] * len(keep), bootstrap=200, seed=0)
    assert res["M"] is None and res["delta_rel"] is None and res["ci"]["M"] is None
    assert res["ci"]["F"] is not None and res["all"] == res["F"]


def test_speaker_level_interval_is_wider_than_utterance_level_when_speakers_differ():
    # Error rates from 5% to 60% by speaker: utterances of one speaker are not independent.
    ids, refs, hyps, spk, gen = make_corpus(n_utts=400, n_speakers=8, seed=2)
    by_speaker = score_utterances("wer", refs, hyps, spk, gen, bootstrap=1000, seed=0)["ci"]["all"]
    by_utterance = score_utterances("wer", refs, hyps, ids, gen, bootstrap=1000, seed=0)["ci"]["all"]
    assert by_speaker[1] - by_speaker[0] > 1.5 * (by_utterance[1] - by_utterance[0])


def test_percentile_ci_refuses_undefined_resamples():
    assert percentile_ci(np.array([1.0, np.nan])) is None
    assert percentile_ci(np.arange(101.0), 0.9) == pytest.approx((5.0, 95.0))


# --- paired tests -------------------------------------------------------------------------
def _two_systems(data, worse=0.02):
    ids, refs, hyps, spk, gen = data
    rng = np.random.default_rng(5)
    # B = A plus a few extra substitutions on every speaker: small but systematic.
    hyps_b = [" ".join("zzz" if rng.random() < worse else w for w in h.split()) for h in hyps]
    a = score_utterances("wer", refs, hyps, spk, gen, bootstrap=0)
    b = score_utterances("wer", refs, hyps_b, spk, gen, bootstrap=0)
    return a, b


@pytest.mark.parametrize("method", ["bootstrap", "ar"])
def test_a_system_against_itself_gives_p_one(data, method):
    a, _ = _two_systems(data)
    res = compare_results(a, a, method=method, n_resamples=500, seed=0)
    assert res["p_value"] == {"F": 1.0, "M": 1.0, "all": 1.0, "delta_rel": 1.0}
    assert res["difference"]["all"] == 0


def test_pairing_detects_a_small_systematic_difference(data):
    a, b = _two_systems(data)
    ids, refs, hyps, spk, gen = data
    ci_a = score_utterances("wer", refs, hyps, spk, gen, bootstrap=1000, seed=0)["ci"]["all"]
    assert ci_a[0] < b["all"] < ci_a[1]  # unpaired, B's WER lies inside A's own interval...
    paired = compare_results(a, b, method="bootstrap", n_resamples=1000, seed=0)
    assert paired["p_value"]["all"] < 0.01  # ...paired on the same resamples, the gap is clear
    lo, hi = paired["ci_difference"]["all"]
    assert lo < paired["difference"]["all"] < hi < 0
    ar = compare_results(a, b, method="ar", n_resamples=2000, seed=0)
    assert ar["p_value"]["all"] < 0.05


def test_paired_bootstrap_uses_one_count_matrix_for_both_systems(data):
    a, b = _two_systems(data)
    res = compare_results(a, b, method="bootstrap", n_resamples=300, seed=11)
    # Rebuild by hand: the same counts applied to both systems' per-speaker stats.
    metric = WER()
    spk = {g: sorted(s for s, v in a["speaker_stats"].items() if v["gender"] == g) for g in ("F", "M")}
    arr = lambda r: {g: np.array([r["speaker_stats"][s]["stats"] for s in spk[g]]) for g in spk}  # noqa: E731
    counts = draw_counts({g: len(spk[g]) for g in spk}, 300, 11)
    d = resample_scores(metric, arr(a), counts)["all"] - resample_scores(metric, arr(b), counts)["all"]
    assert res["ci_difference"]["all"] == pytest.approx(list(np.percentile(d, [2.5, 97.5])))


def test_unpairable_runs_are_user_errors(data):
    a, b = _two_systems(data)
    ids, refs, hyps, spk, gen = data
    other = score_utterances("wer", refs[:100], hyps[:100], spk[:100], gen[:100], bootstrap=0)
    with pytest.raises(UserError, match="speaker"):
        compare_results(a, other)
    shifted = score_utterances("wer", [r + " fin" for r in refs], hyps, spk, gen, bootstrap=0)
    with pytest.raises(UserError, match="different references"):
        compare_results(a, shifted)
    bleu = score_utterances("bleu", refs, hyps, spk, gen, bootstrap=0)
    with pytest.raises(UserError, match="cannot pair"):
        compare_results(a, bleu)
