"""Probe steps: gender probes on each layer's hidden states (`gendergap probe run`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from corpora.base.errors import UserError
from corpora.checks import gender_findings, load_table
from corpora.feature_request import Layers, Request
from gendergap.config_schema import ProbesTask
from gendergap.runs import probe_run
from gendergap.steps.base import CheckContext, Graph, ModelStep, Problem, problems, register_task, task_runtime


@dataclass(kw_only=True)
class ProbesStep(ModelStep):
    """Train gender probes on one checkpoint's layers (and, as a control, its random-init twin)."""
    KIND = "probes"
    COST_MIN = 1
    OWNS_OUTPUTS = True
    ckpt: str
    registry: str
    table: str
    corpus: str | None
    layers: str
    probes: list
    control: bool
    random_init: bool
    feature_store: str
    out: str
    db: str
    seed: int

    def request(self) -> Request:
        """What the probes read: the rows of their draw (the study's features step extracted them)."""
        return Request.probes(self.corpus, self.layers, self.seed)

    def calls(self) -> list[tuple[Callable, dict]]:
        return [(probe_run, dict(
            ckpt=[self.ckpt], registry=self.registry, table=self.table, corpus=self.corpus, layers=self.layers,
            probes=",".join(self.probes), control=self.control, random_init=self.random_init,
            feature_store=self.feature_store, out=self.out, db=self.db, seed=self.seed, device=self.device,
            precision=self.precision, trust_checkpoint=self.trust, quiet=True))]

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The probed corpus has rows of both genders, and the probe's train/valid/test draw (the
        corpus's split labels, U rows left out, speakers disjoint; Request.rows) finds F and M in each split."""
        if ctx.is_pending(self.table):
            return []
        found = problems(gender_findings(self.table, self.corpus))
        if found:
            return found
        table, _ = load_table(self.table)
        try:
            self.request().rows(table)
        except UserError as e:
            return [Problem(f"corpus {self.corpus or '(all)'}: {e.message}", e.fix)]
        return []


def plan_probes(g: Graph, tname: str, t: dict) -> None:
    """Probes per checkpoint; the first pretrained one also probes its random-init twin."""
    ckpts = g.checkpoints_of(t)
    twin_of = next((ck for ck in ckpts if not g.is_baseline(ck)), None)
    for ck in ckpts:
        out = str(Path(g.out) / tname / ck)
        g.add(ProbesStep(
            name=f"{tname}:{ck}", ckpt=ck, registry=g.registry, table=g.table, corpus=t["corpus"],
            layers=t["layers"] if not g.is_baseline(ck) else "all", probes=list(t["probes"]), control=t["control"],
            random_init=bool(t["random_init"] and ck == twin_of), feature_store=g.store, out=out, db=g.db,
            seed=g.seed, **task_runtime(t), trust=g.trust, deps=["checkpoints", g.features_of(ck, t)] + g.table_deps,
            resources=dict(t["resources"]), task=tname, checkpoint=ck, outputs=[out]))


def probe_rows(g: Graph, ck: str, t: dict) -> Request:
    """What the probes read: the rows probe_splits draws (with the study's seed) from every split
    of the corpus, at every layer they probe (filterbanks: their one output)."""
    return Request.probes(t["corpus"], "all" if g.is_baseline(ck) else g.layer(ck, t["layers"]), g.seed)


def estimate_probes(j: ProbesStep, ctx) -> tuple[float | None, dict]:
    """Seconds and bytes of one probes step (gendergap.tasks.Estimator): the profile's seconds per
    probe trained (layers x probe types, x2 with controls, x2 with the random-init twin), and the
    twin's features of the probe rows, which the step extracts into the store itself."""
    dev = ctx.device(j)
    fig = ctx.figures(dev)
    f = ctx.models.facts(j.ckpt)
    if f is None:
        return None, {}
    layers = Layers.parse(j.layers).resolve(f["outputs"])
    n = len(layers) * len(j.probes) * (1 + bool(j.control)) * (1 + bool(j.random_init))
    seconds, disk = n * fig["probe_s_per_layer"] + fig["job_overhead_s"], {}
    if j.random_init and ctx.known(j.table):
        rows = j.request().rows(ctx.table(j.table))
        disk = {j.feature_store: ctx.feature_bytes(rows, len(layers), f)}
        seconds += ctx.extraction_seconds(ctx.audio_seconds(rows), f, dev)
    return seconds, disk


# the report shows the probes' rows in a section of their own: no title here
register_task("probes", ProbesTask, plan_probes, features=probe_rows, estimate=estimate_probes, order=50)
