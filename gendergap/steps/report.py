"""The report step: the study's tables and plots from the results DB (`gendergap report`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from gendergap.steps.base import Graph, Step


@dataclass(kw_only=True)
class ReportStep(Step):
    KIND = "report"
    db: str
    out: str
    registry: str
    subset: str
    data: dict = field(default_factory=dict)   # the study's data sets, for Tables 1 and 2
    # {step kind: title} of the study's task kinds whose registration titles them (gendergap.tasks.titles):
    # analysis titles the built-in ones itself, so None (and left out of the key) for a study of those
    titles: dict | None = None

    ADDED_FIELDS = ("titles",)

    def run(self) -> None:
        from analysis.report import write_report

        for path in write_report(self.db, self.out, subset=self.subset, registry=self.registry,
                                 data=self.data, titles=self.titles).values():
            print(f"wrote {path}", flush=True)


def study_data(g: Graph) -> dict:
    """What Tables 1 and 2 describe: the pretraining manifests the graph builds, and per task the
    rows it trains, validates and tests on (a selection's files, or its corpus's split labels)."""
    pretraining = {s.name.split(":", 1)[1]: s.out for s in g.steps if s.kind == "manifest"}
    for name, c in g.cfg.checkpoints.items():   # pretrained outside the study, on a manifest of its own
        if c.get("manifest") and not (c["pretrain"] or c["pretrained_on"]):
            pretraining[name] = g.path(c["manifest"])
    sets: dict[str, dict] = {}

    def add(name: str, **where) -> None:
        sets.setdefault(name, {"name": name, **where})

    for t in g.cfg.tasks.values():
        # a task training on a corpus names its splits (train, valid, test); one without them (the
        # probes draw their own from every split) trains on no set of Table 2's
        if not t.get("corpus") or not t.get("splits"):
            continue
        splits = dict(t["splits"])
        eval_corpus = t.get("eval_corpus")
        if eval_corpus and eval_corpus != t["corpus"]:
            add(t["corpus"] + " (train)", table=g.table, corpus=t["corpus"], splits={"train": splits["train"]})
            add(eval_corpus, table=g.table, corpus=eval_corpus, splits=splits)
            continue
        add(t["corpus"], table=g.table, corpus=t["corpus"], splits=splits)
        if t.get("selection"):
            add(f"{t['selection']} (selection of {t['corpus']})",
                dir=str(g.out / "selections" / t["selection"]))
    return {"pretraining": pretraining, "downstream": list(sets.values())}
