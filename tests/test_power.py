"""What a design can detect (issue 61, item 2): the minimum detectable difference of a test, of a
planned design before it runs (analysis.power), the dry run's line per compared task
(`sweep --dry-run`, gendergap/design.py), `--variance-from` an earlier study's results DB, and the
docs' table, which must be the function's output."""
from __future__ import annotations

import csv
import math
import os
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.power import (
    COMPONENTS_ROW,
    DEFAULT_COMPONENTS,
    components_from_db,
    design_mde,
    design_power,
    mde,
    mde_table,
    primary_weights,
)
from analysis.store import ResultsStore
from cli_helpers import one_error_line, run_text
from gendergap.config import CONFIG_DIR

REPO = Path(__file__).resolve().parent.parent
COMP = {"speaker": 10.0, "run": 4.0, "seed": 2.0}
MDE_LINE = re.compile(r"^  (?P<task>[\w -]+): minimum detectable difference \(80 % power, α 0\.05\): "
                      r"(?P<rest>.*)$", re.M)


# --- the arithmetic --------------------------------------------------------------------------------

def test_mde_is_the_textbook_relation():
    # z_.975 + z_.8 = 1.959964 + 0.841621; t(10): 2.228139 + 0.879058; t(2): 4.302653 + 1.060660 (tables)
    assert mde(1.0, None, 0.05) == pytest.approx(2.801585, abs=1e-5)
    assert mde(2.0, 10, 0.05) == pytest.approx(2 * 3.107197, abs=1e-5)
    assert mde(1.0, 2, 0.05, power=0.8) == pytest.approx(5.363313, abs=1e-5)
    assert mde(None, 3, 0.05) is None and mde(float("nan"), 3, 0.05) is None and mde(1.0, 3, 0.0) is None


def test_design_variance_is_the_stated_sum():
    """Two shares x 2 checkpoints x 3 seeds on 5 + 5 speakers: each condition's variance is
    c_spk (1/5 + 1/5) (speakers) + var_run / 2 + var_seed / 6 (runs and seeds, on 2 x (2 - 1) df);
    the pair weighs +-1, and its df are Welch-Satterthwaite's, as the study's tests take them."""
    p = design_power(COMP, 5, 5, [1.0, 0.0], 2, 3)
    v_spk, v_run = 2 * 10 * 0.4, 2 * (4 / 2 + 2 / 6)
    assert p.primary == "pair" and p.unit == "checkpoint"
    assert p.se == pytest.approx(math.sqrt(v_spk + v_run))
    assert p.df == pytest.approx((v_spk + v_run) ** 2 / (v_run ** 2 / 2))
    assert p.mde == pytest.approx(mde(p.se, p.df, 0.05))
    # one checkpoint per share: checkpoint against checkpoint, the run term drops, df from the seeds (2 x 2)
    q = design_power(COMP, 5, 5, [1.0, 0.0], 1, 3)
    assert q.unit == "seed" and q.se == pytest.approx(math.sqrt(v_spk + 2 * 2 / 3))
    assert q.df == pytest.approx((v_spk + 4 / 3) ** 2 / ((4 / 3) ** 2 / 4))
    # without a run component the run term is taken as the seed one; without runs and seeds, a normal
    r = design_power({**COMP, "run": None}, 5, 5, [1.0, 0.0], 2, 3)
    assert r.se == pytest.approx(math.sqrt(v_spk + 2 * (2 / 2 + 2 / 6)))
    z = design_power({"speaker": 10.0, "run": 0.0, "seed": 0.0}, 5, 5, [1.0, 0.0], 2, 3)
    assert z.df is None and z.mde == pytest.approx(math.sqrt(v_spk) * 2.801585, abs=1e-4)


def test_the_primary_test_is_a_slope_only_from_four_shares():
    kind, w = primary_weights([1.0, 0.5, 0.0])
    assert kind == "pair" and w == [1.0, 0.0, -1.0]
    kind, w = primary_weights([0.0, 0.25, 0.5, 0.75, 1.0])
    assert kind == "slope" and w == pytest.approx([-0.08, -0.04, 0.0, 0.04, 0.08])   # per 10 points of share
    assert sum(w) == pytest.approx(0.0)
    assert design_power(COMP, 6, 6, [0.0, 0.25, 0.5, 0.75, 1.0], 2, 1).n_secondary == 10 + 1   # pairs + curvature
    assert design_power(COMP, 6, 6, [1.0, 0.5, 0.0], 2, 1).n_secondary == 2


