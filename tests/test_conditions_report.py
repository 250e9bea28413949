"""From scored runs to the report's answer (issue 61): the conditions step's rows
(analysis.conditions), the comparison tables by family, the trend plot, `gendergap trace` reaching a
cell, and an answer sentence per design that claims only what the design supports:

- one checkpoint per share (the built-in study): the checkpoints are named, and the share's effect
  and the pretraining run's are said to be inseparable; never "changes with the female share";
- 2-3 shares: the female-only vs male-only contrast and "no trend can be estimated";
- 4+ shares with replicated checkpoints: the slope, with its lack-of-fit test;
- a difference not called: "no difference detected" with the design's minimum detectable difference;
- "no change" only from an equivalence test against the config's margin;
- which gender's score moved, with direction words from the metric's own higher-is-better (CER too);
- resamples in which Δrel is undefined are counted and said, not voiding the test;
- two runs that are one run are refused in one line.

Names added by the fix are looked up inside the tests, so each fails on the code before it."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import conditions as cond
from analysis.conditions import compare_and_store, female_share, group_conditions
from analysis.report import write_report
from analysis.scoring import score_utterances
from analysis.seeds import pool_and_store
from corpora.base.errors import UserError
from gendergap.cli import main

REFS = [f"le chat {w} dort sur le tapis {c} ce soir" for w in ("noir", "blanc", "gris", "roux", "petit", "grand")
        for c in ("rouge", "vert")]
SPEAKERS = [f"{g}{i}" for g in "FM" for i in range(6)]
# the built-in study's checkpoints: name -> (female share, pretraining set); FBANK: no pretraining
DEMO = {"F-tiny": (1.0, "female"), "B-tiny": (0.5, "balanced"), "M-tiny": (0.0, "male"), "FBANK": (None, None)}


def _result(rng, metric: str, women: float, men: float, speakers: list[str], zero: tuple = ()) -> dict:
    """A scored run: each word of a speaker's utterance wrong with that gender's rate (and a speaker
    effect); a speaker in ``zero`` gets every word wrong."""
    refs, hyps, spk, gen = [], [], [], []
    for s in speakers:
        rate = 1.0 if s in zero else min(0.95, (women if s[0] == "F" else men) * (1 + 0.3 * (int(s[1:]) - 2.5) / 2.5))
        for ref in REFS:
            words = ["x" if rng.random() < rate else w for w in ref.split()]
            refs.append(ref), hyps.append(" ".join(words)), spk.append(s), gen.append(s[0])
    return score_utterances(metric, refs, hyps, spk, gen, bootstrap=0, seed=0)


def _study(tmp_path: Path, design: dict, seeds: int, *, metric: str = "wer", task: str = "asr-frozen",
           speakers: list[str] = SPEAKERS, zero: tuple = (), run_sd: float = 0.0, seed: int = 5) -> tuple[dict, dict]:
    """Result JSONs per checkpoint and seed (each recording its hypotheses file, as `score` writes
    it), pooled into Table 4's rows (as the seeds step does), and the
    checkpoints' facts as the conditions step passes them. ``design``: checkpoint -> (share, set,
    (women's rate, men's rate)); ``run_sd``: each checkpoint's own shift of its rates (log scale)."""
    rng = np.random.default_rng(seed)
    results = {}
    for ck, (_, _, (women, men)) in design.items():
        shift = float(np.exp(rng.normal(0, run_sd))) if run_sd else 1.0
        results[ck] = []
        for s in range(seeds):
            path = tmp_path / "runs" / ck / f"seed{s}" / f"test.{metric}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            r = _result(rng, metric, women * shift, men * shift, speakers, zero)
            r["inputs"] = {"hyps": {"path": str(path.with_suffix(".hyp.tsv")), "size": 100 + s, "mtime": 0}}
            path.write_text(json.dumps(r))
            results[ck].append(str(path))
        pool_and_store(results[ck], list(range(seeds)), None, str(tmp_path / "results.db"), ck, task, "", "test",
                       100, 0)
    checkpoints = {ck: {"reference": share is None, "set": name, "share": share} for ck, (share, name, _) in
                   design.items()}
    return results, checkpoints


def _demo(rates: dict) -> dict:
    return {ck: (*DEMO[ck], rates[ck]) for ck in rates}


