"""`gendergap trace` (issue 31, item 1): from a cell of Table 4 and of Table 5 to the score rows,
the run, the study step and the command lines that redo exactly that step; those lines, run into
an empty directory with the same inputs, give the cell's value again, to the last digit.

A tiny sweep on the built-in corpus (frozen ASR and fr->en ST from a shipped checkpoint) makes
the report; the store keeps the run -> step link true when a second step stores the same run.
"""
from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.store import ResultsStore, recording_step
from gendergap.cli import main

CONFIG = """\
name: trace
corpus: {synth: tiny}
checkpoints:
  B-tiny: {shipped: tiny-balanced}
tasks:
  asr-frozen: {corpus: synth-fr, layer: last, overrides: [max_steps=40, number_of_epochs=2]}
  st: {corpus: synth-fr, pairs: [fr-en], layer: '1', overrides: [max-update=30]}
report: {bootstrap: 30}
"""


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("trace")
    cfg = root / "trace.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "gendergap.cli", "sweep", "--config", str(cfg), "--out",
                        str(root / "study")], capture_output=True, text=True, timeout=900,
                       env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return root


def _trace(capsys, *argv) -> dict:
    assert main(["trace", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _redo(commands: list[str], cwd: Path) -> None:
    for line in commands:
        argv = shlex.split(line)
        assert argv[0] == "gendergap"
        r = subprocess.run([sys.executable, "-m", "gendergap.cli", *argv[1:]], cwd=cwd, capture_output=True,
                           text=True, timeout=600, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
        assert r.returncode == 0, line + "\n" + r.stdout[-2000:] + r.stderr[-2000:]


@pytest.mark.parametrize("table,row,column,task,metric", [
    ("table4", "asr-frozen:B-tiny", "WER All", "asr-frozen", "wer"),
    ("table5", "B-tiny", "fr-en All", "st", "bleu"),
])
def test_a_cell_traces_to_a_command_that_reproduces_it(study, tmp_path, capsys, table, row, column, task, metric):
    report = study / "study" / "report"
    csv = pd.read_csv(next(report.glob(f"{table}*.csv")), dtype=str, keep_default_na=False)
    assert {"all_score_id", "F_score_id", "M_score_id", "run_ids"} <= set(csv.columns)
    into = tmp_path / "redo"
    chain = _trace(capsys, "--report", str(report), table, row, column, "--into", str(into))
    (score,) = chain["scores"]
    assert (score["task"], score["metric"], score["gender"]) == (task, metric, "all")
    (run,) = chain["runs"]
    step = run["step"]
    assert step and step["kind"] == task and run["git_sha"] and run["versions"]["torch"]
    assert run["commands"] and all(str(study) not in c.split("--out")[-1].split()[0] for c in run["commands"])
    # the same chain from the score id and from the run id
    assert _trace(capsys, "--db", str(study / "study" / "results.db"), "--score", str(score["id"]))["runs"][0]["id"] \
        == run["id"]
    # redone in an empty directory, with the study's inputs: the same number, exactly
    into.mkdir()
    _redo(run["commands"], into)
    with sqlite3.connect(into / "results.db") as c:
        (value,) = c.execute("SELECT value FROM scores WHERE checkpoint = ? AND task = ? AND gender = 'all' AND "
                             "metric = ? AND subset = 'test'", (score["checkpoint"], task, metric)).fetchone()
    assert value == score["value"]
    # and the same output, line for line (the frozen-ASR WER of so short a training is 100 %)
    out = Path(step["fields"]["out"])
    hyp = next(h for h in ("test.hyp.tsv", "test.hyp") if (out / h).is_file())
    assert (into / out.name / hyp).read_text() == (out / hyp).read_text()
    with sqlite3.connect(study / "study" / "results.db") as c:   # the study's DB is untouched
        assert c.execute("SELECT value FROM scores WHERE id = ?", (score["id"],)).fetchone()[0] == score["value"]


def test_a_bad_cell_is_one_line(study, capsys):
    report = str(study / "study" / "report")
    assert main(["trace", "--report", report, "table4", "nope", "WER All"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "matches 0 rows" in err[0] and "asr-frozen:B-tiny" in err[0]
    assert main(["trace", "--report", report, "table9", "B-tiny", "All"]) == 2
    assert "no table 'table9'" in capsys.readouterr().err


def test_a_run_stored_again_by_another_step_points_to_that_step(tmp_path):
    db = tmp_path / "r.db"
    rows = [{"checkpoint": "c", "task": "asr-frozen", "gender": "all", "metric": "wer", "value": 10.0}]
    first = {"key": "k1", "kind": "asr-frozen", "name": "asr-frozen:c", "fields": {"x": 1}}
    second = {"key": "k2", "kind": "asr-frozen", "name": "asr-frozen:c", "fields": {"x": 2}}
    with ResultsStore(db) as store:
        with recording_step(first):
            run = store.store_run("score-wer", {"same": "config"}, rows)
        assert store.step_of(run)["key"] == "k1"
        with recording_step(second):
            assert store.store_run("score-wer", {"same": "config"}, rows) == run
        assert store.step_of(run)["key"] == "k2"
