"""Scores from files: exactly jiwer's WER and sacrebleu's BLEU/chrF, per gender, corpus-level."""
import json

import jiwer
import numpy as np
import pandas as pd
import pytest
import sacrebleu

from analysis.metrics import BLEU, CHRF, WER, get_metric
from analysis.normalize import NORMALISATIONS, normalise_words
from analysis.scoring import read_speakers, read_texts, score_files, score_rows, store_result
from analysis.store import ResultsStore
from corpora.base.errors import UserError
from scoring_data import make_corpus, write_inputs


@pytest.fixture()
def corpus(tmp_path):
    data = make_corpus()
    return data, write_inputs(tmp_path, *data)


def subset(values, genders, g):
    return [v for v, x in zip(values, genders) if x == g]


def test_wer_equals_jiwer_exactly_overall_and_per_gender(corpus):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("wer", r, h, t, bootstrap=0)
    assert res["all"] == 100 * jiwer.wer(refs, hyps)
    for g in ("F", "M"):
        assert res[g] == 100 * jiwer.wer(subset(refs, gen, g), subset(hyps, gen, g))
    out = jiwer.process_words(refs, hyps)
    assert res["totals"]["all"] == [out.hits, out.substitutions, out.deletions, out.insertions,
                                    out.hits + out.substitutions + out.deletions]
    from importlib import metadata
    assert res["signature"] == f"wer|norm:none|jiwer:{metadata.version('jiwer')}|ci:none"


def test_wer_is_corpus_level_not_a_mean_of_utterance_rates(corpus):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("wer", r, h, t, bootstrap=0)
    per_utt_mean = 100 * np.mean([jiwer.wer(a, b) for a, b in zip(refs, hyps)])
    assert abs(res["all"] - per_utt_mean) > 0.1


@pytest.mark.parametrize("norm", sorted(NORMALISATIONS))
def test_every_normalisation_equals_jiwer_with_that_transform(corpus, norm):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("wer", r, h, t, bootstrap=0, normalization=norm)
    tr = NORMALISATIONS[norm]
    assert res["all"] == 100 * jiwer.wer(refs, hyps, reference_transform=tr, hypothesis_transform=tr)
    assert f"norm:{norm}" in res["signature"] and res["normalization"] == norm


def test_normalisations_change_the_number_and_say_so():
    refs, hyps = ["Bonjour , Madame !"], ["bonjour madame"]
    scores = {n: WER(n).score(WER(n).utterance_stats(refs, hyps).sum(0)) for n in ("none", "lc", "lc-nopunct")}
    # none: case and punctuation count; lc: punctuation still counts; lc-nopunct: neither.
    assert scores == {"none": 100.0, "lc": 50.0, "lc-nopunct": 0.0}
    assert WER("lc").signature.startswith("wer|norm:lc|")
    words = normalise_words(["Fin.Début l’homme, peut-être !"], "lc-nopunct")
    assert words == [["fin", "début", "l'homme", "peut-être"]]
    with pytest.raises(UserError, match="unknown WER normalisation"):
        get_metric("wer", normalization="nfkc")


def test_bleu_equals_sacrebleu_exactly(corpus):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("bleu", r, h, t, bootstrap=0)
    assert res["all"] == sacrebleu.corpus_bleu(hyps, [refs]).score
    for g in ("F", "M"):
        assert res[g] == sacrebleu.corpus_bleu(subset(hyps, gen, g), [subset(refs, gen, g)]).score
    ref_bleu = sacrebleu.BLEU()
    ref_bleu.corpus_score(hyps, [refs])  # sacrebleu knows nrefs once it has seen references
    assert res["signature"].startswith(str(ref_bleu.get_signature()) + "|")
    assert "tok:13a" in res["signature"] and "case:mixed" in res["signature"]


def test_bleu_options_and_chrf_equal_sacrebleu(corpus):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("bleu", r, h, t, bootstrap=0, tokenize="intl", lowercase=True)
    assert res["all"] == sacrebleu.corpus_bleu(hyps, [refs], tokenize="intl", lowercase=True).score
    assert "case:lc" in res["signature"] and "tok:intl" in res["signature"]
    res = score_files("chrf", r, h, t, bootstrap=0)
    assert res["all"] == sacrebleu.corpus_chrf(hyps, [refs]).score
    with pytest.raises(UserError, match="tokenize"):
        BLEU(tokenize="nonsense")