def _sentence(tmp_path: Path, task: str = "asr-frozen") -> str:
    write_report(tmp_path / "results.db", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    return next(line for line in text.splitlines() if line.startswith(f"- **{task}"))


def _test(res: dict, name: str) -> dict:
    return next(t for t in res["tests"] if t["name"] == name)


# women's WER falls as the female share of pretraining grows; men's stays; FBANK has no pretraining
TREND = {"F-tiny": (0.10, 0.30), "B-tiny": (0.20, 0.30), "M-tiny": (0.30, 0.30), "FBANK": (0.40, 0.40)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """Today's built-in design: 3 shares x 1 checkpoint x 3 seeds + FBANK x 3 seeds."""
    tmp = tmp_path_factory.mktemp("conditions")
    results, checkpoints = _study(tmp, _demo(TREND), 3)
    res = compare_and_store(results, None, checkpoints, str(tmp / "results.db"), "asr-frozen", "", bootstrap=1000,
                            seed=0)
    return {"tmp": tmp, "res": res, "sentence": _sentence(tmp), "report": (tmp / "report" / "report.md").read_text()}


def test_conditions_are_shares_and_replicates_join_their_condition():
    named, left_out = group_conditions({"F1": {"share": 1.0, "set": "female"}, "F2": {"share": 1.0, "set": "female"},
                                        "B": {"share": 0.5, "set": None}, "X": {"share": None},
                                        "FBANK": {"reference": True}})
    assert named["F1"] == named["F2"] == ("female", 1.0)
    assert named["B"] == ("50% F", 0.5) and named["FBANK"] == ("FBANK", None) and left_out == ["X"]
    assert female_share({"female_pct": 30.0, "male_pct": 60.0, "unknown_pct": 10.0}) == pytest.approx(1 / 3, abs=1e-4)
    assert female_share({"female_pct": None, "male_pct": 50.0}) is None


def test_one_checkpoint_per_share_names_the_checkpoints_and_claims_no_share_effect(demo):
    res, sentence = demo["res"], demo["sentence"]
    assert res["unit"] == "seed" and res["n_shares"] == 3 and res["primary"] == "female vs male"
    fm = _test(res, "female vs male")
    assert fm["family"] == "primary" and fm["called"]["delta_rel"] and fm["called"]["F"] and not fm["called"]["M"]
    lines = demo["report"].splitlines()
    answer = lines.index("## The answer")
    assert answer < min(i for i, line in enumerate(lines) if line.startswith("## Table"))
    assert "the gap differs between checkpoint F-tiny and checkpoint M-tiny" in sentence, sentence
    assert "the share's effect and the pretraining run's cannot be told apart" in sentence, sentence
    assert "female share of pretraining" not in sentence and "as the share grows" not in sentence, sentence
    assert "no trend can be estimated from 3 shares" in sentence and "slope" not in sentence, sentence
    assert "3 shares x 1 checkpoint x 3 seeds + FBANK x 3 seeds; 6 F, 6 M test speakers" in sentence, sentence
    d, (lo, hi), p = fm["estimate"]["delta_rel"], fm["ci"]["delta_rel"], fm["p_adj"]["delta_rel"]
    assert f"{d:+.1f} (95 % CI {lo:+.1f} to {hi:+.1f}, p {p:.3f})" in sentence, sentence
    # which gender's score moved: women's WER, not men's, and the gap moved in women's favour
    f_lo, f_hi = fm["ci"]["F"]
    assert (f"women's WER is lower by {abs(fm['estimate']['F']):.1f} (CI {f_lo:+.1f} to {f_hi:+.1f}) while men's "
            f"changed by {fm['estimate']['M']:+.1f}") in sentence, sentence
    assert "not detected" in sentence and "more in women's favour with F-tiny" in sentence, sentence


def test_families_mde_gap_and_ratio(demo):
    res = demo["res"]
    fam = {t["name"]: t["family"] for t in res["tests"]}
    assert fam == {"female vs male": "primary", "female vs balanced": "secondary", "balanced vs male": "secondary",
                   "female vs FBANK": "reference", "balanced vs FBANK": "reference", "male vs FBANK": "reference"}
    for t in res["tests"]:
        for k in cond.STATS:
            assert t["mde"][k] is not None and t["mde"][k] > 0 and t["nonfinite"][k] == 0
            if t["family"] == "primary":
                assert t["p_adj"][k] == t["p"][k]
            else:
                assert t["p_adj"][k] >= t["p"][k]
    fm = _test(res, "female vs male")
    female, male = res["conditions"]["female"], res["conditions"]["male"]
    assert fm["estimate"]["gap"] == pytest.approx((female["mean"]["F"] - female["mean"]["M"])
                                                  - (male["mean"]["F"] - male["mean"]["M"]))
    assert female["mean"]["ratio"] == pytest.approx(female["mean"]["F"] / female["mean"]["M"])
    # a condition's Δrel is that of its own F and M columns
    assert female["mean"]["delta_rel"] == pytest.approx(
        200 * (female["mean"]["F"] - female["mean"]["M"]) / (female["mean"]["F"] + female["mean"]["M"]))
    # the follow-up families (secondary, reference) share alpha behind the primary test: 0.025 each, and a
    # secondary test of two is held to 0.025 / 2 at Holm's first step (its MDE: larger than at alpha)
    from analysis.power import mde
    fb = _test(res, "female vs balanced")
    assert fb["family_level"] == 0.025 and _test(res, "male vs FBANK")["family_level"] == 0.025
    assert fb["mde"]["delta_rel"] == pytest.approx(mde(fb["se"]["delta_rel"], fb["df"]["delta_rel"], 0.0125))
    comp = res["components"]
    assert comp["speaker"] > 0 and comp["run"] is None and comp["seed"] is not None and comp["n_seeds"] == 3


def test_the_tables_plot_and_trace_reach_every_cell(demo, capsys):
    report = demo["tmp"] / "report"
    md = (report / "conditions_asr-frozen.md").read_text()
    for header in ("p (primary, at 0.05)", "p Holm (secondary, 2 tests, at 0.025, behind the primary test)",
                   "p Holm (reference, 3 tests, at 0.025, behind the primary test)", "MDE Δrel",
                   "F − M diff (95% CI)", "F/M diff (95% CI)"):
        assert header in md, md
    assert "female vs male" in md and "slope" not in md and "| called |" in md
    assert "Unit: the downstream seed" in demo["report"] and "## Pretraining conditions compared" in demo["report"]
    csv = pd.read_csv(report / "conditions_asr-frozen.csv")
    row = csv[csv["checkpoint"] == "female vs male"].iloc[0]
    fm = _test(demo["res"], "female vs male")
    assert row["family"] == "primary" and row["delta_rel_mde"] == pytest.approx(fm["mde"]["delta_rel"])
    assert row["gap"] == pytest.approx(fm["estimate"]["gap"])
    assert row["ratio_low"] == pytest.approx(fm["ci"]["ratio"][0])
    assert (report / "trend_asr-frozen.png").is_file()
    assert main(["trace", "--report", str(report), "conditions_asr-frozen", "female vs male", "Δrel diff"]) == 0
    out = capsys.readouterr().out
    assert "female vs male asr-frozen conditions delta_rel wer:diff" in out and "conditions" in out
    assert f"= {fm['estimate']['delta_rel']:.4f}" in out


FLAT = {ck: (0.25, 0.30) for ck in ("F-tiny", "B-tiny", "M-tiny")}


def test_not_called_says_what_the_design_detects_and_no_change_needs_a_margin(tmp_path):
    results, checkpoints = _study(tmp_path, _demo(FLAT), 3)
    db = str(tmp_path / "results.db")
    res = compare_and_store(results, None, checkpoints, db, "asr-frozen", "", bootstrap=400, seed=0)
    fm = _test(res, res["primary"])
    assert not fm["called"]["delta_rel"] and fm["equivalent"]["delta_rel"] is None
    sentence = _sentence(tmp_path)
    assert (f"no difference detected (this design detects differences of {fm['mde']['delta_rel']:.1f} points or "
            "more)") in sentence, sentence
    assert "no change" not in sentence and "cannot be told apart" in sentence, sentence
    # a margin the difference is shown to lie within: "no change", from the equivalence test
    compare_and_store(results, None, checkpoints, db, "asr-frozen", "", bootstrap=400, seed=0, margin=500.0)
    sentence = _sentence(tmp_path)
    assert "no change: " in sentence and "within ±500.0 points, the margin the config states" in sentence, sentence
    # a margin too tight to show: not detected, and not shown equivalent either
    res = compare_and_store(results, None, checkpoints, db, "asr-frozen", "", bootstrap=400, seed=0, margin=0.5)
    assert _test(res, res["primary"])["equivalent"]["delta_rel"] is False
    sentence = _sentence(tmp_path)
    assert "no difference detected" in sentence and "not shown equivalent within ±0.5 points either" in sentence
    assert "no change" not in sentence


def _five_by_two(slope: float) -> dict:
    """5 shares x 2 checkpoints: women's WER falls by ``slope`` per unit of share."""
    return {f"s{int(100 * s)}-{r}": (s, f"s{int(100 * s)}", (0.30 - slope * s, 0.30))
            for s in (0.0, 0.25, 0.5, 0.75, 1.0) for r in (1, 2)}


def test_five_shares_two_checkpoints_give_a_slope_with_its_lack_of_fit(tmp_path):
    results, checkpoints = _study(tmp_path, _five_by_two(0.2), 1, run_sd=0.05)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "",
                            bootstrap=1000, seed=0)
    assert res["unit"] == "checkpoint" and res["n_shares"] == 5 and res["primary"] == cond.SLOPE
    slope, curve = _test(res, cond.SLOPE), _test(res, cond.CURVATURE)
    assert curve["family"] == "secondary" and curve["family_size"] == 11 and slope["df"]["delta_rel"] is not None
    assert res["components"]["run"] is not None and res["components"]["seed"] is None
    assert res["conditions"]["s50"]["n_checkpoints"] == 2 and res["conditions"]["s50"]["n_runs"] == 2
    assert slope["called"]["delta_rel"] and slope["estimate"]["delta_rel"] < 0
    sentence = _sentence(tmp_path)
    assert "the gap changes with the female share of pretraining: Δrel slope over the female share" in sentence
    assert f"{slope['estimate']['delta_rel']:+.1f} per 10 points" in sentence, sentence
    assert f"lack of fit (curvature) {curve['estimate']['delta_rel']:+.1f} points, Holm p" in sentence, sentence
    assert "5 shares x 2 checkpoints x 1 seed; 6 F, 6 M test speakers" in sentence and "told apart" not in sentence
    # the pretraining run's own spread, the unit's variance component, in points
    run_sd = math.sqrt(res["components"]["run"])
    assert f"Δrel's sd between pretraining runs of a share, beyond the speakers': {run_sd:.1f} points" in sentence
    assert "per 10 points of share, women's WER is lower by" in sentence, sentence
    md = (tmp_path / "report" / "conditions_asr-frozen.md").read_text()
    assert ("lack of fit (curvature)" in md and "p Holm (secondary, 11 tests, at 0.05, behind the primary test)" in md
            and "Unit: the pretraining run" in (tmp_path / "report" / "report.md").read_text())
    assert (tmp_path / "report" / "trend_asr-frozen.png").is_file()


def test_a_one_run_study_says_it_cannot_answer(tmp_path):
    results, checkpoints = _study(tmp_path, _demo(TREND), 1)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-e2e", "", bootstrap=200,
                            seed=0)
    assert res["unit"] is None and all(t["status"] == cond.ONE_RUN for t in res["tests"])
    sentence = _sentence(tmp_path, "asr-e2e")
    assert "cannot answer: each condition was trained once" in sentence, sentence
    assert cond.ONE_RUN in (tmp_path / "report" / "conditions_asr-e2e.md").read_text()
    assert "called" not in sentence and "no change" not in sentence


