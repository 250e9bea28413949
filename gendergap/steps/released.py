"""asr-released: released speech models (local folders) scored per gender beside the study's checkpoints.

    tasks:
      released:
        type: asr-released
        models:
          whisper-small: {path: models/whisper-small, language: fr}
          sb-cv-fr: {path: models/asr-wav2vec2-commonvoice-fr}      # a SpeechBrain folder: sweep --trust-checkpoint
          whisper-st: {path: models/whisper-small, language: fr, task: translate, tgt: en}
        corpora: [synth-fr]      # one step per model x corpus (default: every corpus of the table at once)

Each step calls `gendergap asr transcribe` (gendergap.runs.transcribe.asr_transcribe): its rows go to the
study's results DB under task ``asr-released``, checkpoint = the model's name (``NAME@CORPUS`` with
``corpora``: one row per model x corpus), subset = the split, so the report's ASR table (Table 4) and
`score compare` take them like any ``asr-*`` row. A model with ``task: translate`` and ``tgt: LANG`` is
scored in BLEU per gender against the table's ``tgt_text_LANG`` (task ``st-released``, in Table 5);
without ``tgt`` the sweep's input checks refuse it before any job runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from pydantic import Field

from corpora.base.errors import UserError
from downstream_asr.recognisers import check_hf_folder_before_loading, detect
from gendergap.config_schema import Section, TaskBase
from gendergap.runs import asr_transcribe
from gendergap.steps.base import CheckContext, Graph, ModelStep, Problem, problems, register_task, task_runtime

TYPE = "asr-released"


class ReleasedModel(Section):
    """One released model: a local folder `asr transcribe --model` takes."""
    path: str = Field(description="local model folder (transformers, SpeechBrain, `asr export`); relative to the "
                      "config file")
    language: str | None = Field(None, description="source language of a sequence-to-sequence model (Whisper)")
    task: Literal["transcribe", "translate"] = Field("transcribe", description="sequence-to-sequence task")
    tgt: str | None = Field(None, description="task translate: the target language; BLEU per gender against the "
                            "table's tgt_text_<tgt> column (rows: task st-released, in Table 5)")
    max_new_tokens: int | None = Field(None, description="at most this many generated tokens (default: the model's)")


class AsrReleasedTask(TaskBase):
    """asr-released: released models transcribe the table's split, scored per gender (no checkpoints)."""
    models: dict[str, ReleasedModel] = Field(description="name -> {path: local model folder (relative to the config), "
                                        "language: Whisper's source "
                                        "language, task: transcribe|translate, tgt: translate's target language, "
                                        "max_new_tokens}; the name is its row "
                                        "(the task's `checkpoints` key is not used)")
    corpora: list[str] | None = Field(None, description="one step per corpus of this list (default: one step on "
                                      "every row of the split)")
    split: str = Field("test", description="table split transcribed")
    batch_seconds: float = Field(60.0, description="padded seconds of audio per batch")


@dataclass(kw_only=True)
class ReleasedStep(ModelStep):
    """One released model on one corpus (or the whole split): `asr transcribe`, rows in the results DB."""
    model_name: str
    model: str
    language: str | None
    mode: str                      # transcribe | translate
    max_new_tokens: int | None
    table: str
    split: str
    corpus: str | None
    out: str
    db: str
    batch_seconds: float
    bootstrap: int
    bootstrap_seed: int
    tgt: str | None = None         # translate: the target language scored against

    KIND = TYPE
    OWNS_OUTPUTS = True
    COST_MIN = 1.0
    ADDED_FIELDS = ("tgt",)
    KEY_NAMES = {"bootstrap_seed": "seed"}

    def calls(self) -> list[tuple[Callable, dict]]:
        return [(asr_transcribe, dict(
            model=self.model, table=self.table, split=self.split, corpus=self.corpus, out=self.out,
            name=self.model_name, language=self.language, task=self.mode, max_new_tokens=self.max_new_tokens,
            batch_seconds=self.batch_seconds, no_progress=True, device=self.device, precision=self.precision,
            trust_checkpoint=self.trust, db=self.db, bootstrap=self.bootstrap, seed=self.bootstrap_seed,
            subset=self.split, **({"tgt": self.tgt} if self.tgt else {})))]

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The model is a local folder, and the table has rows of the split (and corpus) to transcribe
        (to translate: with the target language's reference column)."""
        from corpora.checks import load_table

        found = []
        if self.mode == "translate" and not self.tgt:
            found.append(Problem(f"model {self.model_name!r}: task translate needs the target language its BLEU is "
                                 "scored in", "add `tgt: LANG` to the model (the table's tgt_text_LANG column)"))
        if not Path(self.model).is_dir():
            found.append(Problem(f"model {self.model_name!r}: {self.model} is not a local folder",
                                 "give the folder of a downloaded model (it is never fetched from a hub)"))
        else:
            try:   # a transformers folder is checked as `asr transcribe` checks it before loading
                if detect(self.model).startswith("hf-"):
                    check_hf_folder_before_loading(Path(self.model), trust=self.trust)
            except UserError as e:
                where = f"{e.path}: " if e.path else ""
                found.append(Problem(f"model {self.model_name!r}: {where}{e.message}", e.fix or ""))
        if not ctx.is_pending(self.table):
            table, problems_ = load_table(self.table)
            if table is None:
                return found + problems(problems_)
            rows = table.select(split=self.split, corpus=self.corpus or None).rows
            if rows.empty:
                found.append(Problem(f"no rows of split {self.split!r}" + (f" in corpus {self.corpus!r}" if self.corpus
                                     else "") + f" in {Path(self.table).name}", "check the task's split and corpora"))
            elif self.mode == "translate" and self.tgt and f"tgt_text_{self.tgt}" not in rows:
                found.append(Problem(f"model {self.model_name!r}: {Path(self.table).name} has no tgt_text_{self.tgt} "
                                     "column to score its translations against", "check the model's `tgt`"))
        return found


def plan_released(g: Graph, tname: str, t: dict) -> None:
    for name, m in t["models"].items():
        for corpus in t["corpora"] or [None]:
            out = Path(g.out) / tname / name / (corpus or "all")
            g.add(ReleasedStep(
                name=f"{tname}:{name}" + (f":{corpus}" if corpus else ""),
                model_name=f"{name}@{corpus}" if corpus else name, model=g.path(m["path"]),
                language=m["language"], mode=m["task"], max_new_tokens=m["max_new_tokens"], table=g.table,
                split=t["split"], corpus=corpus, out=str(out), db=g.db, batch_seconds=t["batch_seconds"],
                bootstrap=g.bootstrap, bootstrap_seed=g.seed, tgt=m["tgt"], trust=g.trust, **task_runtime(t),
                deps=list(g.table_deps),
                resources=dict(t["resources"]), task=tname, checkpoint=name, outputs=[str(out)]))


# no estimate: a released model's size is not read before it runs (a few seconds are counted, as
# before); its rows are titled by the report itself (analysis.tables.ASR_TASK_TITLES)
register_task(TYPE, AsrReleasedTask, plan_released, order=60, error_counts=True, own_models=True)
