"""A study's design cannot leak or over-claim (issue 60, parts 5 and 6, analysis side):

- no task or selection trains or validates on the split it tests on, and a misspelt split key is
  refused, in one line naming the config's file and line, by load_config and the dry run alike;
- pretraining conditions are compared only on 2+ test speakers of each gender (else "not compared",
  with the reason, in the table and in the answer sentence: no CI, no call);
- an undefined Δrel (BLEU 0 for both genders) does not fail the conditions step, and a condition
  whose mean lies outside its percentile CI does not fail the trend plot;
- a resample count is bounded (MAX_RESAMPLES) wherever one is read: `score --bootstrap`, `score
  compare --resamples`, the model commands' --bootstrap, a config's `report: bootstrap`;
- a sacrebleu tokeniser that downloads a model is refused before anything runs, from the command
  line and from a handed result JSON's options, and nothing is written under the home folder.

Names added by the fix are looked up inside the tests, so each test fails on the code before it
on its own finding.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from analysis import conditions as cond
from analysis.conditions import Condition, compare_and_store, compare_conditions, female_share
from analysis.metrics import get_metric
from analysis.report import write_report
from analysis.scoring import score_utterances
from analysis.seeds import pool_and_store
from cli_helpers import run_fresh
from corpora.base.errors import UserError
from gendergap.config import load_config
from scoring_data import make_corpus, write_inputs

WER = get_metric("wer")
SHARES = {"F-tiny": (100.0, 0.0, "female"), "B-tiny": (50.0, 50.0, "balanced"), "M-tiny": (0.0, 100.0, "male")}

# --- part 5: splits ------------------------------------------------------------------------------

GOOD = """\
name: t
corpus: {synth: tiny}
checkpoints:
  F-tiny: {shipped: tiny-female}
  M-tiny: {shipped: tiny-male}
selections:
  bal: {corpus: synth-fr, gender: balanced}
tasks:
  asr-frozen: {corpus: synth-fr, overrides: [max_steps=2]}
  st: {corpus: synth-fr, pairs: [fr-en], checkpoints: [F-tiny]}
"""


def _config(tmp_path: Path, old: str, new: str) -> Path:
    assert old in GOOD
    path = tmp_path / "study.yaml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    return path


LEAKS = [   # (old, new, line, words)
    ("overrides: [max_steps=2]}", "overrides: [max_steps=2], splits: {train: test}}", 9,
     ["task 'asr-frozen'", "splits.train is the test split 'test'", "trained on"]),
    ("pairs: [fr-en], checkpoints", "pairs: [fr-en], splits: {valid: test}, checkpoints", 10,
     ["task 'st'", "splits.valid is the test split 'test'", "validated on"]),
    # the test split renamed: still the rows tested on
    ("overrides: [max_steps=2]}", "overrides: [max_steps=2], splits: {train: dev, valid: dev2, test: dev}}", 9,
     ["splits.train is the test split 'dev'"]),
    # a block mapping: the line of its `splits:` key
    ("{corpus: synth-fr, overrides: [max_steps=2]}",
     "\n    corpus: synth-fr\n    splits:\n      train: test\n      valid: test",
     11, ["splits.train and splits.valid are the test split 'test'"]),
    ("gender: balanced}", "gender: balanced, splits: {train: test}}", 7,
     ["'selections.bal.splits'", "splits.train is the test split 'test'"]),
]


@pytest.mark.parametrize("old, new, line, words", LEAKS)
def test_no_task_or_selection_trains_or_validates_on_its_test_split(tmp_path, old, new, line, words):
    path = _config(tmp_path, old, new)
    with pytest.raises(UserError) as e:
        load_config(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}:{line}: ") and "\n" not in msg, msg
    for w in words:
        assert w in msg, msg


def test_the_dry_run_refuses_a_leaking_split_in_one_line(tmp_path, capfd):
    path = _config(tmp_path, *LEAKS[0][:2])
    rc, out, err = run_fresh(capfd, "sweep", "--config", path, "--out", tmp_path / "o", "--dry-run")
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"gendergap: error: {path}:9: "), err
    assert "test split" in err[0] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("old, new, line, key, close", [
    ("overrides: [max_steps=2]}", "overrides: [max_steps=2], splits: {trian: train}}", 9, "trian", "train"),
    ("gender: balanced}", "gender: balanced, splits: {tset: test}}", 7, "tset", "test"),
])
def test_a_misspelt_split_key_is_refused(tmp_path, capfd, old, new, line, key, close):
    path = _config(tmp_path, old, new)
    rc, out, err = run_fresh(capfd, "sweep", "--config", path, "--out", tmp_path / "o", "--dry-run")
    assert rc == 2 and len(err) == 1 and err[0].startswith(f"gendergap: error: {path}:{line}: "), err
    assert f"unknown key '{key}'" in err[0] and f"did you mean '{close}'" in err[0], err


def test_a_split_mapping_renames_only_the_roles_it_names(tmp_path):
    """`splits: {valid: dev}` keeps train and test: the task's data export has all three roles."""
    cfg = load_config(_config(tmp_path, "overrides: [max_steps=2]}", "overrides: [max_steps=2], splits: {valid: dev}}"))
    assert cfg.tasks["asr-frozen"]["splits"] == {"train": "train", "valid": "dev", "test": "test"}
    assert cfg.tasks["st"]["splits"] == {"train": "train", "valid": "valid", "test": "test"}