@pytest.mark.parametrize("task", ["asr-frozen", "st"])
def test_more_speakers_runs_or_seeds_detect_less(task):
    # a seed component > 0: asr-frozen's fitted one is 0, and then more seeds cannot help (checked below)
    comp = {**DEFAULT_COMPONENTS[task], "seed": max(DEFAULT_COMPONENTS[task]["seed"], 1.0)}
    flat = {**comp, "seed": 0.0}
    assert len({design_mde(flat, 6, 6, [1.0, 0.5, 0.0], 2, s) for s in (1, 3, 5)}) == 1
    for shares in ([1.0, 0.5, 0.0], [0.0, 0.25, 0.5, 0.75, 1.0]):
        for k in (1, 2, 3):
            by_speakers = [design_mde(comp, n, n, shares, k, 3) for n in (3, 6, 12, 24)]
            assert by_speakers == sorted(by_speakers, reverse=True) and len(set(by_speakers)) == 4
            by_seeds = [design_mde(comp, 6, 6, shares, k, s) for s in (2, 3, 5)]
            assert by_seeds == sorted(by_seeds, reverse=True) and len(set(by_seeds)) == 3
        # runs: once the pretraining run is the unit (2+ checkpoints a share), each one more helps
        by_runs = [design_mde(comp, 6, 6, shares, k, 1) for k in (2, 3, 4, 6)]
        assert by_runs == sorted(by_runs, reverse=True) and len(set(by_runs)) == 4
    # unequal speakers: the fewer gender limits
    assert design_mde(comp, 3, 24, [1.0, 0.0], 1, 3) > design_mde(comp, 12, 12, [1.0, 0.0], 1, 3)


def test_one_run_per_condition_cannot_be_estimated():
    p = design_power(COMP, 6, 6, [1.0, 0.5, 0.0], 1, 1)
    assert p.mde is None and design_mde(COMP, 6, 6, [1.0, 0.5, 0.0], 1, 1) is None
    assert p.reason == "cannot be estimated: one run per condition"
    assert design_power(COMP, 6, 6, [1.0], 2, 3).mde is None                       # one share: nothing to compare
    assert "test speakers" in design_power(COMP, 1, 6, [1.0, 0.0], 2, 3).reason   # no speaker resample varies
    with pytest.raises(ValueError):
        design_power(COMP, 6, 6, [1.0, 0.0], [2], 3)                              # one count per share


# --- components stored by a study -----------------------------------------------------------------

def _component_rows(task: str, values: dict, pair: str = "", metric: str = "wer") -> list[dict]:
    return [{"checkpoint": COMPONENTS_ROW, "task": task, "lang_pair": pair, "subset": "conditions",
             "gender": "delta_rel", "metric": f"{metric}:var_{name}", "value": v, "n_speakers": 12}
            for name, v in values.items()]


def component_db(path: Path, by_task: dict) -> Path:
    """A results DB holding what a study's conditions steps store: the variance-component rows."""
    with ResultsStore(path) as store:
        for (task, pair), values in by_task.items():
            store.store_run("conditions", {"kind": "conditions", "task": task, "lang_pair": pair},
                            _component_rows(task, values, pair, "bleu" if pair else "wer"), name=task)
    return path


def test_components_come_back_from_the_db_per_task_type(tmp_path):
    db = component_db(tmp_path / "results.db", {
        ("asr-frozen", ""): {"speaker": 50.0, "run": 9.0, "seed": 3.0},
        ("st", "fr-en"): {"speaker": 20.0, "seed": 4.0},                 # one checkpoint per share: no var_run row
        ("st", "fr-es"): {"speaker": 40.0, "seed": 8.0}})
    got = components_from_db(db)
    assert got["asr-frozen"] == {"speaker": 50.0, "run": 9.0, "seed": 3.0}
    assert got["st"] == {"speaker": 30.0, "run": None, "seed": 6.0}      # the pairs averaged; var_run not estimable
    with ResultsStore(db) as store:                                      # a later run of the step: its rows win
        store.store_run("conditions", {"kind": "conditions", "again": 1},
                        _component_rows("asr-frozen", {"speaker": 70.0}), name="asr-frozen")
    assert components_from_db(db)["asr-frozen"]["speaker"] == 70.0


