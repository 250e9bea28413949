"""The study's question, per task: once every row (and seed) of a task is scored, one step
compares its pretraining conditions (analysis.conditions.compare_and_store) and stores the
test rows (the primary test, the secondary and reference families) that the report's answer and
condition tables read."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gendergap.steps.base import Graph, Step


@dataclass(kw_only=True)
class ConditionsStep(Step):
    """Compare the conditions of one task (and language pair). A checkpoint's female share and file
    come from the study's registry (Table 3's F and M shares, written by the checkpoints step); the
    Δrel equivalence margin from the config's ``report: equivalence_margin`` (None: no "no change")."""
    KIND = "conditions"
    ADDED_FIELDS = ("equivalence_margin",)
    results: dict                 # checkpoint -> its runs' result JSON files (one per seed)
    result_key: str | None        # where the scoring result sits in each JSON (bleu), or None
    sets: dict                    # checkpoint -> the pretraining set it was made from (config), or None
    references: list              # checkpoints without pretraining (FBANK)
    registry: str
    db: str
    task_type: str
    lang_pair: str
    bootstrap: int
    bootstrap_seed: int
    equivalence_margin: float | None = None

    def key_extra(self) -> dict:
        # the pretraining run as the unit, test families, MDEs, the gap and ratio (issue 61): rows made
        # before have none of them, and the report cannot answer from them
        return {"inference": "run-unit+families+mde"}

    def run(self) -> None:
        from analysis.conditions import compare_and_store

        checkpoints = checkpoint_facts(self.registry, self.results, self.sets, self.references)
        res = compare_and_store(self.results, self.result_key, checkpoints, self.db, self.task_type, self.lang_pair,
                                self.bootstrap, self.bootstrap_seed, margin=self.equivalence_margin)
        if res is None:
            print(f"{self.name}: fewer than two conditions with a known female share: nothing to compare", flush=True)
            return
        primary = next((t for t in res["tests"] if t["family"] == "primary"), None)
        est = primary["estimate"]["delta_rel"] if primary else None   # None: Δrel undefined (scores of 0)
        print(f"{self.name}: {len(res['conditions'])} conditions, {len(res['tests'])} tests, unit {res['unit']}"
              + (f"; primary: {primary['name']} Δrel {est:+.2f} ({primary['status']})" if est is not None
                 else f"; primary: {primary['name']} Δrel undefined (a condition scores 0 for both genders)"
                 if primary else "; no primary test (fewer than two shares)"), flush=True)


def checkpoint_facts(registry: str, results: dict, sets: dict, references: list) -> dict[str, dict]:
    """What analysis.conditions.group_conditions takes for each checkpoint of ``results``: whether it
    is a reference row, its pretraining set, its file and female share (from the study's registry:
    Table 3's F and M shares, written by the checkpoints step)."""
    from analysis.conditions import female_share
    from analysis.report import load_registry

    registry = Path(registry)
    entries = {e["name"]: e for e in load_registry(registry)} if registry.is_file() else {}

    def path(ck):   # a registry path may be relative to the registry's folder
        p = entries.get(ck, {}).get("path")
        return str(registry.parent / p) if p and not Path(p).is_absolute() else p
    return {ck: {"reference": ck in references, "set": sets.get(ck), "path": path(ck),
                 "share": female_share(entries.get(ck, {})), "unknown_pct": entries.get(ck, {}).get("unknown_pct"),
                 "female_pct": entries.get(ck, {}).get("female_pct")} for ck in results}


@dataclass
class RowResults:
    """What a task's planner declares about one table block (a task, or a task's language pair):
    each checkpoint's result files and the step that writes the last of them."""
    task_type: str
    pair: str
    result_key: str | None
    files: dict = field(default_factory=dict)    # checkpoint -> [result JSON per seed]
    deps: list = field(default_factory=list)


def declare_results(g: Graph, tname: str, t: dict, ck: str, files: list[str], final_step: str,
                    pair: str = "", result_key: str | None = None) -> None:
    """A planner's row: ``ck``'s result files in task ``tname`` (one per seed), written by ``final_step``."""
    block = g.row_results.setdefault((tname, pair), RowResults(t["type"], pair, result_key))
    block.files[ck] = list(files)
    block.deps.append(final_step)


def block_checkpoints(g: Graph, block: RowResults) -> tuple[dict, list[str]]:
    """A block's checkpoints: each one's pretraining set (config), and those without pretraining."""
    sets = {ck: (g.cfg.checkpoints[ck].get("pretrain") or g.cfg.checkpoints[ck].get("pretrained_on"))
            for ck in block.files}
    return sets, [ck for ck in block.files if g.is_baseline(ck)]


def plan_conditions(g: Graph) -> list[str]:
    """One ConditionsStep per declared block with two or more checkpoints; returns their names."""
    names = []
    for (tname, pair), block in g.row_results.items():
        if len(block.files) < 2:
            continue
        sets, references = block_checkpoints(g, block)
        step = g.add(ConditionsStep(
            name=f"conditions:{tname}" + (f":{pair}" if pair else ""), results=dict(block.files),
            result_key=block.result_key, sets=sets, references=references,
            registry=g.registry, db=g.db, task_type=block.task_type, lang_pair=pair, bootstrap=g.bootstrap,
            bootstrap_seed=g.seed, equivalence_margin=g.d["report"].get("equivalence_margin"),
            deps=sorted(set(block.deps)) + ["checkpoints"], task=tname, pair=pair or None))
        names.append(step.name)
    return names