def test_one_share_against_fbank_says_the_share_effect_cannot_be_estimated(tmp_path):
    """The quickstart's study: one pretrained model and FBANK. No share comparison exists; the
    sentence gives the comparison with the reference and says the share's effect is not estimable."""
    design = {"MyW2V2": (0.5, None, (0.20, 0.30)), "FBANK": (None, None, (0.40, 0.40))}
    results, checkpoints = _study(tmp_path, design, 2)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "", bootstrap=400,
                            seed=0)
    assert res["primary"] is None and [t["family"] for t in res["tests"]] == ["reference"]
    t = res["tests"][0]
    assert (t["name"] == "50% F vs FBANK" and t["status"] == "compared"
            and t["p_adj"]["delta_rel"] == t["p"]["delta_rel"])
    sentence = _sentence(tmp_path)
    assert ("one female share of pretraining, so the share's effect cannot be estimated; against the reference "
            "without pretraining, ") in sentence, sentence
    assert "50% F vs FBANK" in sentence and "trend" not in sentence and "female share of pretraining:" not in sentence


@pytest.mark.parametrize("metric, task, moved", [("cer", "asr-frozen", "women's CER is lower by"),
                                                 ("bleu", "st", "women's BLEU is higher by")])
def test_direction_words_follow_the_metric_cer_included(tmp_path, metric, task, moved):
    """Fewer errors for women under female pretraining is the gap moving in women's favour, whether
    the score is an error rate (CER: the words once came from `m == "wer"`, backwards for CER) or a
    score where higher is better (BLEU, whose Δrel then rises)."""
    results, checkpoints = _study(tmp_path, _demo({k: TREND[k] for k in ("F-tiny", "B-tiny", "M-tiny")}), 3,
                                  metric=metric, task=task)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), task, "", bootstrap=400, seed=0)
    fm = _test(res, res["primary"])
    assert fm["called"]["delta_rel"] and (fm["estimate"]["delta_rel"] > 0) == (metric == "bleu")
    sentence = _sentence(tmp_path, task)
    assert "more in women's favour with F-tiny" in sentence and moved in sentence, sentence