def test_utterance_rows_are_additive():
    refs = ["a b c d", "", "x y"]
    hyps = ["a c d e", "oops", ""]
    rows = WER().utterance_stats(refs, hyps)
    assert rows.tolist() == [[3, 0, 1, 1, 4], [0, 0, 0, 1, 0], [0, 0, 2, 0, 2]]
    assert WER().score(rows.sum(0)) == 100 * jiwer.wer(refs, hyps)
    assert WER().score(rows[1]) is None  # no reference words: a count, not a rate
    b = BLEU()
    assert b.score(b.utterance_stats(refs, hyps).sum(0)) == sacrebleu.corpus_bleu(hyps, [refs]).score
    c = CHRF()
    assert c.score(c.utterance_stats(refs, hyps).sum(0)) == sacrebleu.corpus_chrf(hyps, [refs]).score


def test_result_keys_counts_and_delta(corpus):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("wer", r, h, t, bootstrap=200, seed=3)
    assert res["n_utts"] == {"F": gen.count("F"), "M": gen.count("M"), "all": len(ids)}
    assert res["n_speakers"] == {"F": 4, "M": 4, "all": 8}
    assert res["delta_rel"] == pytest.approx(100 * (res["F"] - res["M"]) / (0.5 * (res["F"] + res["M"])))
    assert set(res["ci"]) == {"F", "M", "all", "delta_rel"}
    stats = np.array([v["stats"] for v in res["speaker_stats"].values()])
    assert stats.sum(0).tolist() == res["totals"]["all"]
    assert json.loads(json.dumps(res)) == res  # JSON-able as is


def test_speaker_with_unknown_gender_and_missing_ids_are_user_errors(tmp_path):
    ids, refs, hyps, spk, gen = make_corpus(20, 4)
    gen = ["U" if s == "spk3" else g for s, g in zip(spk, gen)]
    r, h, t = write_inputs(tmp_path, ids, refs, hyps, spk, gen)
    with pytest.raises(UserError) as e:
        score_files("wer", r, h, t)
    assert "spk3" in str(e.value) and e.value.line == 5  # first row of spk3: utt0003 on line 5
    table = pd.DataFrame({"id": ids[:10], "speaker": spk[:10], "gender": ["F"] * 10})
    with pytest.raises(UserError, match="10 scored id"):
        read_speakers(table, ids)


def test_read_texts_accepts_header_bom_crlf_and_bare_ids(tmp_path):
    p = tmp_path / "x.tsv"
    p.write_bytes("\ufeffid\ttext\r\na\tBonjour  le monde\r\nb\r\n\nc\t\r\n".encode())
    got = read_texts(p, "hypotheses")
    assert {k: v[0] for k, v in got.items()} == {"a": "Bonjour  le monde", "b": "", "c": ""}
    assert got["b"][1] == 3


def test_score_rows_and_store(tmp_path, corpus):
    (ids, refs, hyps, spk, gen), (r, h, t) = corpus
    res = score_files("bleu", r, h, t, bootstrap=100, seed=0)
    rows = score_rows(res, "F-tiny", "st", "fr-en")
    assert [x["gender"] for x in rows] == ["F", "M", "all", "delta_rel"]
    assert all(x["metric"] == "bleu" and x["signature"] == res["signature"] for x in rows)
    db = tmp_path / "r.db"
    run = store_result(db, res, checkpoint="F-tiny", task="st", lang_pair="fr-en")
    assert store_result(db, res, checkpoint="F-tiny", task="st", lang_pair="fr-en") == run  # same config: replaced
    with ResultsStore(db, readonly=True) as store:
        s = store.scores(checkpoint="F-tiny")
    assert len(s) == 4
    row = s[s["gender"] == "delta_rel"].iloc[0]
    assert row["value"] == pytest.approx(res["delta_rel"]) and row["ci_low"] == pytest.approx(res["ci"]["delta_rel"][0])
    assert row["n_utts"] == len(ids)