# --- part 5: conditions need 2+ test speakers of each gender ---------------------------------------

def _runs(rng, n_f: int, n_m: int, rate_f: float, seeds: int = 3) -> tuple:
    """WER statistics (hits, sub, del, ins, words) per speaker, one dict per seed."""
    runs = []
    for _ in range(seeds):
        run = {}
        for g, n, p in (("F", n_f, rate_f), ("M", n_m, 0.3)):
            words = rng.integers(200, 300, n)
            errors = rng.binomial(words, p * np.exp(rng.normal(0, 0.1)))
            zeros = np.zeros_like(errors)
            run[g] = np.stack([words - errors, errors, zeros, zeros, words], 1).astype(np.int64)
        runs.append(run)
    return tuple(runs)


@pytest.mark.parametrize("n_f, n_m", [(1, 5), (5, 1), (1, 1)])
def test_one_test_speaker_of_a_gender_gives_no_interval_and_no_call(n_f, n_m):
    rng = np.random.default_rng(3)
    conds = [Condition(f"share {s:g}", s, (_runs(rng, n_f, n_m, rate),))
             for s, rate in ((1.0, 0.05), (0.5, 0.2), (0.0, 0.6))]
    res = compare_conditions(WER, conds, n_resamples=200, seed=0)
    for test in res["tests"]:
        assert test["status"] == cond.FEW_SPEAKERS
        assert all(v is None for v in test["ci"].values()) and all(v is None for v in test["p"].values())
        assert not any(test["called"].values())
        assert test["estimate"]["delta_rel"] is not None        # the point difference is still shown
    for c in res["conditions"].values():
        assert c["ci"]["delta_rel"] is None and c["ci"]["all"] is None
        for g, n in (("F", n_f), ("M", n_m)):
            assert (c["ci"][g] is None) == (n == 1)                # the other gender's own interval stands


def test_five_speakers_of_each_gender_are_still_compared():
    rng = np.random.default_rng(3)
    conds = [Condition(f"share {s:g}", s, (_runs(rng, 5, 5, rate),))
             for s, rate in ((1.0, 0.05), (0.5, 0.2), (0.0, 0.6))]
    res = compare_conditions(WER, conds, n_resamples=200, seed=0)
    primary = next(t for t in res["tests"] if t["name"] == res["primary"])
    assert primary["status"] == "compared" and primary["ci"]["delta_rel"] is not None


def _study(tmp_path: Path, speakers: list[str], rates: dict, seeds: int, metric: str = "wer",
           task: str = "asr-frozen", pair: str = "") -> tuple[dict, dict]:
    """Each checkpoint's per-seed result JSONs (pooled into the DB as the seeds step does) and the
    checkpoints' facts as the conditions step passes them."""
    rng = np.random.default_rng(5)
    refs = [f"le chat {w} dort sur le tapis ce soir" for w in ("noir", "blanc", "gris", "roux")]
    results = {}
    for ck, (women, men) in rates.items():
        results[ck] = []
        for s in range(seeds):
            r_, h_, spk, gen = [], [], [], []
            for sp in speakers:
                rate = women if sp[0] == "F" else men
                for ref in refs:
                    words = ["x" if rng.random() < rate else w for w in ref.split()]
                    r_.append(ref), h_.append(" ".join(words)), spk.append(sp), gen.append(sp[0])
            path = tmp_path / "runs" / ck / f"seed{s}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(score_utterances(metric, r_, h_, spk, gen, bootstrap=0, seed=0)))
            results[ck].append(str(path))
        pool_and_store(results[ck], list(range(seeds)), None, str(tmp_path / "results.db"), ck, task, pair, "test",
                       100, 0)
    checkpoints = {ck: {"reference": False, "set": SHARES[ck][2],
                        "share": female_share({"female_pct": SHARES[ck][0], "male_pct": SHARES[ck][1]})}
                   for ck in rates}
    return results, checkpoints