def test_undefined_resamples_are_counted_and_said(tmp_path):
    """BLEU on 2 speakers per gender, one of each translated all wrong: in about 1 resample in 16 both
    genders' BLEU is 0 and Δrel is undefined there. The test is still made, the count is said."""
    speakers = ["F0", "F1", "M0", "M1"]
    rates = {"F-tiny": (0.05, 0.3), "B-tiny": (0.15, 0.3), "M-tiny": (0.3, 0.3)}
    results, checkpoints = _study(tmp_path, _demo(rates), 3, metric="bleu", task="st", speakers=speakers,
                                  zero=("F0", "M0"))
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "st", "", bootstrap=400, seed=0)
    fm = _test(res, res["primary"])
    n = fm["nonfinite"]["delta_rel"]
    assert 0 < n < 200 and fm["ci"]["delta_rel"] is not None and fm["p"]["delta_rel"] is not None
    assert fm["nonfinite"]["ratio"] > n   # F/M is undefined whenever men's BLEU is 0
    sentence = _sentence(tmp_path, "st")
    assert f"; {n} resamples with an undefined Δrel left out" in sentence, sentence
    assert "scored 0" not in sentence and "BLEU" in sentence


def test_an_undefined_gap_is_stored_as_missing_and_said(tmp_path):
    """A condition whose runs score 0 for both genders has no Δrel: its rows are left out, nothing
    non-finite is stored, and the answer says why it cannot answer."""
    rates = {"F-tiny": (0.0, 0.0), "B-tiny": (0.2, 0.3), "M-tiny": (0.3, 0.3)}
    results, checkpoints = _study(tmp_path, _demo(rates), 2)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "",
                            bootstrap=200, seed=0)
    assert res["conditions"]["female"]["mean"]["delta_rel"] is None
    fm = _test(res, "female vs male")
    assert fm["estimate"]["delta_rel"] is None and fm["estimate"]["all"] < 0
    assert "cannot answer: Δrel is undefined for a condition" in _sentence(tmp_path)
    assert "| female vs balanced | – |" in (tmp_path / "report" / "conditions_asr-frozen.md").read_text()


