"""A task kind is declared once (issue 48): its registration (gendergap.tasks.register_task) brings
its schema, planner, features, config checks, cost estimate, place in the stage order and report
title, and every table that used to be kept by kind name is derived from the registrations.

Here, without running anything: the built-in registrations give exactly the tables gendergap kept
by hand before (stage order, estimated kinds, type order), no wiring module names a task kind, and
a kind registered from outside gendergap (tests/toy_task.py) lands in each derived table. The toy's
run through a real study (plan, dry-run cost table, time table, report) is
tests/test_steps.py::test_a_toy_task_runs_through_the_sweep."""
from __future__ import annotations

import ast
import contextlib
import io
from pathlib import Path

import pytest

import toy_task
from analysis.tables import ASR_TASK_TITLES
from gendergap import config, cost
from gendergap.config import CONFIG_DIR, load_config, task_types
from gendergap.plan import plan_jobs
from gendergap.study import print_stages, stage_order
from gendergap.tasks import TASKS, StepKind, register_task, step_kinds, titles

ROOT = Path(__file__).resolve().parent.parent
# the tables kept by hand before issue 48 (gendergap/study.py, gendergap/cost.py, gendergap/config_schema.py)
OLD_STAGE_ORDER = ("corpus", "manifest", "pretrain", "checkpoints", "asr-data", "features", "asr-e2e", "asr-e2e-layers",
                   "asr-frozen", "st", "gender-st", "mustshe", "probes", "seeds", "conditions", "report")
OLD_ESTIMATED = {"features", "asr-e2e", "asr-e2e-layers", "asr-frozen", "st", "gender-st", "probes", "pretrain",
                 "corpus"}
OLD_TYPE_ORDER = ("asr-e2e", "asr-frozen", "st", "gender-st", "probes")


@pytest.fixture
def toy():
    """The toy type registered for this test only (the registry restored after)."""
    task_types()
    saved = dict(TASKS)
    toy_task.register()
    yield toy_task
    TASKS.clear()
    TASKS.update(saved)


def test_the_builtin_registrations_give_the_tables_kept_by_hand_before():
    assert task_types() == (*OLD_TYPE_ORDER, "asr-released") == config.TASK_TYPES
    # the time table: the same order, and now the kinds it silently left out (merge, selection, asr-released)
    assert stage_order(OLD_STAGE_ORDER) == list(OLD_STAGE_ORDER)
    assert stage_order(["report", "asr-released", "selection", "features", "merge", "corpus"]) == [
        "corpus", "merge", "selection", "features", "asr-released", "report"]
    # the cost table: a model of its own for the same kinds, a few seconds for the others
    for kind in {*OLD_STAGE_ORDER, "merge", "selection", "asr-released"}:
        assert (cost.estimator(kind) is not cost._fixed) == (kind in OLD_ESTIMATED), kind
    # the report: analysis titles every built-in ASR kind itself, so a study hands it no titles
    assert all(k.name in ASR_TASK_TITLES for k in step_kinds() if k.name.startswith("asr"))
    assert titles(task_types()) == {}
    jobs = plan_jobs(load_config(CONFIG_DIR / "mini.yaml"), "/tmp/never-written")
    assert next(j for j in jobs if j.kind == "report").titles is None   # so its key is the one it had


def _constants(path: Path) -> list[tuple[int, str]]:
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def test_no_wiring_module_names_a_task_kind():
    """Only the step module registering a kind names it: the cost model, the stage order, the config
    checks, the plan and the sweep derive what they need from the registrations. (The command-line
    modules and gendergap/runs/ name commands, `st` and `score mustshe`, not kinds.)"""
    task_types()
    declared_in = {k.name: t.planner.__module__ for t in TASKS.values() for k in t.kinds}
    found = []
    for path in sorted((ROOT / "gendergap").rglob("*.py")):
        rel = path.relative_to(ROOT)
        module = ".".join(rel.with_suffix("").parts)
        if rel.name.startswith("cmd_") or rel.name == "cli.py" or rel.parts[1] == "runs":
            continue
        found += [f"{rel}:{line}: {value!r}" for line, value in _constants(path)
                  if value in declared_in and declared_in[value] != module]
    assert not found, "task kinds named outside the module that registers them:\n" + "\n".join(found)


