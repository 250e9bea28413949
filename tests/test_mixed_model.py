"""The per-utterance mixed model (analysis.mixed_model, fitted by glmmTMB in R): planted effects
recovered, a model that cannot be fitted or R that is missing reported in one line, and the
report's section with its traceable cells."""
from __future__ import annotations

import math
import shutil

import numpy as np
import pandas as pd
import pytest

from analysis.mixed_model import FAMILY, Z95, ModelUnavailable, fit_problems, fit_study, run_glmm, summarise

needs_r = pytest.mark.skipif(shutil.which("Rscript") is None,
                             reason="R is not installed (scripts/install_r.sh installs it as root: "
                                    "r-base-core r-cran-glmmtmb)")
TRUE_GENDER = -0.30     # log female/male error-rate ratio planted
TRUE_PITCH = 0.40       # log error-rate ratio per octave of median F0 planted


def simulate(seed: int, n_spk: int = 12, n_utt: int = 17, runs: int = 6) -> pd.DataFrame:
    """Per-utterance error counts of ``runs`` pretraining runs on 2 x ``n_spk`` speakers, with the
    built-in corpus's shape: women's and men's median F0 apart (no overlap), a speaker, a run and a
    speaker-by-run intercept, Poisson errors on Poisson-ish reference lengths."""
    rng = np.random.default_rng(seed)
    spk = pd.DataFrame({"speaker": [f"s{i}" for i in range(2 * n_spk)], "female": [1] * n_spk + [0] * n_spk})
    spk["log2f0"] = np.where(spk["female"] == 1, rng.normal(np.log2(205), 0.2, 2 * n_spk),
                             rng.normal(np.log2(105), 0.15, 2 * n_spk))
    spk["u"] = rng.normal(0, 0.25, 2 * n_spk)
    rows = []
    centre = spk["log2f0"].mean()
    for r in range(runs):
        u_run = rng.normal(0, 0.1)
        for s in spk.itertuples():
            u_sr = rng.normal(0, 0.05)
            words = rng.poisson(6, n_utt) + 3
            # the utterance's own F0 moves around the speaker's
            pitch = s.log2f0 + rng.normal(0, 0.05, n_utt) - centre
            eta = -1.0 + TRUE_GENDER * s.female + TRUE_PITCH * pitch + s.u + u_run + u_sr
            errors = rng.poisson(words * np.exp(eta))
            rows.append(pd.DataFrame({"errors": errors, "words": words, "female": s.female, "pitch": pitch,
                                      "speaker": s.speaker, "run": f"r{r}", "speaker_run": f"{s.speaker}@r{r}"}))
    return pd.concat(rows, ignore_index=True)


def recovery_fit(fid: str, data: str) -> dict:
    return {"id": fid, "data": data, "family": FAMILY, "fixed": "errors ~ female + pitch + offset(log(words))",
            "random": {"speaker": "(1 | speaker)", "run": "(1 | run)", "speaker_run": "(1 | speaker_run)"},
            "keep": ["speaker"], "contrasts": {}, "factors": ["speaker", "run", "speaker_run"]}


def covered(fit: dict, term: str, truth: float) -> bool:
    b, se = fit["coef"][term], fit["se"][term]
    return b - Z95 * se <= truth <= b + Z95 * se


@needs_r
def test_planted_gender_and_pitch_effects_are_recovered_on_one_fixture():
    """One simulated study (seed 0): both planted effects inside their 95 % CIs, the fit converged,
    and the estimates near the truth (the study's scale of noise: within 0.25 on the log scale)."""
    out = run_glmm({"sim0": simulate(0)}, [recovery_fit("sim0", "sim0")])
    fit = out["fits"]["sim0"]
    assert not fit.get("error") and fit["pd_hessian"], fit
    assert covered(fit, "female", TRUE_GENDER) and covered(fit, "pitch", TRUE_PITCH), (fit["coef"], fit["se"])
    assert abs(fit["coef"]["female"] - TRUE_GENDER) < 0.25 and abs(fit["coef"]["pitch"] - TRUE_PITCH) < 0.25
    assert out["versions"]["glmmTMB"]