@pytest.mark.parametrize("how", ["same file twice", "a copy", "same checkpoint file"])
def test_two_runs_that_are_one_run_are_refused(tmp_path, how):
    """A replicate that is a copy of a run (or of a checkpoint) would make a difference look replicated."""
    design = {**_demo({k: TREND[k] for k in ("F-tiny", "M-tiny")}), "F-tiny-2": (1.0, "female", TREND["F-tiny"])}
    results, checkpoints = _study(tmp_path, design, 2)
    if how == "same file twice":
        results["F-tiny-2"] = list(results["F-tiny"])
    elif how == "a copy":
        copy = tmp_path / "copy.json"
        shutil.copy(results["F-tiny"][1], copy)
        results["F-tiny-2"][0] = str(copy)
    else:
        for ck, name in (("F-tiny", "a.pt"), ("F-tiny-2", "b.pt")):
            (tmp_path / name).write_bytes(b"the same weights")
            checkpoints[ck]["path"] = str(tmp_path / name)
    with pytest.raises(UserError) as e:
        compare_and_store(results, None, checkpoints, str(tmp_path / "c.db"), "asr-frozen", "", bootstrap=100, seed=0)
    msg = str(e.value)
    assert "\n" not in msg and ("the same run counted twice" in msg or "are the same file" in msg), msg
    assert not (tmp_path / "c.db").exists()
    if how == "same checkpoint file":   # distinct files of distinct checkpoints are replicates
        (tmp_path / "b.pt").write_bytes(b"other weights....")
        res = compare_and_store(results, None, checkpoints, str(tmp_path / "c.db"), "asr-frozen", "", bootstrap=100,
                                seed=0)
        assert res["conditions"]["female"]["n_checkpoints"] == 2 and res["unit"] == "checkpoint"


