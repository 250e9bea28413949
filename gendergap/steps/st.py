"""ST steps: st and gender-st (frozen features -> fairseq s2t), and MuST-SHE scoring.

A step trains one model, decodes the test split and stores per-gender BLEU: it calls the same
functions as `gendergap st train` and `gendergap st decode` (gendergap/runs/st.py).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from corpora.base.atomic import write_json
from corpora.feature_request import Request
from downstream_st.presets import apply_overrides, load_preset
from gendergap.config_schema import StTask
from gendergap.runs import st_decode, st_train
from gendergap.steps.base import (
    CheckContext,
    Graph,
    ModelStep,
    Problem,
    Step,
    StepKind,
    problems,
    register_task,
    task_runtime,
)
from gendergap.steps.conditions import declare_results
from gendergap.steps.seeds import SUBSET, add_seeded
from ssl_pretrain.device import FAIRSEQ_SUBNORMALS


@dataclass(kw_only=True)
class StStep(ModelStep):
    """Train an ST model on one checkpoint's features for one language pair, decode, score."""
    task_type: str              # st or gender-st: the task its rows are filed under
    ckpt: str
    layer: str
    registry: str
    feature_store: str
    table: str
    corpus: str
    splits: dict
    src: str
    tgt: str
    out: str
    preset: str
    train_seed: int
    overrides: list
    db: str
    bootstrap: int
    bootstrap_seed: int
    subset: str | None = None
    eval_corpus: str | None = None   # valid and test rows from this corpus (default: corpus)

    OWNS_OUTPUTS = True
    KINDS = ("st", "gender-st")
    ADDED_FIELDS = ("eval_corpus",)
    KEY_NAMES = {"bootstrap_seed": "seed"}
    ENGINE_IMPORTS = ("fairseq",)

    @property
    def kind(self) -> str:
        return self.task_type

    @property
    def cost_min(self) -> float:
        return 2.5 if self.task_type == "st" else 1.5   # gender-st: the smaller gender set

    def key_extra(self) -> dict:
        # fairseq trains and decodes through the batch-invariant subsampler and per-sentence length
        # caps (ssl_pretrain.fairseq_batch_invariance): results made before depended on the batching.
        # Its processes flush subnormal floats to zero (ssl_pretrain.device): the last bits moved.
        return {"forward": "batch-invariant", "subnormals": FAIRSEQ_SUBNORMALS}

    def calls(self) -> list[tuple[Callable, dict]]:
        train = dict(ckpt=self.ckpt, layer=self.layer, registry=self.registry, feature_store=self.feature_store,
                     device=self.device, precision=self.precision, trust_checkpoint=self.trust, corpus=self.corpus,
                     train=self.table, train_split=self.splits["train"], valid=self.table,
                     valid_split=self.splits["valid"], valid_corpus=self.eval_corpus, src=self.src, tgt=self.tgt,
                     out=self.out, preset=self.preset, seed=self.train_seed, overrides=list(self.overrides))
        # the study names its store: a run dir's st.json never chooses where features are written
        decode = dict(model=self.out, test=self.table, test_split=self.splits["test"], feature_store=self.feature_store,
                      corpus=self.eval_corpus or self.corpus, out=str(Path(self.out) / "test.hyp"), db=self.db,
                      name=self.ckpt, bootstrap=self.bootstrap, seed=self.bootstrap_seed, task=self.task_type,
                      trust_checkpoint=self.trust,
                      **({"subset": self.subset} if self.subset else {}))
        return [(st_train, train), (st_decode, decode)]

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The pair's rows (translations, speakers' genders, audio) and fairseq's batching of them."""
        from corpora.checks import rows_findings
        from downstream_st.train import table_batch_findings

        if ctx.is_pending(self.table):
            return []
        other = getattr(self, "eval_corpus", None)   # valid and test rows from another corpus
        found = rows_findings(self.table, self.corpus, self.splits, tgt=self.tgt, src=self.src,
                              corpus_of={"valid": other, "test": other} if other else None)
        found += table_batch_findings(self.table, self.corpus, self.splits, self.preset, self.overrides, other)
        self._toy_preset_note(ctx)
        return problems(found)

    def _toy_preset_note(self, ctx: CheckContext) -> None:
        """The `tiny` preset is a CPU toy sized for the built-in corpus: on a real corpus it would train
        without a word and give numbers no paper reports. Said once per task, blocking nothing."""
        from corpora.checks import load_table
        if Path(self.preset).stem != "tiny":
            return
        table, _ = load_table(self.table)
        if table is None:
            return
        n = len(table.select(corpus=self.corpus, split=self.splits.get("train", "train")))
        if n > TOY_PRESET_MAX_TRAIN:
            ctx.notes.append(f"task '{self.task}' trains the ST preset `tiny` (a CPU toy sized for the built-in "
                             f"corpus) on {n:,} training utterances: give it `preset: xs` (the reference study's "
                             "s2t_transformer_xs) for a real corpus")