@pytest.mark.long
@needs_r
def test_ci_coverage_over_200_simulations_is_nominal():
    """200 simulated studies fitted in one R process: the 95 % Wald CIs of the gender and the pitch
    effect each cover the planted value in 90-99 % of them (a few seconds each at most)."""
    n = 200
    frames = {f"sim{i}": simulate(1000 + i) for i in range(n)}
    out = run_glmm(frames, [recovery_fit(k, k) for k in frames], timeout=3600)
    fits = [out["fits"][k] for k in frames]
    ok = [f for f in fits if not f.get("error") and f["pd_hessian"]]
    assert len(ok) >= 0.95 * n
    gender = np.mean([covered(f, "female", TRUE_GENDER) for f in ok])
    pitch = np.mean([covered(f, "pitch", TRUE_PITCH) for f in ok])
    seconds = max(f["seconds"] for f in fits)
    print(f"coverage over {len(ok)} fits: gender {gender:.3f}, pitch {pitch:.3f}; slowest fit {seconds:.1f} s")
    assert 0.90 <= gender <= 0.99 and 0.90 <= pitch <= 0.99
    assert seconds < 10


def test_missing_r_is_one_line(monkeypatch, tmp_path):
    """Without Rscript on PATH no model is fitted: ModelUnavailable, one line saying how to install."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ModelUnavailable) as e:
        run_glmm({"x": simulate(0, n_spk=2, n_utt=3, runs=1)}, [recovery_fit("x", "x")])
    assert "\n" not in str(e.value) and "r-cran-glmmtmb" in str(e.value)


@needs_r
def test_a_model_that_cannot_be_fitted_is_one_line_each():
    """A formula naming a column the data lack cannot be fitted: the fit carries R's error and
    fit_problems gives one line for it; the summary keeps the other fits' numbers."""
    d = simulate(2, n_spk=4, n_utt=5, runs=2).assign(cond="c0", seed="s", run_gap="r")
    bad = recovery_fit("bad", "d") | {"fixed": "errors ~ female + no_such_column + offset(log(words))"}
    good = recovery_fit("good", "d") | {"contrasts": {"female": {"female": 1}}}
    out = run_glmm({"d": d}, [bad, good])
    lines = fit_problems(out["fits"]["bad"], "asr, the model by condition")
    assert len(lines) == 1 and lines[0].startswith("asr, the model by condition: could not be fitted (")
    assert "no_such_column" in lines[0] and "\n" not in lines[0]
    assert out["fits"]["good"]["pd_hessian"] and math.isfinite(out["fits"]["good"]["contrasts"]["female"]["estimate"])


@needs_r
def test_a_zero_variance_term_is_dropped_and_said():
    """A run effect that is not there (every run the same) is estimated at 0: the fit is repeated
    without it where it keeps the Hessian from being positive definite, and a line says so."""
    d = simulate(3, runs=4)
    rng = np.random.default_rng(3)
    d["errors"] = rng.poisson(d["words"] * np.exp(-1.0 - 0.3 * d["female"]))  # no speaker, run, speaker-run effect
    out = run_glmm({"d": d}, [recovery_fit("d", "d")])
    fit = out["fits"]["d"]
    lines = fit_problems(fit, "asr")
    assert fit["pd_hessian"], fit
    assert lines and all("\n" not in ln for ln in lines)
    assert any("dropped" in ln or "singular" in ln for ln in lines), lines
    assert covered(fit, "female", -0.3)


def test_summary_reads_ratios_and_says_what_it_could_not():
    """summarise: exp of the contrasts with Wald CIs; a fit without a positive-definite Hessian gives
    no ratio and a problem line."""
    fits = {"t|condition|raw": {"contrasts": {"female": {"estimate": math.log(0.8), "se": 0.1}},
                                "pd_hessian": True, "convergence": 0, "re_sd": {"speaker": 0.3}, "seconds": 1.0},
            "t|condition|adjusted": {"contrasts": {"female": {"estimate": 0.0, "se": 0.2}}, "coef": {"pitch": 0.1},
                                     "se": {"pitch": 0.05}, "pd_hessian": False, "convergence": 0,
                                     "re_sd": {"speaker": 0.3}, "seconds": 2.0}}
    s = summarise("t", fits, {"female": "c0"}, ["pitch"], {})
    raw = s["ratios"]["female"]["raw"]
    assert raw["ratio"] == pytest.approx(0.8) and raw["low"] == pytest.approx(0.8 * math.exp(-Z95 * 0.1))
    assert s["ratios"]["female"]["adjusted"] is None and s["voice"] == {}
    assert s["problems"] == ["t, the model by condition with the voice measures: did not converge "
                             "(non-positive-definite Hessian): its CIs are not to be trusted"]
    assert s["seconds"] == 3.0


