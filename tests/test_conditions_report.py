"""From scored runs to the report's answer: the conditions step's rows (analysis.conditions), the
comparison tables and trend plot, the answer sentences, and `gendergap trace` reaching a cell."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.conditions import compare_and_store, female_share, group_conditions
from analysis.report import write_report
from analysis.scoring import score_utterances
from analysis.seeds import pool_and_store
from gendergap.cli import main

SPEAKERS = [f"{g}{i}" for g in "FM" for i in range(6)]
REFS = [f"le chat {w} dort sur le tapis {c} ce soir" for w in ("noir", "blanc", "gris", "roux", "petit", "grand")
        for c in ("rouge", "vert")]
SHARES = {"F-tiny": (100.0, 0.0, "female"), "B-tiny": (50.0, 50.0, "balanced"), "M-tiny": (0.0, 100.0, "male")}


def _result(rng, women: float, men: float) -> dict:
    """A WER result: each word of a speaker's utterance wrong with that gender's rate (and speaker noise)."""
    refs, hyps, spk, gen = [], [], [], []
    for s in SPEAKERS:
        rate = (women if s[0] == "F" else men) * (1 + 0.3 * (int(s[1]) - 2.5) / 2.5)
        for ref in REFS:
            words = ["x" if rng.random() < rate else w for w in ref.split()]
            refs.append(ref), hyps.append(" ".join(words)), spk.append(s), gen.append(s[0])
    return score_utterances("wer", refs, hyps, spk, gen, bootstrap=0, seed=0)


def _study(tmp_path: Path, seeds: int, rates: dict, task: str = "asr-frozen") -> tuple[dict, dict]:
    """Result JSONs per checkpoint and seed, pooled into the rows of Table 4 (as the study's seeds
    step does), and the checkpoints' facts as the conditions step passes them."""
    rng = np.random.default_rng(5)
    results = {}
    for ck, (women, men) in rates.items():
        results[ck] = []
        for s in range(seeds):
            path = tmp_path / "runs" / ck / f"seed{s}" / "test.wer.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_result(rng, women, men)))
            results[ck].append(str(path))
        pool_and_store(results[ck], list(range(seeds)), None, str(tmp_path / "results.db"), ck, task, "", "test", 200, 0)
    checkpoints = {ck: {"reference": ck == "FBANK", "set": SHARES.get(ck, (0, 0, None))[2],
                        "share": female_share({"female_pct": SHARES[ck][0], "male_pct": SHARES[ck][1]})
                        if ck in SHARES else None} for ck in rates}
    return results, checkpoints


# women's WER falls as the female share of pretraining grows; FBANK has no pretraining
TREND = {"F-tiny": (0.10, 0.30), "B-tiny": (0.20, 0.30), "M-tiny": (0.30, 0.30), "FBANK": (0.40, 0.40)}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conditions")
    results, checkpoints = _study(tmp, 3, TREND)
    db = tmp / "results.db"   # _study pooled the seeds into it
    res = compare_and_store(results, None, checkpoints, str(db), "asr-frozen", "", bootstrap=1000, seed=0)
    written = write_report(db, tmp / "report")
    return {"tmp": tmp, "db": db, "res": res, "written": written, "report": (tmp / "report" / "report.md").read_text()}


def test_conditions_are_shares_and_replicates_join_their_condition():
    named, left_out = group_conditions({"F1": {"share": 1.0, "set": "female"}, "F2": {"share": 1.0, "set": "female"},
                                        "B": {"share": 0.5, "set": None}, "X": {"share": None},
                                        "FBANK": {"reference": True}})
    assert named["F1"] == named["F2"] == ("female", 1.0)
    assert named["B"] == ("50% F", 0.5) and named["FBANK"] == ("FBANK", None) and left_out == ["X"]
    assert female_share({"female_pct": 30.0, "male_pct": 60.0, "unknown_pct": 10.0}) == pytest.approx(1 / 3, abs=1e-4)
    assert female_share({"female_pct": None, "male_pct": 50.0}) is None


def test_a_planted_trend_is_found_and_said_first(study):
    res = study["res"]
    assert [p["a"] + " vs " + p["b"] for p in res["pairs"]] == [
        "female vs balanced", "female vs male", "balanced vs male",
        "female vs FBANK", "balanced vs FBANK", "male vs FBANK"]
    trend = res["trend"]
    assert trend["slope"]["delta_rel"] < -5 and trend["ci"]["delta_rel"][1] < 0 and trend["called"]["delta_rel"]
    fm = res["pairs"][1]
    assert fm["called"]["delta_rel"] and fm["called"]["F"] and not fm["called"]["M"]   # men's WER is the same
    lines = study["report"].splitlines()
    answer = lines.index("## The answer")
    assert answer < min(i for i, line in enumerate(lines) if line.startswith("## Table"))
    sentence = next(line for line in lines[answer:] if line.startswith("- **asr-frozen"))
    assert "the gap changes with the female share of pretraining, towards women" in sentence
    assert "4 conditions x 3 runs, 12 test speakers; one pretrained checkpoint per condition" in sentence
    assert f"{trend['slope']['delta_rel']:+.1f} per 10 points" in sentence