@dataclass(kw_only=True)
class MustsheStep(Step):
    """MuST-SHE coverage and accuracy of an ST run's test hypotheses, into the results DB."""
    KIND = "mustshe"
    tsv: str
    hyps: str
    db: str
    ckpt: str
    lang_pair: str
    subset: str = "test"

    def run(self) -> None:
        from analysis.mustshe import score_mustshe, store_mustshe

        result = score_mustshe(self.tsv, self.hyps)
        write_json(str(self.hyps) + ".mustshe.json", result)
        store_mustshe(self.db, result, self.ckpt, self.lang_pair, self.subset,
                      {"mustshe": str(Path(self.tsv).resolve()), "hyps": str(Path(self.hyps).resolve())},
                      [self.tsv, self.hyps])

    def check(self, ctx: CheckContext) -> list[Problem]:
        """The MuST-SHE TSV exists, unless a step of the study writes it (or writes a file beside
        it: the built-in corpus's table and its mustshe_test.tsv come from one step)."""
        folder = Path(self.tsv).resolve().parent
        if (ctx.is_pending(self.tsv) or Path(self.tsv).is_file()
                or any(Path(o).resolve().parent == folder for o in ctx.pending)):
            return []
        return [Problem(f"the MuST-SHE TSV {self.tsv} does not exist", "fix the task's `mustshe:` path (relative "
                        "paths are relative to the table's folder)")]


def plan_st(g: Graph, tname: str, t: dict) -> None:
    """One step per checkpoint and pair (or one per seed, then a pooling step), then MuST-SHE."""
    for ck in g.checkpoints_of(t):
        for pair in t["pairs"]:
            model = Path(g.out) / tname / f"{ck}.{pair}"
            src, tgt = pair.split("-")
            step = StStep(
                name=f"{tname}:{ck}:{pair}", task_type=t["type"], ckpt=ck, layer=g.layer(ck, t["layer"]),
                registry=g.registry, feature_store=g.store, table=g.table, corpus=t["corpus"],
                splits=dict(t["splits"]), src=src, tgt=tgt, out=str(model), preset=_preset(g, t["preset"]),
                train_seed=g.seed + 1, overrides=list(t["overrides"]), db=g.db, bootstrap=g.bootstrap,
                bootstrap_seed=g.seed,
                **task_runtime(t), trust=g.trust, deps=[g.features_of(ck, t)], resources=dict(t["resources"]),
                eval_corpus=t["eval_corpus"], task=tname, checkpoint=ck, pair=pair, outputs=[str(model)])
            seeds = g.seeds_of(t, ck)
            if not seeds:
                g.add(step)
                hyp, scored = model / "test.hyp", step.name
                declare_results(g, tname, t, ck, [f"{hyp}.json"], step.name, pair=pair, result_key="bleu")
            else:
                add_seeded(g, step, result_key="bleu", per_seed=[(s, dataclasses.replace(
                    step, name=f"{step.name}:seed{s}", out=str(model / f"seed{s}"), train_seed=s,
                    subset=f"{SUBSET}@seed{s}", deps=list(step.deps), outputs=[str(model / f"seed{s}")]),
                    str(model / f"seed{s}" / "test.hyp.json")) for s in seeds])
                declare_results(g, tname, t, ck, [str(model / f"seed{s}" / "test.hyp.json") for s in seeds],
                                step.name, pair=pair, result_key="bleu")
                hyp = model / f"seed{seeds[0]}" / "test.hyp"  # MuST-SHE: the first seed's output
                scored = f"{step.name}:seed{seeds[0]}"
            if t["mustshe"]:
                g.add(MustsheStep(name=f"mustshe:{ck}:{pair}", tsv=g.path(t["mustshe"], base=Path(g.table).parent),
                                  hyps=str(hyp), db=g.db, ckpt=ck, lang_pair=pair, deps=[scored], task=tname,
                                  checkpoint=ck, pair=pair))


