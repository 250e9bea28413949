"""Seed pooling (analysis/seeds.py): mean ± sd over seeds and a CI over seeds and speakers."""
import numpy as np
import pytest

from analysis.scoring import score_utterances
from analysis.seeds import pool_seed_results, pooled_rows
from corpora.base.errors import UserError

SPEAKERS = [f"{g}{i}" for g in "FM" for i in range(4)]
REFS = [f"le chat {w} dort sur le tapis rouge" for w in ("noir", "blanc", "gris", "roux", "petit")]


def _result(errors_by_speaker: dict[str, int], seed_offset: int = 0) -> dict:
    """WER result in which speaker s gets errors_by_speaker[s] substituted words per utterance."""
    refs, hyps, spk, gen = [], [], [], []
    for s in SPEAKERS:
        for j, ref in enumerate(REFS):
            words = ref.split()
            for k in range(min(len(words), errors_by_speaker[s] + (seed_offset if j % 2 else 0))):
                words[k] = "x"
            refs.append(ref), hyps.append(" ".join(words)), spk.append(s), gen.append(s[0])
    return score_utterances("wer", refs, hyps, spk, gen, bootstrap=500, seed=7)


BASE = {"F0": 1, "F1": 2, "F2": 1, "F3": 3, "M0": 2, "M1": 4, "M2": 3, "M3": 2}


def test_one_seed_is_the_speaker_bootstrap():
    r = _result(BASE)
    p = pool_seed_results([r], [1], bootstrap=500, seed=7)
    for k in ("F", "M", "all", "delta_rel"):
        assert p["mean"][k] == pytest.approx(r[k])
        assert p["ci"][k] == pytest.approx(r["ci"][k])
        assert p["sd"][k] is None


def test_seed_variance_widens_the_pooled_ci():
    # seed 2 makes the women's odd utterances worse, seed 3 the men's: Δrel moves across seeds
    r1 = _result(BASE)
    r2 = _result({s: v + (1 if s[0] == "F" else 0) for s, v in BASE.items()}, seed_offset=1)
    r3 = _result({s: v + (1 if s[0] == "M" else 0) for s, v in BASE.items()})
    p = pool_seed_results([r1, r2, r3], [1, 2, 3], bootstrap=500, seed=7)
    deltas = [r1["delta_rel"], r2["delta_rel"], r3["delta_rel"]]
    assert p["mean"]["delta_rel"] == pytest.approx(np.mean(deltas))
    assert p["sd"]["delta_rel"] == pytest.approx(np.std(deltas, ddof=1))
    assert p["sd"]["delta_rel"] > 5
    width = lambda ci: ci[1] - ci[0]  # noqa: E731
    for single in (r1, r2, r3):
        assert width(p["ci"]["delta_rel"]) > width(single["ci"]["delta_rel"])
    rows = pooled_rows(p, "B-tiny", "asr-frozen")
    got = {(r["gender"], r["metric"]): r["value"] for r in rows}
    assert got[("delta_rel", "wer")] == pytest.approx(np.mean(deltas))
    assert got[("delta_rel", "wer:seed_sd")] == pytest.approx(np.std(deltas, ddof=1))
    assert got[("all", "wer:n_seeds")] == 3
    assert "seeds:1,2,3" in rows[0]["signature"] and "per-seed-pooled:500" in rows[0]["signature"]


def test_seeds_on_other_speakers_are_refused():
    r1 = _result(BASE)
    r2 = _result(BASE)
    r2["speaker_stats"] = {k.replace("F0", "F9"): v for k, v in r2["speaker_stats"].items()}
    with pytest.raises(UserError, match="seed 2 was scored on other speakers"):
        pool_seed_results([r1, r2], [1, 2])
