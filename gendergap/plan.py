"""Expand a study config into the study graph: typed steps with dependencies and keys.

The graph: corpus -> pretraining manifests -> (pretraining) -> checkpoints -> per task:
ASR data -> asr-e2e; features (one step per checkpoint: every layer and row its frozen-feature
tasks read, into the shared feature store) -> asr-frozen / st -> MuST-SHE scoring / probes;
each task's conditions compared, and modelled per utterance with the test voices' measures (mixed
model) -> report. Each task type's planner lives in its step module (gendergap/steps/).
"""
from __future__ import annotations

import graphlib
import re
from pathlib import Path

from corpora.base.errors import UserError
from gendergap.config import StudyConfig
from gendergap.steps import Graph, Step
from gendergap.steps.conditions import plan_conditions
from gendergap.steps.data import plan_corpus
from gendergap.steps.mixed import plan_mixed
from gendergap.steps.models import plan_checkpoints, plan_features
from gendergap.steps.report import ReportStep, study_data
from gendergap.tasks import TASKS, titles


def plan_jobs(cfg: StudyConfig, out: str | Path, only: list[str] | None = None) -> list[Step]:
    """The study's steps in dependency order, each with its key (``only``: these tasks, plus
    what they need)."""
    g = Graph(cfg, Path(out).resolve())
    plan_corpus(g)
    plan_checkpoints(g)
    plan_features(g)
    task_steps: dict[str, list[str]] = {}
    for tname, t in cfg.tasks.items():
        n_before = len(g.steps)
        TASKS[t["type"]].planner(g, tname, t)
        # what later tasks and the report wait for: each row's final step (a seed's own step is pooled first)
        task_steps[tname] = [s.name for s in g.steps[n_before:]
                             if s.task == tname and not re.search(r":seed\d+$", s.name)]
    _order_after(g, task_steps)
    compared = plan_conditions(g)   # the study's question: each task's pretraining conditions compared
    compared += plan_mixed(g)       # and modelled per utterance, with the voice's own measures
    g.add(ReportStep(name="report", db=g.db, out=str(g.out / "report"), registry=g.registry,
                     subset=g.d["report"]["subset"], data=study_data(g), outputs=[str(g.out / "report")],
                     titles=titles(t["type"] for t in cfg.tasks.values()) or None,
                     deps=sorted({n for names in task_steps.values() for n in names} | {"checkpoints", *compared})))
    steps = _only(g.steps, only, cfg) if only else g.steps
    return _with_keys(steps)


def _order_after(g: Graph, task_steps: dict[str, list[str]]) -> None:
    """`after`: every step of a task waits for the other tasks' steps."""
    for tname, t in g.cfg.tasks.items():
        extra = [s for other in t["after"] for s in task_steps[other]]
        for step in g.steps:
            if step.task == tname:
                step.deps = sorted(set(step.deps) | set(extra))


def _only(steps: list[Step], only: list[str], cfg: StudyConfig) -> list[Step]:
    unknown = [t for t in only if t not in cfg.tasks and t != "report"]
    if unknown:
        raise UserError(f"--only names unknown task(s): {', '.join(unknown)}", path=cfg.path,
                        fix=f"use task names from the config: {', '.join(cfg.tasks)}")
    by_name = {s.name: s for s in steps}
    keep = {s.name for s in steps if s.task in only or (s.kind == "report" and "report" in only)}
    stack = list(keep)
    while stack:
        for dep in by_name[stack.pop()].deps:
            if dep not in keep:
                keep.add(dep)
                stack.append(dep)
    return [s for s in steps if s.name in keep]


def _with_keys(steps: list[Step]) -> list[Step]:
    """Dependency order, and each step's key from its fields and its inputs' keys."""
    names = {s.name for s in steps}
    by_name = {s.name: s for s in steps}
    for step in steps:
        step.deps = [d for d in step.deps if d in names]
    order = graphlib.TopologicalSorter({s.name: set(s.deps) for s in steps}).static_order()
    steps = [by_name[n] for n in order]
    keys: dict[str, str] = {}
    for step in steps:
        step.key = step.make_key([keys[d] for d in step.deps])
        keys[step.name] = step.key
    return steps