def test_bleu_tasks_get_the_reason_not_a_model(tmp_path):
    """A BLEU result is no count with an exposure: fit_study says so and fits nothing."""
    import json
    r = {"metric": "bleu", "stat_names": ["sys_len"], "totals": {"all": [1]}}
    (tmp_path / "r.json").write_text(json.dumps(r))
    m = pd.DataFrame({"id": ["u"], "speaker": ["s"], "gender": ["F"], "f0_median_hz": [200.0], "rate_wps": [3.0],
                      "speech_s": [1.0], "snr_db": [20.0]})
    out = fit_study({"st": {"results": {"A": [str(tmp_path / "r.json")]}, "conditions": {"A": ("female", 1.0)},
                            "measures": "m"}}, {"m": m})
    assert out["tasks"]["st"]["status"] == "not modelled" and "BLEU is not a count" in out["tasks"]["st"]["reason"]


TEXTS = [f"le chat {w} dort sur le tapis {c} ce soir" for w in ("noir", "blanc", "gris") for c in ("rouge", "vert")]
F0 = {**{f"F{i}": 180 + 15 * i for i in range(6)}, **{f"M{i}": 90 + 8 * i for i in range(6)}}
# checkpoint -> (female share, pretraining set, (women's word error rate, men's)); FBANK: no pretraining
STUDY = {"F-1": (1.0, "female", (0.10, 0.30)), "F-2": (1.0, "female", (0.12, 0.30)),
         "B-1": (0.5, "balanced", (0.20, 0.30)), "B-2": (0.5, "balanced", (0.18, 0.30)),
         "M-1": (0.0, "male", (0.30, 0.30)), "M-2": (0.0, "male", (0.28, 0.30)), "FBANK": (None, None, (0.35, 0.35))}


def _scored_study(tmp_path):
    """Each checkpoint's hypotheses (words wrong at its gender's rate), scored by analysis.scoring as
    a study scores them; the test set's voice measures; the registry with the female shares."""
    import json

    from analysis.scoring import score_files
    from analysis.seeds import pool_and_store
    from corpora.voice_measures import write_measures
    rng = np.random.default_rng(7)
    ids = [f"{s}-{j}" for s in F0 for j in range(len(TEXTS))]
    who = pd.DataFrame({"id": ids, "speaker": [i.split("-")[0] for i in ids], "gender": [i[0] for i in ids]})
    refs = tmp_path / "test.ref.tsv"
    refs.write_text("".join(f"{i}\t{TEXTS[int(i.split('-')[1])]}\n" for i in ids))
    results = {}
    for ck, (_, _, (women, men)) in STUDY.items():
        results[ck] = []
        for seed in range(2 if ck == "FBANK" else 1):
            hyps = tmp_path / ck / f"seed{seed}" / "test.hyp.tsv"
            hyps.parent.mkdir(parents=True)
            lines = []
            for i in ids:
                rate = women if i[0] == "F" else men
                words = ["x" if rng.random() < rate else w for w in TEXTS[int(i.split("-")[1])].split()]
                lines.append(f"{i}\t{' '.join(words)}\n")
            hyps.write_text("".join(lines))
            res = score_files("wer", refs, hyps, who, bootstrap=0)
            path = hyps.with_name("test.wer.json")
            path.write_text(json.dumps(res))
            results[ck].append(str(path))
        pool_and_store(results[ck], list(range(len(results[ck]))), None, str(tmp_path / "results.db"), ck,
                       "asr-frozen", "", "test", 100, 0)
    m = who.assign(duration_s=2.0, speech_s=[1.6 + 0.05 * (k % 5) for k in range(len(ids))],
                   f0_median_hz=[F0[s] * (1 + 0.01 * (k % 3)) for k, s in enumerate(who["speaker"])],
                   f0_p10_hz=np.nan, f0_p90_hz=np.nan, f0_range_st=3.0, voiced_frac=0.8, words=9.0,
                   rate_wps=[9 / (1.6 + 0.05 * (k % 5)) for k in range(len(ids))], level_dbfs=-20.0,
                   snr_db=[20.0 + (k % 4) for k in range(len(ids))])
    measures = write_measures(m, tmp_path / "measures.tsv")
    registry = tmp_path / "checkpoints.json"
    registry.write_text(json.dumps({"checkpoints": [
        {"name": ck, "path": f"{ck}.pt", "kind": "fairseq", "female_pct": 100 * sh, "male_pct": 100 - 100 * sh}
        for ck, (sh, _, _) in STUDY.items() if sh is not None]}))
    return results, str(measures), str(registry)