def test_the_tables_plot_and_trace_reach_every_cell(study, capsys):
    names = {p.name for p in study["written"].values()}
    assert {"conditions_asr-frozen.md", "conditions_asr-frozen.tex", "conditions_asr-frozen.csv",
            "trend_asr-frozen.png"} <= names
    md = (study["tmp"] / "report" / "conditions_asr-frozen.md").read_text()
    assert "female vs male" in md and "female share (slope per 10 points)" in md and "called" in md
    assert "## Pretraining conditions compared" in study["report"]
    report = str(study["tmp"] / "report")
    assert main(["trace", "--report", report, "conditions_asr-frozen", "female vs male", "Δrel diff"]) == 0
    out = capsys.readouterr().out
    assert "female vs male asr-frozen conditions delta_rel wer:diff" in out and "run 5: conditions" in out
    diff = study["res"]["pairs"][1]["difference"]["delta_rel"]
    assert f"= {diff:.4f}" in out


def test_replicates_pool_into_their_condition(tmp_path):
    """Two checkpoints pretrained on one share are one condition with both their runs; the answer no
    longer warns that a difference may be one checkpoint's."""
    rates = {"F-tiny": (0.1, 0.3), "F-tiny-2": (0.12, 0.3), "M-tiny": (0.3, 0.3), "B-tiny": (0.2, 0.3)}
    results, checkpoints = _study(tmp_path, 2, rates)
    checkpoints["F-tiny-2"] = dict(checkpoints["F-tiny"])   # pretrained on the same set
    for ck in ("M-tiny", "B-tiny"):   # a replicate of each, on the same runs' files
        checkpoints[ck + "-2"], results[ck + "-2"] = dict(checkpoints[ck]), list(results[ck])
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "",
                            bootstrap=1000, seed=0)
    assert res["conditions"]["female"]["n_runs"] == 4 and res["conditions"]["female"]["n_checkpoints"] == 2
    write_report(tmp_path / "results.db", tmp_path / "report")
    sentence = next(line for line in (tmp_path / "report" / "report.md").read_text().splitlines()
                    if line.startswith("- **asr-frozen"))
    assert "3 conditions x 4 runs, 12 test speakers)" in sentence and "one pretrained checkpoint" not in sentence


def test_a_one_seed_study_says_it_cannot_answer(tmp_path):
    results, checkpoints = _study(tmp_path, 1, TREND, "asr-e2e")
    compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-e2e", "", bootstrap=200, seed=0)
    write_report(tmp_path / "results.db", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    sentence = next(line for line in text.splitlines() if line.startswith("- **asr-e2e"))
    assert "cannot answer: a condition was trained once" in sentence
    assert "one seed: not compared" in (tmp_path / "report" / "conditions_asr-e2e.md").read_text()
    assert "called" not in sentence.replace("not called", "")


def test_no_change_is_said_as_no_change(tmp_path):
    flat = {ck: (0.25, 0.30) for ck in ("F-tiny", "B-tiny", "M-tiny")}
    results, checkpoints = _study(tmp_path, 3, flat)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "", bootstrap=400,
                            seed=0)
    # the sentence answers for Δrel (a score's own column may, by chance, see a call: 5 % per test)
    assert not res["trend"]["called"]["delta_rel"] and not any(p["called"]["delta_rel"] for p in res["pairs"])
    write_report(tmp_path / "results.db", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "no change of the gap with the female share of pretraining" in text


def test_an_undefined_gap_is_stored_as_missing_and_said(tmp_path):
    """A condition whose runs score 0 for both genders (a tiny ST run's BLEU) has no Δrel: its rows
    are left out, nothing non-finite is stored, and the answer says why it cannot answer."""
    rates = {"F-tiny": (0.0, 0.0), "B-tiny": (0.2, 0.3), "M-tiny": (0.3, 0.3)}
    results, checkpoints = _study(tmp_path, 2, rates)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "",
                            bootstrap=200, seed=0)
    assert res["conditions"]["female"]["mean"]["delta_rel"] is None and res["trend"]["slope"]["delta_rel"] is None
    assert res["pairs"][0]["difference"]["delta_rel"] is None and res["pairs"][0]["difference"]["all"] < 0
    write_report(tmp_path / "results.db", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "cannot answer: Δrel is undefined for a condition" in text
    assert "| female vs balanced | – |" in (tmp_path / "report" / "conditions_asr-frozen.md").read_text()