def _simulated_study(rng, shares, checkpoints: int, seeds: int, n: int = 8) -> list:
    """One study of per-speaker WER statistics (hits, sub, del, ins, ref_words): speakers of their own
    difficulty shared by every model, and per gender a shift of each checkpoint and of each seed."""
    from analysis.conditions import Condition
    words = rng.integers(150, 300, (2, n))
    speaker = np.exp(rng.normal(0, 0.35, (2, n)))
    conditions = []
    for share in shares:
        rate = np.array([0.30 - 0.1 * share, 0.25])[:, None]
        cks = []
        for _ in range(checkpoints):
            ck = rng.normal(0, 0.08, (2, 1)) + rng.normal(0, 0.06, (2, 1))
            runs = []
            for _ in range(seeds):
                mean = words * rate * speaker * np.exp(ck + rng.normal(0, 0.05, (2, 1)) + rng.normal(0, 0.1, (2, n)))
                errors = np.minimum(rng.poisson(mean), words)
                sub = rng.binomial(errors, 0.7)
                stats = np.stack([words - errors, sub, errors - sub, np.zeros_like(words), words], -1).astype(np.int64)
                runs.append({"F": stats[0], "M": stats[1]})
            cks.append(tuple(runs))
        conditions.append(Condition(f"{100 * share:g}% F", share, tuple(cks)))
    return conditions


@pytest.mark.parametrize("shares, checkpoints, seeds", [((1.0, 0.5, 0.0), 1, 3), ((1.0, 0.75, 0.5, 0.25, 0.0), 2, 1),
                                                        ((1.0, 0.5, 0.0), 2, 2)])
def test_the_design_mde_is_what_the_study_reports(tmp_path, shares, checkpoints, seeds):
    """The contract between the dry run and the study: a study's stored variance components, read back
    and put into design_power with its own design, give the MDE its report states for the primary test
    (the same unit, test, family and df rule). Not exactly: the speakers' component is an average over
    the pairs, and a run variance estimated below 0 is clipped; over six studies the median agrees."""
    from analysis.conditions import compare_conditions, conditions_rows
    from analysis.metrics import get_metric
    ratios = []
    for seed in range(6):
        res = compare_conditions(get_metric("wer"), _simulated_study(np.random.default_rng(seed), shares, checkpoints,
                                                                     seeds), n_resamples=300)
        reported = next(t for t in res["tests"] if t["family"] == "primary")
        db = tmp_path / f"r{seed}.db"
        with ResultsStore(db) as store:
            store.store_run("conditions", {"kind": "conditions"},
                            conditions_rows(res, "asr-frozen", "", "sig", {"F": 100, "M": 100, "all": 200}), name="x")
        stored = components_from_db(db)["asr-frozen"]
        assert stored == pytest.approx({k: res["components"][k] for k in ("speaker", "run", "seed")})
        planned = design_power(stored, 8, 8, list(shares), checkpoints, seeds)
        assert planned.unit == res["unit"] and planned.primary == reported["kind"]
        assert planned.n_secondary == sum(t["family"] == "secondary" for t in res["tests"])
        ratios.append(planned.mde / reported["mde"]["delta_rel"])
    assert 0.85 < float(np.median(ratios)) < 1.2, ratios


# --- the dry run ------------------------------------------------------------------------------------

def _mde_lines(out: str) -> dict[str, str]:
    return {m["task"]: m["rest"] for m in MDE_LINE.finditer(out)}


