"""A toy downstream task, declared outside gendergap as a new task would be: its config schema,
its package function, its step, its planner, the frozen features it reads, its cost estimate and
the report's title of its rows, registered with one call. Used by tests/test_steps.py to show that
a new task needs no other file touched: the plan, the cost table, a study's time table and the
report all find it.

The toy measures, per gender, the mean duration of a corpus split's utterances and the mean
number of frozen-feature frames a checkpoint gives them (read from the study's feature store,
where the checkpoint's features step put them)."""
from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import Field

from gendergap.config import TaskBase
from gendergap.steps import Graph, ModelStep, register_task, task_runtime

TYPE = "utt-seconds"
TITLE = "Mean utterance seconds and feature frames per gender, a toy task"
SECONDS = 2.0   # what the toy's cost estimate adds to a job's start-up: it reads one split's features


class UttSecondsTask(TaskBase):
    """utt-seconds: per-gender mean duration of a corpus split, scaled by `scale` (a toy)."""
    corpus: str = Field(description="table corpus whose rows are measured")
    split: str = Field("test", description="table split measured")
    scale: float = Field(1.0, description="multiplies the seconds (so a config edit changes the numbers)")
    layer: str = Field("last", description="layer whose frames are counted")


def utt_seconds(table: str, corpus: str, split: str, scale: float, checkpoint: str, db: str, *, registry: str,
                store: str, layer: str, device: str, precision: str) -> dict:
    """The package function: per gender, mean seconds x scale and mean feature frames of the rows,
    stored as one run."""
    from analysis.store import ResultsStore
    from corpora.base.provenance import file_fingerprint
    from corpora.utterances import UtteranceTable
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import FeatureStore, extractor_for

    rows = UtteranceTable.load(table).select(corpus=corpus, split=split).audio_rows()
    extractor = extractor_for(CheckpointRef.resolve(checkpoint, registry), device, precision)
    view = FeatureStore(store).view(extractor, rows, layer, progress=False)
    frames = rows["id"].map(view.n_frames)
    scores = []
    for g in ("F", "M", "all"):
        mine = rows["gender"] == g if g != "all" else rows["gender"].notna()
        common = {"checkpoint": checkpoint, "task": TYPE, "gender": g, "n_utts": int(mine.sum())}
        scores += [{**common, "metric": "seconds", "value": float(rows.loc[mine, "duration"].mean()) * scale},
                   {**common, "metric": "frames", "value": float(frames[mine].mean())}]
    config = {"kind": TYPE, "table": table, "corpus": corpus, "split": split, "scale": scale, "checkpoint": checkpoint,
              "layer": layer, "features": str(view.dir)}
    with ResultsStore(db) as results:
        results.store_run(TYPE, config, scores, name=checkpoint, inputs=[file_fingerprint(table)])
    return {"view": str(view.dir), "scores": scores}


@dataclass(kw_only=True)
class UttSecondsStep(ModelStep):
    KIND = TYPE
    table: str
    corpus: str
    split: str
    scale: float
    layer: str
    ckpt: str
    registry: str
    store: str
    db: str

    def run(self) -> None:
        utt_seconds(self.table, self.corpus, self.split, self.scale, self.ckpt, self.db, registry=self.registry,
                    store=self.store, layer=self.layer, device=self.device, precision=self.precision)
        # ~0.2 s of arithmetic: a job forked warm does almost nothing else, and the time table's CPU
        # column (tenths of a second) must have something to count
        start = time.process_time()
        while time.process_time() - start < 0.2:
            sum(range(10_000))


def plan_utt_seconds(g: Graph, tname: str, t: dict) -> None:
    for ck in g.checkpoints_of(t):
        g.add(UttSecondsStep(name=f"{tname}:{ck}", table=g.table, corpus=t["corpus"], split=t["split"],
                             scale=t["scale"], layer=g.layer(ck, t["layer"]), ckpt=ck, registry=g.registry,
                             store=g.store, db=g.db, **task_runtime(t), deps=["checkpoints", g.features_of(ck, t)],
                             task=tname, checkpoint=ck))


def features_read(g: Graph, ck: str, t: dict) -> dict:
    """The rows and layer the toy reads: its split of its corpus."""
    return {"corpus": t["corpus"], "splits": [t["split"]], "layers": g.layer(ck, t["layer"]), "probe_seed": None}


def estimate(step: UttSecondsStep, ctx) -> tuple[float | None, dict]:
    """The toy's cost (gendergap.tasks.Estimator): a job's start-up on its device and SECONDS; it
    writes nothing but rows in the results DB."""
    return ctx.figures(ctx.device(step))["job_overhead_s"] + SECONDS, {}


def register() -> None:
    register_task(TYPE, UttSecondsTask, plan_utt_seconds, features=features_read, estimate=estimate, title=TITLE)
