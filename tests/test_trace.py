"""`gendergap trace` (issue 31, item 1): from a cell of Table 4 and of Table 5 to the score rows,
the run, the study step and the command lines that redo exactly that step; those lines, run into
an empty directory with the same inputs, give the cell's value again, to the last digit.

A tiny sweep on the built-in corpus (frozen ASR and fr->en ST from a shipped checkpoint) makes
the report; the store keeps the run -> step link true when a second step stores the same run.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from analysis.store import ResultsStore, recording_step
from corpora.base.errors import UserError
from gendergap.cli import build_parser, main
from gendergap.cmd_trace import _move, leaf_parser, rerun_commands
from gendergap.config import CONFIG_DIR, load_config
from gendergap.plan import plan_jobs
from gendergap.runs import LEAVES, cli_leaf
from gendergap.steps import Step

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


# --- every step kind whose work is CLI leaves reaches its leaf (issue 66) ---------------------------

def _handler_calls(handler, function, args: argparse.Namespace | None = None) -> list[dict]:
    """Run a leaf's argparse handler on ``args`` with ``function`` swapped for a recorder wherever the
    handler's module names it: the keyword arguments each call got (the model itself never runs)."""
    seen: list[dict] = []
    recorder = functools.wraps(function)(lambda **kwargs: seen.append(kwargs))   # same signature: options_of
    names = [n for n, v in handler.__globals__.items() if v is function]
    saved = {n: handler.__globals__[n] for n in names}
    handler.__globals__.update(dict.fromkeys(names, recorder))
    try:
        handler(args or argparse.Namespace())
    finally:
        handler.__globals__.update(saved)
    return seen


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _plain(value):
    """Tuples as lists, and one value as a list of one: an append option (`--table T`) hands
    ``[T]``, which the functions taking ``str | list[str]`` read as ``T``."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def test_every_declared_leaf_is_the_command_that_calls_its_function():
    """@cli_leaf("asr frozen") on a function: `gendergap asr frozen` exists and its handler calls that
    very function, so a leaf named wrong (or a leaf moved) fails here, not in a reader's trace."""
    top = build_parser()
    assert {"asr frozen", "asr finetune", "st train", "st decode", "probe run",
            "asr transcribe"} <= set(LEAVES.values())
    for function, leaf in LEAVES.items():
        handler = leaf_parser(top, leaf).get_default("func")
        assert handler is not None and len(_handler_calls(handler, function)) == 1, (leaf, function.__qualname__)


def test_every_step_kind_whose_work_is_calls_reaches_its_leaf(tmp_path):
    """Each built-in step class with ``calls()``, in each of its kinds, is planned by a shipped config;
    `gendergap trace` renders every call as a command line the real parser takes, and that line hands
    the function exactly the step's keyword arguments (outputs moved under --into)."""
    top = build_parser()
    classes = {c for c in _subclasses(Step) if c.calls is not Step.calls and c.__module__.startswith("gendergap.")}
    wanted = {(c, k) for c in classes for k in (getattr(c, "KINDS", None) or (c.KIND,))}
    steps = [s for cfg in sorted(CONFIG_DIR.glob("*.yaml")) for s in plan_jobs(load_config(cfg), tmp_path / "study")
             if type(s) in classes]
    missing = wanted - {(type(s), s.kind) for s in steps}
    assert not missing, f"no shipped config plans these step kinds, so nothing checks their leaves: {missing}"
    for step in steps:
        lines = rerun_commands(step.record(), tmp_path / "redo", top)
        calls = step.calls()
        assert len(lines) == len(calls), step.name
        for line, (function, kwargs) in zip(lines, calls):
            args = top.parse_args(shlex.split(line)[1:])
            (got,) = _handler_calls(args.func, function, args)
            moved = {step.out: str(tmp_path / "redo" / Path(step.out).name),
                     step.db: str(tmp_path / "redo" / "results.db")}
            expected = {k: _plain(_move(v, moved)) for k, v in kwargs.items()}
            assert {k: _plain(got.get(k)) for k in expected} == expected, (step.name, line)


def _no_leaf(**kwargs):   # a package function no CLI leaf declares
    raise AssertionError("never called: the step is stopped before its first call")


@dataclasses.dataclass(kw_only=True)
class _ForgotItsLeaf(Step):
    """A new step kind whose work is ``calls()``, written without declaring its function's leaf."""
    KIND = "toy-forgot-its-leaf"
    out: str = "x"

    def calls(self):
        return [(_no_leaf, {"out": self.out})]


def test_a_step_kind_without_its_leaf_is_stopped_at_its_first_run_not_at_trace(monkeypatch, tmp_path):
    step = _ForgotItsLeaf(name="toy:forgot")
    with pytest.raises(TypeError,
                       match=r"_ForgotItsLeaf\.calls\(\) names .*_no_leaf, which no CLI leaf declares.*@cli_leaf"):
        step.run()
    # a run recorded by a version whose function had a leaf: trace says so in one line, no KeyError
    with pytest.raises(UserError, match="no CLI leaf declares"):
        rerun_commands({"kind": step.kind, "name": step.name, "fields": step.fields()}, "redo", build_parser())
    # a built-in kind whose function lost its @cli_leaf: stopped before it trains, refused by trace in one line
    frozen = next(s for s in plan_jobs(load_config(CONFIG_DIR / "mini.yaml"), tmp_path) if s.kind == "asr-frozen")
    monkeypatch.delitem(LEAVES, frozen.calls()[0][0])
    with pytest.raises(TypeError, match=r"AsrStep\.calls\(\) names gendergap\.runs\.asr\.asr_frozen"):
        frozen.run()
    with pytest.raises(UserError, match="'asr-frozen' now runs gendergap.runs.asr.asr_frozen, which no CLI leaf"):
        rerun_commands(frozen.record(), tmp_path / "redo", build_parser())


def test_a_leaf_the_cli_lacks_is_refused_in_one_line():
    with pytest.raises(ValueError, match="'group leaf'"):
        cli_leaf("frozen")
    with pytest.raises(UserError, match="`gendergap asr nope` is no command line"):
        leaf_parser(build_parser(), "asr nope")