def test_dry_run_of_the_built_in_study_prints_each_tasks_mde(tmp_path, capsys):
    rc, out, err = run_text(capsys, "sweep", "--config", CONFIG_DIR / "mini.yaml", "--out", tmp_path / "o", "--dry-run")
    assert rc == 0, err
    lines = _mde_lines(out)
    assert set(lines) == {"asr-e2e", "asr-frozen", "st fr-en", "gender-st en-fr"}, out
    shares = [1.0, 0.75, 0.5, 0.25, 0.0]
    for task, label in (("asr-frozen", "asr-frozen"), ("st", "st fr-en")):
        slope = design_mde(DEFAULT_COMPONENTS[task], 12, 12, shares, [2, 2, 2, 1, 2], 1)
        assert lines[label].startswith(
            f"the slope over female share {slope:.1f} Δrel points per 10 points of share ({10 * slope:.1f} from 0 to "
            "100 % female) with 5 shares x 1-2 pretraining runs x 1 seed, 12/12 test speakers; "
            "variance components from "
            "defaults fitted on the built-in study"), lines[label]
    # one fine-tuning run and one gender-set ST run per share: nothing to estimate, and what a seed more gives
    assert lines["asr-e2e"].startswith("the slope over female share: cannot be estimated: one run per condition (5 "
                                       "shares x 1 pretraining run x 1 seed, 12/12 test speakers); with 2 seeds per "
                                       "checkpoint: ")
    assert "2/2 test speakers" in lines["gender-st en-fr"]
    assert out.index("what the design can detect") < out.index("inputs checked") and not (tmp_path / "o").exists()
    # the docs show these lines as they are printed
    page = (REPO / "docs" / "design-power.md").read_text(encoding="utf-8")
    section = out[out.index("what the design can detect"):out.index("inputs checked")]
    assert all(line in page for line in section.splitlines()), "docs/design-power.md's dry-run example is stale"


def test_variance_from_an_earlier_study_changes_the_number(tmp_path, capsys):
    study = tmp_path / "earlier"
    study.mkdir()
    measured = {"speaker": 400.0, "run": 30.0, "seed": 30.0}
    component_db(study / "results.db", {("asr-frozen", ""): measured})
    rc, out, err = run_text(capsys, "sweep", "--config", CONFIG_DIR / "mini.yaml", "--out", tmp_path / "o",
                            "--dry-run", "--variance-from", study)
    assert rc == 0, err
    lines = _mde_lines(out)
    shares = [1.0, 0.75, 0.5, 0.25, 0.0]
    expected = design_mde(measured, 12, 12, shares, [2, 2, 2, 1, 2], 1)
    assert expected != design_mde(DEFAULT_COMPONENTS["asr-frozen"], 12, 12, shares, [2, 2, 2, 1, 2], 1)
    assert lines["asr-frozen"].startswith(f"the slope over female share {expected:.1f} Δrel points") and \
        f"variance components from {study};" in lines["asr-frozen"]
    # a task type the earlier study did not compare keeps the defaults, and says so
    assert (f"variance components from defaults fitted on the built-in study ({study} has none for st)"
            in lines["st fr-en"])
    # the DB file itself works as well as its folder
    rc, again, _ = run_text(capsys, "sweep", "--config", CONFIG_DIR / "mini.yaml", "--out", tmp_path / "o",
                            "--dry-run", "--variance-from", study / "results.db")
    assert rc == 0 and f"the slope over female share {expected:.1f} Δrel points" in _mde_lines(again)["asr-frozen"]