@needs_r
def test_the_study_step_fits_stores_reports_and_every_cell_traces(tmp_path, capsys):
    """The mixed-model step on scored runs of three shares x two runs and FBANK x two seeds: the
    report's section with F/M per condition before and after the voice measures, the trend row, the
    model notes, the F0 plot and an ST task's reason; a cell of its table traced to its score row."""
    from analysis.mixed_model import NOT_COUNTS
    from analysis.report import write_report
    from analysis.trace import cell_score_ids, trace_scores
    from gendergap.steps.mixed import MixedModelStep
    results, measures, registry = _scored_study(tmp_path)
    step = MixedModelStep(
        name="mixed-model", registry=registry, db=str(tmp_path / "results.db"), out=str(tmp_path / "mm.json"),
        blocks={"asr-frozen": {"task": "asr-frozen", "pair": "", "results": results, "result_key": None,
                               "sets": {ck: s for ck, (_, s, _) in STUDY.items()}, "references": ["FBANK"],
                               "measures": measures}},
        not_modelled={"st:fr-en": {"task": "st", "pair": "fr-en", "reason": NOT_COUNTS.format(metric="BLEU")}})
    step.run()
    printed = capsys.readouterr().out
    assert "asr-frozen: fitted" in printed and "st:fr-en: not modelled" in printed
    write_report(tmp_path / "results.db", tmp_path / "report")
    md = (tmp_path / "report" / "report.md").read_text()
    section = md[md.index("## The gap by utterance"):]
    assert "| female | 0." in section and "| FBANK | " in section and "| trend | " in section
    assert "F/M after voice" in section and "| pitch | octave of median F0 |" in section
    assert "No model: BLEU is not a count with an exposure" in section
    assert "do not overlap" in section and "Model notes" in section
    assert (tmp_path / "report" / "f0_asr-frozen.png").stat().st_size > 10_000
    table = pd.read_csv(tmp_path / "report" / "mixed_asr-frozen.csv").set_index("checkpoint")
    assert table.loc["female", "ratio"] < table.loc["male", "ratio"] < 1.2          # the planted gaps
    assert table.loc["female", "ratio_high"] < 1 and table.loc["trend", "ratio"] < 1
    ids = cell_score_ids(tmp_path / "report", "mixed_asr-frozen", "female", "ratio adjusted")
    chain = trace_scores(tmp_path / "results.db", ids)
    row = chain["scores"][0]
    assert row["metric"] == "wer:rate_ratio_adjusted" and row["value"] == pytest.approx(
        table.loc["female", "ratio_adjusted"])
    assert "glmmTMB" in row["signature"] and chain["runs"][0]["kind"] == "mixed-model"


def test_the_built_in_study_measures_its_test_set_once_and_models_each_asr_task():
    """configs/mini.yaml's graph: one voice-measures step (the French test set both ASR tasks score),
    one mixed-model step after every compared row with the ASR tasks to fit and the ST tasks' reason,
    and the report after it."""
    from gendergap.config import CONFIG_DIR, load_config
    from gendergap.plan import plan_jobs
    jobs = {j.name: j for j in plan_jobs(load_config(CONFIG_DIR / "mini.yaml"), "/tmp/never-written")}
    measures = [j for j in jobs.values() if j.kind == "voice-measures"]
    assert [(m.corpus, m.split) for m in measures] == [("synth-fr", "test")]
    mixed = jobs["mixed-model"]
    assert sorted(mixed.blocks) == ["asr-e2e", "asr-frozen"]
    assert sorted(mixed.not_modelled) == ["gender-st:en-fr", "st:fr-en"]
    assert all("BLEU is not a count" in b["reason"] for b in mixed.not_modelled.values())
    assert len(mixed.blocks["asr-frozen"]["results"]) == 10          # nine pretraining runs and FBANK
    assert len(mixed.blocks["asr-frozen"]["results"]["FBANK"]) == 3  # its three training seeds
    assert measures[0].name in mixed.deps and "mixed-model" in jobs["report"].deps
