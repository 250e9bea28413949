"""A toy downstream task, declared outside gendergap as a new task would be: its config schema,
its package function, its step and its planner, registered with one call. Used by
tests/test_steps.py to show that a new task needs no other file touched."""
from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from gendergap.config import TaskBase
from gendergap.steps import Graph, Step, register_task

TYPE = "utt-seconds"


class UttSecondsTask(TaskBase):
    """utt-seconds: per-gender mean duration of a corpus split, scaled by `scale` (a toy)."""
    corpus: str = Field(description="table corpus whose rows are measured")
    split: str = Field("test", description="table split measured")
    scale: float = Field(1.0, description="multiplies every value (so a config edit changes the numbers)")


def utt_seconds(table: str, corpus: str, split: str, scale: float, checkpoint: str, db: str) -> dict:
    """The package function: per-gender mean seconds of the rows, stored as one run."""
    from analysis.store import ResultsStore
    from corpora.base.provenance import file_fingerprint
    from corpora.table import read_table

    df = read_table(table)
    rows = df[(df["corpus"] == corpus) & (df["split"] == split)]
    means = {g: float(rows.loc[rows["gender"] == g, "duration"].mean()) * scale for g in ("F", "M")}
    means["all"] = float(rows["duration"].mean()) * scale
    config = {"kind": TYPE, "table": table, "corpus": corpus, "split": split, "scale": scale, "checkpoint": checkpoint}
    with ResultsStore(db) as store:
        if store.find_done(config, kind=TYPE) is None:
            run_id = store.start_run(TYPE, config, name=checkpoint, inputs=[file_fingerprint(table)])
            store.add_scores(run_id, [{"checkpoint": checkpoint, "task": TYPE, "gender": g, "metric": "seconds",
                                       "value": v, "n_utts": int((rows["gender"] == g).sum()) if g != "all"
                                       else len(rows)} for g, v in means.items()], finish=True)
    return means


@dataclass(kw_only=True)
class UttSecondsStep(Step):
    KIND = TYPE
    table: str
    corpus: str
    split: str
    scale: float
    ckpt: str
    db: str

    def run(self) -> None:
        utt_seconds(self.table, self.corpus, self.split, self.scale, self.ckpt, self.db)


def plan_utt_seconds(g: Graph, tname: str, t: dict) -> None:
    for ck in g.checkpoints_of(t):
        g.add(UttSecondsStep(name=f"{tname}:{ck}", table=g.table, corpus=t["corpus"], split=t["split"],
                             scale=t["scale"], ckpt=ck, db=g.db, deps=["checkpoints"] + g.table_deps,
                             task=tname, checkpoint=ck))


def register() -> None:
    register_task(TYPE, UttSecondsTask, plan_utt_seconds)
