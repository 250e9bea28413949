"""The per-utterance mixed model of each ASR task (analysis.mixed_model): the voice measures of each
test set once (corpora.voice_measures), then one step fitting every task's models in one R process
and storing the rows the report's section "The gap by utterance" reads."""
from __future__ import annotations

import json
from dataclasses import dataclass

from corpora.base.atomic import atomic_open
from corpora.base.provenance import file_fingerprint
from gendergap.steps.base import TASKS, Graph, Step
from gendergap.steps.conditions import block_checkpoints, checkpoint_facts


@dataclass(kw_only=True)
class VoiceMeasuresStep(Step):
    """F0, speaking rate, length and level of every utterance of one test set, into a TSV; cached
    content-keyed under ``cache`` (the same segment is measured once whatever asks)."""
    KIND = "voice-measures"
    table: str
    corpus: str
    split: str
    out: str
    cache: str

    def key_extra(self) -> dict:
        from corpora.voice_measures import MEASURES_VERSION
        return {"measures_version": MEASURES_VERSION}

    def run(self) -> None:
        from corpora.utterances import UtteranceTable
        from corpora.voice_measures import measure_table, write_measures

        table = UtteranceTable.load(self.table).rows
        rows = table[(table["corpus"] == self.corpus) & (table["split"] == self.split)]
        measures = measure_table(rows, self.table, self.cache)
        write_measures(measures, self.out)
        print(f"{self.name}: {len(measures)} utterances, {measures['speaker'].nunique()} speakers -> {self.out}",
              flush=True)


@dataclass(kw_only=True)
class MixedModelStep(Step):
    """Every ASR task's mixed models, fitted in one R process, stored in the results DB (subset
    ``mixed-model``); a task of another metric is stored with the reason it is not modelled."""
    KIND = "mixed-model"
    blocks: dict          # label -> {task, pair, results, result_key, sets, references, measures}
    not_modelled: dict    # label -> {task, pair, reason}
    registry: str
    db: str
    out: str

    def run(self) -> None:
        from analysis.conditions import group_conditions
        from analysis.mixed_model import fit_study, mixed_rows, run_config
        from analysis.store import ResultsStore
        from corpora.voice_measures import read_measures

        measures = {p: read_measures(p) for p in {b["measures"] for b in self.blocks.values()}}
        blocks = {}
        for label, b in self.blocks.items():
            facts = checkpoint_facts(self.registry, b["results"], b["sets"], b["references"])
            named, _ = group_conditions(facts)
            blocks[label] = {"results": b["results"], "result_key": b["result_key"], "measures": b["measures"],
                             "conditions": named}
        res = fit_study(blocks, measures)
        for label, b in self.not_modelled.items():
            res["tasks"][label] = {"task": label, "status": "not modelled", "reason": b["reason"]}
        with ResultsStore(self.db) as store:
            for label, s in res["tasks"].items():
                b = self.blocks.get(label) or self.not_modelled[label]
                files = [file_fingerprint(p) for ps in b.get("results", {}).values() for p in ps]
                store.store_run("mixed-model", run_config(s, b["task"], b["pair"], res["versions"],
                                                          b.get("results", {})),
                                mixed_rows(s, b["task"], b["pair"], res["versions"]), name=label, inputs=files)
                line = (f"{label}: {s['status']}" + (f" ({s['reason']})" if s.get("reason") else "")
                        + (f"; {len(s.get('problems', []))} problem line(s)" if s.get("problems") else "")
                        + (f"; fits {s['seconds']:.1f} s" if s.get("seconds") else ""))
                print(line, flush=True)
        plain = {label: {k: (v.to_dict("records") if hasattr(v, "to_dict") else v) for k, v in s.items()}
                 for label, s in res["tasks"].items()}
        with atomic_open(self.out) as f:
            json.dump({"versions": res["versions"], "tasks": plain}, f, indent=1, default=float)


def plan_mixed(g: Graph) -> list[str]:
    """A voice-measures step per test set of the compared ASR tasks, and one mixed-model step."""
    from analysis.mixed_model import NOT_COUNTS

    blocks, not_modelled, deps = {}, {}, set()
    for (tname, pair), block in g.row_results.items():
        if len(block.files) < 2:
            continue
        label = tname + (f":{pair}" if pair else "")
        t = g.cfg.tasks[tname]
        if not TASKS[t["type"]].error_counts or not t.get("splits"):   # the registration says what its rows are
            metric = (block.result_key or "").upper()
            not_modelled[label] = {"task": block.task_type, "pair": pair,
                                   "reason": NOT_COUNTS.format(metric=metric) if metric == "BLEU"
                                   else f"its rows ({t['type']}) are not per-utterance error counts"}
            continue
        corpus, split = t.get("eval_corpus") or t["corpus"], t["splits"]["test"]
        name = f"voice-measures:{corpus}:{split}"
        out = str(g.out / "voice-measures" / f"{corpus}.{split}.tsv")
        if not any(s.name == name for s in g.steps):
            g.add(VoiceMeasuresStep(name=name, table=g.table, corpus=corpus, split=split, out=out,
                                    cache=str(g.out / "voice-measures" / "cache"), deps=list(g.table_deps),
                                    outputs=[out]))
        sets, references = block_checkpoints(g, block)
        blocks[label] = {"task": block.task_type, "pair": pair, "results": dict(block.files),
                         "result_key": block.result_key, "sets": sets, "references": references, "measures": out}
        deps |= set(block.deps) | {name}
    if not blocks and not not_modelled:
        return []
    out = str(g.out / "mixed-model" / "mixed_model.json")
    g.add(MixedModelStep(name="mixed-model", blocks=blocks, not_modelled=not_modelled, registry=g.registry,
                         db=g.db, out=out, outputs=[out], deps=sorted(deps | {"checkpoints"})))
    return ["mixed-model"]