def _bad_sources(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    empty_dir = tmp_path / "not-a-study"
    empty_dir.mkdir()
    no_rows = tmp_path / "norows.db"
    with ResultsStore(no_rows) as store:
        store.store_run("score-asr", {"kind": "x"}, [{"checkpoint": "F", "task": "asr-frozen", "gender": "all",
                                                      "metric": "wer", "value": 10.0}])
    negative = component_db(tmp_path / "negative.db", {("st", "fr-en"): {"speaker": -3.0, "seed": 1.0}})
    crafted = component_db(tmp_path / "crafted.db", {("asr-frozen", ""): {"speaker": 1.0, "seed": 1.0}})
    with sqlite3.connect(crafted) as c:   # a handed DB's trigger would act on every later write
        c.execute("CREATE TRIGGER wipe AFTER INSERT ON scores BEGIN DELETE FROM scores; END")
    return {"crafted": (crafted, "holds a trigger"), "text": (text, "not a gendergap results DB"),
            "fifo": (fifo, "not a regular file (a FIFO"),
            "folder": (empty_dir, "no results.db in this folder"),
            "no components": (no_rows, "holds no variance components"), "negative": (negative, "negative variance")}


@pytest.mark.parametrize("what", ["text", "fifo", "folder", "no components", "negative", "crafted"])
def test_a_bad_variance_source_is_one_line_and_exit_2(tmp_path, capsys, what):
    path, words = _bad_sources(tmp_path)[what]
    rc, out, err = run_text(capsys, "sweep", "--config", CONFIG_DIR / "mini.yaml", "--out", tmp_path / "o",
                            "--dry-run", "--variance-from", path)
    line = one_error_line(err)
    assert rc == 2 and words in line and str(path) in line, line
    assert "jobs (state as of now" not in out and not (tmp_path / "o").exists()   # refused before the plan


def test_variance_from_needs_the_dry_run(tmp_path, capsys):
    rc, _, err = run_text(capsys, "sweep", "--config", CONFIG_DIR / "mini.yaml", "--out", tmp_path / "o",
                          "--variance-from", tmp_path)
    assert rc == 2 and "needs --dry-run" in one_error_line(err) and not (tmp_path / "o").exists()


def _boito_stand_in(root: Path) -> Path:
    """configs/boito2022.yaml with its four mTEDx tables replaced by stand-ins: 7 female and 9 male
    test speakers in fr-fr's test split (no audio, no checkpoints: the input checks fail after)."""
    cols = ["id", "audio", "offset", "duration", "sample_rate", "speaker", "gender", "corpus", "lang", "split", "text"]
    rows = [[f"{split}-{g}{s}-{u}", f"audio/{split}-{g}{s}-{u}.wav", 0, 2.0, 16000, f"{split}-{g}{s}", g, "mtedx-fr",
             "fr", split, "bonjour"]
            for split, nf, nm in (("train", 2, 2), ("valid", 1, 1), ("test", 7, 9))
            for g, n in (("F", nf), ("M", nm)) for s in range(n) for u in range(2)]
    for pair in ("fr", "en", "es", "pt"):
        extra = [] if pair == "fr" else [f"tgt_text_{pair}"]
        corpus = "mtedx-fr" if pair == "fr" else f"mtedx-fr-{pair}"
        with open(root / f"mtedx_fr-{pair}.tsv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, delimiter="\t")
            w.writerow(cols + extra)
            w.writerows(r[:7] + [corpus] + r[8:] + (["hello"] if extra else []) for r in rows)
    cfg = yaml.safe_load((CONFIG_DIR / "boito2022.yaml").read_text(encoding="utf-8"))
    cfg["corpus"]["table"] = [str(root / f"mtedx_fr-{p}.tsv") for p in ("fr", "en", "es", "pt")]
    path = root / "boito2022.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def test_dry_run_of_the_reference_study_with_stand_in_tables(tmp_path, capsys):
    rc, out, err = run_text(capsys, "sweep", "--config", _boito_stand_in(tmp_path), "--out", tmp_path / "o",
                            "--dry-run")
    assert rc == 2 and "problem(s) with the study's inputs" in err      # no audio, no checkpoints: after the lines
    lines = _mde_lines(out)
    assert set(lines) == {"asr-e2e", "asr-frozen", "fr-en-st fr-en", "fr-es-st fr-es", "fr-pt-st fr-pt"}, out
    # Table 3's shares: F 100 %, M 0 %, LeBenchmark 1K 52.5/47.4, 3K 35.2/62.2, 7K 13.4/23.9 -> 5 shares, a slope
    assert lines["asr-frozen"].startswith("the slope over female share: cannot be estimated: one run per condition "
                                          "(5 shares x 1 pretraining run x 1 seed, 7/9 test speakers); with 2 seeds")
    shares = [1.0, round(13.4 / 37.3, 4), round(35.2 / 97.4, 4), round(52.5 / 99.9, 4), 0.0]
    two = design_mde(DEFAULT_COMPONENTS["asr-frozen"], 7, 9, shares, 1, 2)
    assert lines["asr-frozen"].endswith(f"with 2 seeds per checkpoint: {two:.1f} Δrel points per 10 points of share")
    assert "4 shares x 1 pretraining run x 1 seed, 7/9 test speakers" in lines["fr-es-st fr-es"]   # the ST tasks: 4


# --- the docs' table --------------------------------------------------------------------------------

def test_the_docs_table_is_the_functions_output():
    page = (REPO / "docs" / "design-power.md").read_text(encoding="utf-8")
    for task in ("asr-frozen", "st"):
        start = f'<!-- generated: analysis.power.mde_table("{task}"); tests/test_power.py checks it -->\n'
        assert start in page, task
        body = page[page.index(start) + len(start):]
        assert body[:body.index("\n<!-- end of the generated table -->")] == mde_table(task), (
            f"docs/design-power.md's {task} table is stale: paste analysis.power.mde_table({task!r})")
    table = mde_table("asr-frozen")
    assert table.count("\n") == 13 and "| 5 (slope per 10 points) | 2 | 3 |" in table   # 2 x 3 x 2 rows + header
    assert "design-power.md" in (REPO / "mkdocs.yml").read_text(encoding="utf-8")


REPLICATES = """\
name: replicates
corpus: {synth: mini}
pretraining: {corpus: synth-fr, sets: {female: F, male: M}}
checkpoints:
  F-a: {shipped: tiny-female, pretrained_on: female}
  F-b: {shipped: tiny-female, female_pct: 100, male_pct: 0}
  M-a: {shipped: tiny-male, pretrained_on: male}
  M-b: {shipped: tiny-male, pretrained_on: male}
  X: {shipped: tiny-balanced}
  FBANK: {baseline: fbank}
tasks:
  asr-frozen: {corpus: synth-fr, seeds: [0, 1], overrides: [max_steps=2]}
  st: {corpus: synth-fr, pairs: [fr-en], checkpoints: [F-a, X, FBANK]}
"""


def test_dry_run_groups_replicates_by_share_and_leaves_unknown_shares_out(tmp_path, capsys):
    """Two checkpoints a share (one by its pretraining set, one by Table 3's percentages): the
    pretraining run is the unit; a checkpoint of unknown share (X) and the reference are not shares."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(REPLICATES, encoding="utf-8")
    rc, out, err = run_text(capsys, "sweep", "--config", cfg, "--out", tmp_path / "o", "--dry-run")
    assert rc == 0, err
    lines = _mde_lines(out)
    two = design_power(DEFAULT_COMPONENTS["asr-frozen"], 12, 12, [1.0, 0.0], 2, 2)
    assert two.unit == "checkpoint"
    assert lines["asr-frozen"] == (f"100% F vs male {two.mde:.1f} Δrel points with 2 shares x 2 pretraining runs x 2 "
                                   "seeds, 12/12 test speakers; variance components from defaults fitted on the "
                                   "built-in "
                                   "study")   # its var_run measured on two runs per share: no guess to own up to
    assert lines["st fr-en"].startswith("nothing to compare: 1 pretraining share(s) known")


def test_spend_table_prices_voices_runs_and_seeds_on_the_design_relation():
    """What one more of each replicate buys: each row's MDE is design_mde of the design it describes,
    and a component at 0 buys nothing (seeds when var_seed is 0)."""
    from analysis.power import spend_table
    comp = {"speaker": 60.0, "run": 16.0, "seed": 0.0}
    shares = [0.0, 0.25, 0.5, 0.75, 1.0]
    rows = {r["option"]: r for r in spend_table(comp, 12, shares, 2, 1, {"voice_pair": 40.0, "run": 8000.0,
                                                                         "seed": 1800.0})}
    base = design_mde(comp, 12, 12, shares, 2, 1)
    assert rows["test voices"]["mde_after"] == design_mde(comp, 24, 24, shares, 2, 1) < base
    assert rows["test voices"]["cpu_s"] == 12 * 40.0 and rows["test voices"]["adds"] == "+12 a gender"
    assert rows["pretraining run"]["mde_after"] == design_mde(comp, 12, 12, shares, 3, 1) < base
    assert rows["downstream seed"]["mde_after"] == pytest.approx(base) and rows["downstream seed"]["per_1000_cpu_s"] \
        == pytest.approx(0.0, abs=1e-9)
    per = {o: r["per_1000_cpu_s"] for o, r in rows.items()}
    assert per["test voices"] > per["pretraining run"] > 0
    assert per["test voices"] == pytest.approx((base - rows["test voices"]["mde_after"]) / 480 * 1000)


def test_the_docs_spend_tables_are_the_functions_output():
    from analysis.power import builtin_spend_markdown
    page = (REPO / "docs" / "design-power.md").read_text(encoding="utf-8")
    for task in ("asr-frozen", "st"):
        start = f'<!-- generated: analysis.power.spend_markdown("{task}"); tests/test_power.py checks it -->\n'
        body = page[page.index(start) + len(start):]
        assert body[:body.index("\n<!-- end of the generated table -->")] == builtin_spend_markdown(task), (
            f"docs/design-power.md's {task} spend table is stale: "
            f"paste analysis.power.builtin_spend_markdown({task!r})")