CONFIG = """\
name: t
corpus: {synth: tiny}
checkpoints:
  F-tiny: {shipped: tiny-female}
  M-tiny: {shipped: tiny-male}
tasks:
  asr-frozen: {corpus: synth-fr, seeds: [0, 1]}
report:
  equivalence_margin: %s
"""


def test_the_margin_is_a_config_key_that_reaches_the_step(tmp_path):
    from gendergap.config import load_config
    from gendergap.plan import plan_jobs

    path = tmp_path / "study.yaml"
    path.write_text(CONFIG % "10", encoding="utf-8")
    step = next(s for s in plan_jobs(load_config(path), tmp_path / "o") if s.name == "conditions:asr-frozen")
    assert step.equivalence_margin == 10
    for bad in ("0", "-5", ".nan"):
        path.write_text(CONFIG % bad, encoding="utf-8")
        with pytest.raises(UserError) as e:
            load_config(path)
        assert str(e.value).startswith(f"{path}:9: 'report.equivalence_margin'") and "\n" not in str(e.value), e.value


def test_a_slope_not_detected_says_its_mde_per_10_points_and_over_the_span(tmp_path):
    """No effect planted: "no slope detected", with the slope the design detects per 10 points of
    share and the same read as a difference between the lowest and the highest share."""
    results, checkpoints = _study(tmp_path, _five_by_two(0.0), 1, run_sd=0.05)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "",
                            bootstrap=1000, seed=0)
    slope = _test(res, cond.SLOPE)
    assert not slope["called"]["delta_rel"]
    mde = slope["mde"]["delta_rel"]
    sentence = _sentence(tmp_path)
    assert (f"no slope detected (this design detects slopes of {mde:.1f} Δrel points per 10 points of share or "
            f"more, {10 * mde:.1f} from 0 to 100 % female)") in sentence, sentence


def test_speech_of_unknown_gender_is_said_beside_the_share_never_folded_into_it(tmp_path):
    """LeBenchmark's 7K model: 13.4 % F, 23.9 % M, 62.6 % U (Table 3). Its share is F/(F+M) of the
    speech of known gender, and the report says so with its U beside it, in the table, the note and
    the CSV; a condition without U keeps a plain share."""
    design = {"F-1K": (1.0, None, (0.10, 0.30)), "M-1K": (0.0, None, (0.30, 0.30)),
              "LB-7K": (female_share({"female_pct": 13.4, "male_pct": 23.9}), None, (0.2, 0.3))}
    results, checkpoints = _study(tmp_path, design, 2)
    checkpoints["LB-7K"].update(female_pct=13.4, unknown_pct=62.6)
    checkpoints["F-1K"].update(female_pct=100.0, unknown_pct=0.0)
    res = compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "",
                            bootstrap=200, seed=0)
    name = next(n for n, c in res["conditions"].items() if c["share"] and 0 < c["share"] < 1)
    assert name == "36% F" and res["conditions"][name]["unknown_pct"] == pytest.approx(62.6)
    write_report(tmp_path / "results.db", tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith(f"| {name} |"))
    assert "| 36 (U 63) |" in row, row
    assert "| 100 |" in next(line for line in report.splitlines() if line.startswith("| 100% F |"))
    assert "F/(F+M) of each condition's pretraining speech of known gender" in report
    csv = pd.read_csv(tmp_path / "report" / "conditions_asr-frozen.csv")
    got = csv.set_index("checkpoint")["unknown_share"]
    assert got[name] == pytest.approx(62.6) and got["100% F"] == 0.0
    # the dry run's line for such a checkpoint gives the range its share of all speech stands for
    note = cond.unknown_share_note("LB-7K-Large", {"female_pct": 13.4, "male_pct": 23.9, "unknown_pct": 62.6})
    assert note == ("LB-7K-Large: 35.9 % F of its speech of known gender; 62.6 % of its speech is of unknown "
                    "gender, so its female share of all its speech is 13.4-76 %")
    assert cond.unknown_share_note("F", {"female_pct": 100, "male_pct": 0, "unknown_pct": 0}) is None
