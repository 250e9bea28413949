"""Selection steps: a gender/hours subset of a corpus (`selections:` in the study config) that a
task trains and validates on, built by manifests.task_selection (the code of `manifest build`)."""
from __future__ import annotations

from dataclasses import dataclass

from corpora.base.errors import UserError
from gendergap.steps.base import CheckContext, Graph, Problem, Step, problems
from gendergap.steps.data import asr_data


@dataclass(kw_only=True)
class SelectionStep(Step):
    """SpeechBrain CSVs: train/valid from the selection, test from the corpus's test split."""
    KIND = "selection"
    COST_MIN = 0.1
    table: str
    corpus: str
    gender: str
    hours: float | None
    hours_per_gender: float | None
    valid_hours: float | None
    splits: dict
    seed: int
    out: str

    def run(self) -> None:
        from manifests.task_selection import build_task_selection

        report = build_task_selection(self.table, self.out, corpus=self.corpus, gender=self.gender, hours=self.hours,
                                      hours_per_gender=self.hours_per_gender, valid_hours=self.valid_hours,
                                      splits=self.splits, seed=self.seed)
        print(f"selection {self.name}: " + "; ".join(
            f"{split} {s['all']['seconds'] / 3600:.2f} h ({s['all']['speakers']} spk)"
            for split, s in report["splits"].items()), flush=True)

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The corpus and its splits have rows, the test speakers a gender, the audio readable
        (corpora.checks), as for a task's own splits; then the selection itself is drawn from the
        rows in memory (the code `manifest build` runs), so hours the corpus cannot give are refused
        on the selection's own key now, not after the extractions before it have run."""
        from corpora.checks import load_table, rows_findings
        from manifests.task_selection import draw_selection

        if ctx.is_pending(self.table):
            return []
        found = problems(rows_findings(self.table, self.corpus, self.splits))
        loaded, _ = load_table(self.table)
        if found or loaded is None:
            return found
        name = self.name.split(":", 1)[1]
        try:
            draw_selection(loaded.rows, self.corpus, self.gender, hours=self.hours,
                           hours_per_gender=self.hours_per_gender, valid_hours=self.valid_hours,
                           splits=self.splits, seed=self.seed, source=self.table)
        except UserError as e:
            asked = ["valid_hours"] if e.message.startswith("valid") else ["hours_per_gender", "hours"]
            key = next((f"selections.{name}.{k}" for k in asked if getattr(self, k) is not None), f"selections.{name}")
            return [Problem(e.message, f"ask `{key}` for what the corpus holds, or leave it out to take all it "
                            "allows", key)]
        return []


def selection_step(g: Graph, name: str) -> SelectionStep:
    """The step building selection ``name`` (one per selection, shared by the tasks naming it)."""
    step_name = f"selection:{name}"
    for s in g.steps:
        if s.name == step_name:
            return s
    sel = g.cfg.data["selections"][name]
    out = str(g.out / "selections" / name)
    return g.add(SelectionStep(name=step_name, table=g.table, corpus=sel["corpus"], gender=sel["gender"],
                               hours=sel["hours"], hours_per_gender=sel["hours_per_gender"],
                               valid_hours=sel["valid_hours"], splits=dict(sel["splits"]), seed=g.seed,
                               out=out, deps=list(g.table_deps), outputs=[out]))


def task_data(g: Graph, t: dict) -> Step:
    """Where an ASR task's train/valid/test CSVs come from: its selection, else its corpus's splits."""
    return selection_step(g, t["selection"]) if t.get("selection") else asr_data(g, t)
