"""The study graph's typed steps: a new downstream task from a test-only module runs through a
real study (submitit's local executor): its registration alone puts it in the plan, the dry run's
cost table, the study's time table and the report; its rows point back to their step, and a
re-run is a no-op."""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

import toy_task
from analysis.store import ResultsStore
from gendergap import config
from gendergap.cli import main
from gendergap.config import load_config
from gendergap.cost import DEFAULTS, estimate
from gendergap.plan import plan_jobs
from gendergap.study import run_study
from gendergap.sweep import run_sweep

CONFIG = """\
name: toy
corpus: {synth: tiny}
checkpoints:
  F-tiny: {shipped: tiny-female}
  M-tiny: {shipped: tiny-male}
tasks:
  seconds: {type: utt-seconds, corpus: synth-fr, scale: %s}
report: {bootstrap: 10}
"""


@pytest.fixture
def toy_registered(monkeypatch):
    """The toy type registered for this test only (the registry restored after)."""
    saved = [(config.TASKS, dict(config.TASKS))]
    toy_task.register()
    # the job processes unpickle toy_task's step: they import it from tests/
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    yield
    for registry, before in saved:
        registry.clear()
        registry.update(before)


def _plan(tmp_path, scale):
    path = tmp_path / f"c{scale}.yaml"
    path.write_text(CONFIG % scale)
    return plan_jobs(load_config(path), tmp_path / "o")


@pytest.fixture
def default_profile(tmp_path, monkeypatch):
    """The cost model's default figures, whatever `gendergap bench` wrote on this machine."""
    import gendergap.cost as cost
    monkeypatch.setattr(cost, "PROFILE_PATH", tmp_path / "no-profile.json")


def _stage_line(text: str, stage: str) -> list[str]:
    """The cells of ``stage``'s row in a printed table (cost or time), split on runs of spaces."""
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(stage + " ")]
    assert len(rows) == 1, text
    return rows[0]


def test_a_toy_task_runs_through_the_sweep(tmp_path, toy_registered, default_profile, capsys):
    steps = _plan(tmp_path, 2.0)
    by = {s.name: s for s in steps}
    assert sorted(by) == ["checkpoints", "corpus", "features:F-tiny", "features:M-tiny", "report", "seconds:F-tiny",
                          "seconds:M-tiny"]
    position = {s.name: i for i, s in enumerate(steps)}
    assert all(position[d] < position[s.name] for s in steps for d in s.deps)   # dependency order
    assert (by["seconds:F-tiny"].deps == ["checkpoints", "features:F-tiny"]
            and by["seconds:F-tiny"].kind == "utt-seconds")
    # the checkpoint's features step extracts what the toy said it reads, and nothing else
    assert [r.plain() for r in by["features:M-tiny"].requests] == [{"corpus": "synth-fr", "splits": ["test"],
                                                                     "layers": "last", "probe_seed": None}]
    assert set(by["report"].deps) == {"checkpoints", "seconds:F-tiny", "seconds:M-tiny"}
    assert by["report"].titles == {"utt-seconds": toy_task.TITLE}   # handed to the report as data
    out = tmp_path / "o"
    # the dry run's cost table: the toy's own estimate, per job its start-up + SECONDS
    per_job = DEFAULTS["cpu"]["job_overhead_s"] + toy_task.SECONDS
    capsys.readouterr()
    assert main(["sweep", "--config", str(tmp_path / "c2.0.yaml"), "--out", str(out), "--dry-run"]) == 0
    assert _stage_line(capsys.readouterr().out, "utt-seconds")[:6] == ["utt-seconds", "2", "0", "B",
                                                                      f"{2 * per_job:.0f}", "s"]
    est = {e.step: e for e in estimate(steps)}
    assert est["seconds:F-tiny"].seconds == per_job and est["seconds:F-tiny"].stage == "utt-seconds"
    # the study: its time table has the toy's row, its job time beside the estimate
    assert run_study(tmp_path / "c2.0.yaml", out, parallel=2) == 0
    printed = capsys.readouterr().out
    row = _stage_line(printed[printed.index("stage          jobs"):], "utt-seconds")
    # jobs, job time, CPU time, estimate: the CPU the toy's jobs spent, never more than their time
    assert row[1] == "2" and float(row[6]) == pytest.approx(2 * per_job), row
    assert 0 < float(row[4]) <= float(row[2]) + 0.1, row
    # the report names the toy's rows with the title its registration gave
    report = (out / "report" / "report.md").read_text(encoding="utf-8")
    assert f"utt-seconds ({toy_task.TITLE})" in report.split("## Other scores", 1)[1], report
    states = dict(run_sweep(steps, out, parallel=2, quiet=True))   # the study's jobs: the plan's, done
    assert set(states.values()) == {"done"}, states

    # the numbers: what the toy's function computes from the generated table, per checkpoint
    table = pd.read_csv(out / "corpus" / "utterances.tsv", sep="\t")
    test = table[(table["corpus"] == "synth-fr") & (table["split"] == "test")]
    with ResultsStore(out / "results.db") as store:
        scores = store.scores(task="utt-seconds")
        assert sorted(set(scores["checkpoint"])) == ["F-tiny", "M-tiny"]
        for g in ("F", "M"):
            want = 2.0 * test.loc[test["gender"] == g, "duration"].mean()
            seconds = scores[(scores["gender"] == g) & (scores["metric"] == "seconds")]
            assert seconds["value"].tolist() == pytest.approx([want, want])
            # wav2vec 2.0 gives a frame per 20 ms: the toy read real features from the store
            frames = scores[(scores["gender"] == g) & (scores["metric"] == "frames")]
            assert frames["value"].tolist() == pytest.approx([want / 2.0 * 50] * 2, rel=0.03)
        # one hop from each row's run to the step that made it: kind, fields and key
        for run_id, ck in scores[["run_id", "checkpoint"]].drop_duplicates().itertuples(index=False):
            step = store.step_of(run_id)
            assert step["key"] == by[f"seconds:{ck}"].key and step["kind"] == "utt-seconds"
            assert step["name"] == f"seconds:{ck}" and step["fields"]["scale"] == 2.0 and step["fields"]["ckpt"] == ck
            assert step["fields"]["device"] == "cpu" and step["fields"]["layer"] == "last"
    # the toy's view was the features step's entry: one entry per checkpoint, none extracted twice
    assert len(list((out / "features").glob("*/*/entry.json"))) == 2
    assert (out / "report" / "report.md").is_file()

    # re-running is a no-op; a changed toy config re-runs the toy steps and the report only
    n_runs = len(sqlite3.connect(out / "results.db").execute("SELECT id FROM runs").fetchall())
    again = {s.name: s.key for s in _plan(tmp_path, 3.0)}
    assert {n for n in again if again[n] != by[n].key} == {"seconds:F-tiny", "seconds:M-tiny", "report"}
    assert len(sqlite3.connect(out / "results.db").execute("SELECT id FROM runs").fetchall()) == n_runs


def test_a_task_type_takes_its_schema_and_planner_once(toy_registered):
    from gendergap.steps import register_task

    toy_task.register()   # the same pair again: nothing changes
    with pytest.raises(ValueError, match="already registered"):
        register_task(toy_task.TYPE, toy_task.UttSecondsTask, lambda g, n, t: None)
    assert "utt-seconds" in config.schema_text()