TOY_PRESET_MAX_TRAIN = 5000   # the built-in corpus at its largest (`small`): 4,800 training utterances


def _preset(g: Graph, preset: str) -> str:
    return preset if preset in ("xs", "tiny") else g.path(preset)


def st_request(g: Graph, ck: str, t: dict) -> Request | list[Request]:
    """The pair's own rows of its splits; with `eval_corpus`, its train split plus that corpus's
    valid and test splits."""
    own = Graph.split_request(g, ck, t)
    if not t["eval_corpus"] or t["eval_corpus"] == t["corpus"]:
        return own
    held_out = sorted({t["splits"]["valid"], t["splits"]["test"]})
    return [dataclasses.replace(own, splits=[t["splits"]["train"]]),
            dataclasses.replace(own, corpus=t["eval_corpus"], splits=held_out)]


# sizes measured on the built-in study
ST_RUN_BYTES = {"tiny": 1.15e8}                 # a fairseq s2t run dir (checkpoints, averaged model, data)
ST_CKPT_BYTES = {"xs": 1.19e8}                  # one s2t_transformer_xs checkpoint (weights + Adam, fp32)


def estimate_st(j: StStep, ctx) -> tuple[float | None, dict]:
    """Seconds and bytes of one ST step (gendergap.tasks.Estimator): its updates (`max-update`, or
    its epochs in updates) at the profile's seconds per update, training and decoding each a job."""
    fig = ctx.figures(ctx.device(j))
    preset = apply_overrides(load_preset(j.preset), j.overrides, trust=j.trust)
    updates = preset["train"].get("max-update") or _st_updates_by_epochs(j, preset, ctx)
    seconds = None if updates is None else int(float(updates)) * fig["st_s_per_update"] + 2 * fig["job_overhead_s"]
    return seconds, _st_run_bytes(j.out, j.preset, preset["train"])


def _st_run_bytes(out: str, name: str, train: dict) -> dict:
    """A run dir: measured whole for the tiny preset; else its kept checkpoints (the last
    ``keep-last-epochs``, best and last) and the averaged model (weights only: a third of one)."""
    if name in ST_RUN_BYTES:
        return {out: ST_RUN_BYTES[name]}
    if name not in ST_CKPT_BYTES:
        return {}
    kept = min(int(train.get("keep-last-epochs") or 1), int(train.get("max-epoch") or 1 << 30))
    return {out: ST_CKPT_BYTES[name] * (kept + 2 + 1 / 3)}


def _st_updates_by_epochs(j: StStep, preset: dict, ctx) -> float | None:
    """A schedule of epochs in updates: epochs x batches of ``max-tokens`` feature frames (the
    training rows under ``max_frames``, at the checkpoint's frame rate) / ``update-freq``."""
    train = preset["train"]
    f = ctx.models.facts(j.ckpt)
    if not train.get("max-epoch") or not train.get("max-tokens") or f is None or not ctx.known(j.table):
        return None
    rows = ctx.table(j.table).select(corpus=j.corpus, split=j.splits["train"]).rows
    frames = (rows["duration"].astype(float) / f["frame_shift"]).round()
    frames = frames[frames <= float(preset["data"].get("max_frames") or float("inf"))]
    batches = math.ceil(frames.sum() / float(train["max-tokens"]))
    return float(train["max-epoch"]) * math.ceil(batches / float(train.get("update-freq") or 1))


# MuST-SHE scoring waits for every ST task of the study: its stage comes after the last of them.
# Table 5 and the MuST-SHE table show these kinds' rows: no title here
MUSTSHE = StepKind(MustsheStep.KIND)
register_task("st", StTask, plan_st, features=st_request, estimate=estimate_st, order=30, also=[MUSTSHE])
register_task("gender-st", StTask, plan_st, features=st_request, estimate=estimate_st, order=40, also=[MUSTSHE])