def test_the_report_says_why_one_speaker_per_gender_is_not_compared(tmp_path):
    rates = {"F-tiny": (0.05, 0.3), "B-tiny": (0.2, 0.3), "M-tiny": (0.5, 0.3)}
    results, checkpoints = _study(tmp_path, ["F0", "M0"], rates, seeds=3)
    compare_and_store(results, None, checkpoints, str(tmp_path / "results.db"), "asr-frozen", "", bootstrap=200, seed=0)
    write_report(tmp_path / "results.db", tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    sentence = next(line for line in text.splitlines() if line.startswith("- **asr-frozen"))
    assert "cannot answer: fewer than 2 test speakers of a gender (1 F, 1 M" in sentence, sentence
    assert "CI" not in sentence and "called" not in sentence.replace("no call", ""), sentence
    table = (tmp_path / "report" / "conditions_asr-frozen.md").read_text()
    rows = [line for line in table.splitlines() if " vs " in line or "slope" in line]
    assert rows and all(line.rstrip(" |").endswith(cond.FEW_SPEAKERS) for line in rows), table
    assert not any("(" in cell for line in rows for cell in line.split("|")[2:4]), table   # no CI in a cell


# --- part 6: an undefined Δrel and a point outside its CI -----------------------------------------

def test_the_conditions_step_runs_when_delta_rel_is_undefined(tmp_path, capsys):
    """BLEU 0 for both genders in every run: the step prints and stores, the report answers."""
    from gendergap.steps.conditions import ConditionsStep

    speakers = [f"{g}{i}" for g in "FM" for i in range(3)]
    results, _ = _study(tmp_path, speakers, {ck: (1.0, 1.0) for ck in SHARES}, seeds=2, metric="bleu",
                        task="st", pair="fr-en")
    registry = tmp_path / "checkpoints.json"
    registry.write_text(json.dumps({"checkpoints": [
        {"name": ck, "path": f"{ck}.pt", "kind": "fairseq", "female_pct": f, "male_pct": m}
        for ck, (f, m, _) in SHARES.items()]}))
    step = ConditionsStep(name="conditions:st:fr-en", results=results, result_key=None,
                          sets={ck: s for ck, (_, _, s) in SHARES.items()}, references=[], registry=str(registry),
                          db=str(tmp_path / "results.db"), task_type="st", lang_pair="fr-en", bootstrap=100,
                          bootstrap_seed=0)
    step.run()
    assert "Δrel undefined" in capsys.readouterr().out
    write_report(tmp_path / "results.db", tmp_path / "report")
    sentence = next(line for line in (tmp_path / "report" / "report.md").read_text().splitlines()
                    if line.startswith("- **st fr-en"))
    assert "cannot answer: Δrel is undefined for a condition" in sentence


def test_the_trend_plot_draws_a_point_outside_its_ci(tmp_path):
    speakers = [f"{g}{i}" for g in "FM" for i in range(3)]
    rates = {"F-tiny": (0.05, 0.3), "B-tiny": (0.2, 0.3), "M-tiny": (0.5, 0.3)}
    results, checkpoints = _study(tmp_path, speakers, rates, seeds=2)
    db = tmp_path / "results.db"
    compare_and_store(results, None, checkpoints, str(db), "asr-frozen", "", bootstrap=100, seed=0)
    with sqlite3.connect(db) as con:   # a percentile CI need not hold the runs' mean: put it above
        n = con.execute("UPDATE scores SET ci_low = value + 5, ci_high = value + 9 WHERE subset = 'conditions' AND "
                        "metric = 'wer:condition' AND gender = 'delta_rel' AND checkpoint = 'female'").rowcount
    assert n == 1
    written = write_report(db, tmp_path / "report")
    assert "trend_asr-frozen.png" in {p.name for p in written.values()}


# --- part 6: resample counts are bounded ---------------------------------------------------------

@pytest.fixture
def scored(tmp_path):
    ids, refs, hyps, spk, gen = make_corpus(n_utts=24, n_speakers=4)
    return write_inputs(tmp_path, ids, refs, hyps, spk, gen)


def test_score_refuses_more_resamples_than_the_bound(tmp_path, capfd, scored):
    ref, hyp, table = scored
    rc, out, err = run_fresh(capfd, "score", "st", "--refs", ref, "--hyps", hyp, "--speakers", table,
                             "--bootstrap", "100001", "--json", tmp_path / "r.json")
    assert rc == 2 and len(err) == 1 and "--bootstrap" in err[0] and "100,000" in err[0], err
    assert not (tmp_path / "r.json").exists()
    rc, out, err = run_fresh(capfd, "score", "asr", "--refs", ref, "--hyps", hyp, "--speakers", table,
                             "--bootstrap", "1e8")
    assert rc == 2 and len(err) == 1 and "--bootstrap 1e8 is not a whole number" in err[0] and "100,000" in err[0], err
    with pytest.raises(SystemExit):
        run_fresh(capfd, "score", "st", "--help")
    assert "at most 100,000" in " ".join(capfd.readouterr().out.split())   # the help states the bound


@pytest.mark.parametrize("argv", [["score", "compare", "--resamples"], ["st", "decode", "--bootstrap"],
                                  ["asr", "decode", "--bootstrap"]])
def test_every_resample_flag_is_bounded_before_any_work(capfd, argv):
    rc, out, err = run_fresh(capfd, *argv, "100001")
    assert rc == 2 and len(err) == 1 and f"{argv[-1]} 100001 is not a whole number" in err[0], err
    assert "from 1 to 100,000" in err[0] if argv[-1] == "--resamples" else "from 0 to 100,000" in err[0], err


def test_the_bound_holds_inside_the_analysis_too(tmp_path, scored):
    """Every CI and test draws its counts in one place; a caller passing a count past the CLI meets it."""
    from analysis.bootstrap import draw_counts

    with pytest.raises(UserError, match="100,000"):
        draw_counts({"F": 2, "M": 2}, 100_001, 0)
    ids, refs, hyps, spk, gen = make_corpus(n_utts=24, n_speakers=4)
    a = score_utterances("wer", refs, hyps, spk, gen, bootstrap=0)
    from analysis.compare import compare_results
    with pytest.raises(UserError, match="--resamples"):
        compare_results(a, a, n_resamples=100_001)


def test_a_config_bootstrap_past_the_bound_is_refused(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(GOOD + "report:\n  bootstrap: 100001\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}:12: 'report.bootstrap'") and "100,000" in str(e.value), str(e.value)


# --- part 6: no tokeniser that downloads ------------------------------------------------------------

def _fresh(tmp_path: Path, *argv) -> tuple[subprocess.CompletedProcess, Path]:
    """`gendergap ARGV` in a process whose home folder is tmp_path/home (sacrebleu reads it at import:
    a download would go there), and that home."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = {**os.environ, "HOME": str(home)}
    env.pop("SACREBLEU", None)
    r = subprocess.run([sys.executable, "-m", "gendergap.cli", *map(str, argv)], capture_output=True, text=True,
                       env=env, timeout=120)
    return r, home


@pytest.mark.parametrize("tok", ["flores200", "flores101", "spm"])
def test_a_tokeniser_that_downloads_is_refused_before_anything_runs(tmp_path, scored, tok):
    ref, hyp, table = scored
    r, home = _fresh(tmp_path, "score", "st", "--refs", ref, "--hyps", hyp, "--speakers", table, "--tokenize", tok,
                     "--json", tmp_path / "r.json")
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "offline" in lines[0] and tok in lines[0], r.stderr
    assert not any(home.iterdir()) and not (tmp_path / "r.json").exists()


def test_a_result_json_naming_a_downloading_tokeniser_is_refused(tmp_path, scored):
    """The tokeniser a handed result JSON records is used to re-score it (`score compare`)."""
    ref, hyp, table = scored
    r, home = _fresh(tmp_path, "score", "st", "--refs", ref, "--hyps", hyp, "--speakers", table,
                     "--bootstrap", "0", "--json", tmp_path / "a.json")
    assert r.returncode == 0, r.stderr
    b = json.loads((tmp_path / "a.json").read_text())
    b["options"]["tokenize"] = "flores200"
    (tmp_path / "b.json").write_text(json.dumps(b))
    for first, second in (("a", "b"), ("b", "a")):
        r, home = _fresh(tmp_path, "score", "compare", "--a", tmp_path / f"{first}.json", "--b",
                         tmp_path / f"{second}.json", "--resamples", "50")
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert r.returncode == 2 and len(lines) == 1 and "offline" in lines[0], r.stderr
        assert f"{tmp_path / 'b.json'}: " in lines[0] and not any(home.iterdir()), r.stderr