def test_a_kind_registered_outside_gendergap_is_in_every_derived_table(toy, tmp_path):
    assert task_types()[-1] == toy.TYPE and toy.TYPE not in config.TASK_TYPES   # after the built-in types
    assert [k.name for k in step_kinds()][-1] == toy.TYPE
    assert stage_order(["report", toy.TYPE, "corpus", "features"]) == ["corpus", "features", toy.TYPE, "report"]
    assert cost.estimator(toy.TYPE) is toy.estimate
    assert titles([toy.TYPE, "asr-frozen"]) == {toy.TYPE: toy.TITLE}
    path = tmp_path / "c.yaml"
    path.write_text("corpus: {synth: tiny}\ncheckpoints: {F-tiny: {shipped: tiny-female}}\n"
                    f"tasks: {{s: {{type: {toy.TYPE}, corpus: synth-fr}}, asr-frozen: {{corpus: synth-fr}}}}\n")
    report = next(j for j in plan_jobs(load_config(path), tmp_path / "o") if j.kind == "report")
    assert report.titles == {toy.TYPE: toy.TITLE} and report.fields()["titles"] == report.titles   # in its key


def test_the_time_table_leaves_no_kind_out():
    """A kind no registration and no study stage knows is listed last, not dropped."""
    rows = [{"job": n, "kind": k, "seconds": 2.0, "started": 0.0, "finished": 2.0}
            for n, k in (("r", "report"), ("x", "some-kind"), ("c", "corpus"))]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_stages(rows, 9.0)
    lines = buf.getvalue().strip().splitlines()
    assert [line.split()[0] for line in lines[1:4]] == ["corpus", "report", "some-kind"], lines
    # no CPU time counted (done.json files of an older version): a dash, not a made-up zero
    assert all(line.split()[4] == "-" for line in lines[1:4]), lines


def test_the_time_table_sums_cpu_seconds_per_stage():
    rows = [{"job": n, "kind": "st", "seconds": 10.0, "cpu_s": c, "started": 0.0, "finished": 10.0}
            for n, c in (("a", 7.5), ("b", 9.0))]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_stages(rows, 12.0)
    st = buf.getvalue().strip().splitlines()[1].split()
    assert st[:6] == ["st", "2", "20.0", "s", "16.5", "s"], st


def test_a_registration_is_refused_when_it_would_change_a_kind(toy):
    toy.register()   # the same declaration again: nothing changes
    with pytest.raises(ValueError, match="already registered"):
        register_task(toy.TYPE, toy.UttSecondsTask, toy.plan_utt_seconds, features=toy.features_read,
                      estimate=toy.estimate, title="another title")
    with pytest.raises(TypeError, match="estimate"):
        register_task("toy-2", toy.UttSecondsTask, toy.plan_utt_seconds, estimate=3.0)
    with pytest.raises(ValueError, match="also"):
        register_task("toy-2", toy.UttSecondsTask, toy.plan_utt_seconds, also=[StepKind("toy-2")])
    with pytest.raises(ValueError, match="'mustshe' is already declared otherwise"):   # st's scoring step
        register_task("toy-2", toy.UttSecondsTask, toy.plan_utt_seconds, also=[StepKind("mustshe", toy.estimate)])
    assert "toy-2" not in TASKS and TASKS[toy.TYPE].kinds[0].title == toy.TITLE


def test_the_report_heads_a_kind_with_the_title_it_is_handed(tmp_path):
    """A new ASR kind's Table 4 block and another kind's line under "Other scores" carry the titles
    handed in; analysis' own kinds keep theirs, and without titles a new kind shows its bare name."""
    from analysis.report import write_report
    from analysis.store import ResultsStore

    def row(task, gender, metric, value):
        return {"checkpoint": "F-tiny", "task": task, "lang_pair": "", "subset": "test", "gender": gender,
                "metric": metric, "value": value, "ci_low": None, "ci_high": None, "n_utts": 10, "n_speakers": 2}
    db = tmp_path / "r.db"
    with ResultsStore(db) as store:
        rid = store.start_run("x", {}, seed=1)
        store.add_scores(rid, [row(t, g, "wer", v) for t in ("asr-new", "asr-frozen")
                               for g, v in (("F", 10.0), ("M", 12.0), ("all", 11.0))]
                         + [row(toy_task.TYPE, "all", "seconds", 1.5)])
    given = {"asr-new": "A new recogniser", toy_task.TYPE: toy_task.TITLE}
    write_report(db, tmp_path / "with", titles=given)
    md = (tmp_path / "with" / "report.md").read_text(encoding="utf-8")
    assert "**A new recogniser — asr-new**" in md and f"**{ASR_TASK_TITLES['asr-frozen']} — asr-frozen**" in md
    assert f"task(s) {toy_task.TYPE} ({toy_task.TITLE}): see" in md
    write_report(db, tmp_path / "without")
    md = (tmp_path / "without" / "report.md").read_text(encoding="utf-8")
    assert "**asr-new — asr-new**" in md and f"task(s) {toy_task.TYPE}: see" in md
