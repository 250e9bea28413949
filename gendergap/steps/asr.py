"""ASR steps: asr-e2e (wav2vec 2.0 fine-tuned with CTC) and asr-frozen (frozen features -> CTC head).

Both train with SpeechBrain, decode the test CSV and store per-gender WER: the step calls the
same function as `gendergap asr finetune` / `gendergap asr frozen` (gendergap/runs/asr.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from corpora.base.errors import UserError
from downstream_asr.decode import parse_overrides
from gendergap.config_schema import AsrE2ETask, AsrFrozenTask
from gendergap.runs import asr_finetune, asr_frozen
from gendergap.steps.base import Graph, ModelStep, StepKind, register_task, task_runtime
from gendergap.steps.conditions import declare_results
from gendergap.steps.seeds import SUBSET, add_seeded
from gendergap.steps.selection import task_data
from ssl_pretrain.families import NOT_FINETUNABLE, folder_family

RECIPES = {"asr-e2e": "finetune", "asr-frozen": "frozen"}   # the SpeechBrain recipe of each type this module registers


@dataclass(kw_only=True)
class AsrStep(ModelStep):
    """Train one ASR model on a checkpoint, decode its test CSV, store WER per gender."""
    recipe: str                 # finetune (asr-e2e) or frozen (asr-frozen)
    ckpt: str
    registry: str
    train: str
    valid: str
    test: str
    table: str
    out: str
    db: str
    bootstrap: int
    bootstrap_seed: int
    subset: str | None = None   # default: the test CSV's stem
    overrides: list = dataclasses.field(default_factory=list)
    hparams: str | None = None
    layer: str | None = None    # frozen: the layer read
    feature_store: str | None = None

    OWNS_OUTPUTS = True
    KINDS = ("asr-e2e", "asr-e2e-layers", "asr-frozen")
    KEY_NAMES = {"bootstrap_seed": "seed"}

    @property
    def kind(self) -> str:
        if self.recipe == "finetune":   # a variant of the recipe (ssl_layers=all) has rows of its own
            return "asr-e2e-layers" if "ssl_layers=all" in self.overrides else "asr-e2e"
        return "asr-frozen"

    @property
    def cost_min(self) -> float:
        return 3 if self.recipe == "finetune" else 1.5

    def key_extra(self) -> dict:
        # fine-tuned runs train, validate and decode through the batch-invariant forward
        # (downstream_asr.ctc_inference): results made before it depended on the batching
        return {"forward": "batch-invariant"} if self.recipe == "finetune" else {}

    def calls(self) -> list[tuple[Callable, dict]]:
        common = dict(ckpt=self.ckpt, registry=self.registry, train=self.train, valid=self.valid, test=self.test,
                      table=self.table, out=self.out, db=self.db, subset=self.subset, bootstrap=self.bootstrap,
                      seed=self.bootstrap_seed, hparams=self.hparams, overrides=list(self.overrides), no_progress=True,
                      device=self.device, precision=self.precision, trust_checkpoint=self.trust)
        if self.recipe == "finetune":
            return [(asr_finetune, common)]
        return [(asr_frozen, dict(common, layer=self.layer, feature_store=self.feature_store))]


def plan_asr(g: Graph, tname: str, t: dict) -> None:
    """One step per checkpoint (or one per seed, then a pooling step)."""
    data = task_data(g, t)
    frozen = RECIPES[t["type"]] == "frozen"
    for ck in g.checkpoints_of(t):
        if not frozen and g.is_baseline(ck):
            continue  # nothing to fine-tune
        if not frozen:
            _refuse_unfinetunable(g, tname, ck)
        run = Path(g.out) / tname / ck
        step = AsrStep(
            name=f"{tname}:{ck}", recipe="frozen" if frozen else "finetune", ckpt=ck, registry=g.registry,
            train=f"{data.out}/train.csv", valid=f"{data.out}/valid.csv", test=f"{data.out}/test.csv",
            table=g.table, out=str(run), db=g.db, bootstrap=g.bootstrap, bootstrap_seed=g.seed, **task_runtime(t),
            overrides=list(t["overrides"]), hparams=g.path(t["hparams"]), trust=g.trust,
            layer=g.layer(ck, t["layer"]) if frozen else None, feature_store=g.store if frozen else None,
            deps=["checkpoints", data.name] + ([g.features_of(ck, t)] if frozen else []),
            resources=dict(t["resources"]), task=tname, checkpoint=ck, outputs=[str(run)])
        seeds = g.seeds_of(t, ck)
        if not seeds:
            g.add(step)
            declare_results(g, tname, t, ck, [str(run / f"{SUBSET}.wer.json")], step.name)
            continue
        declare_results(g, tname, t, ck, [str(run / f"seed{s}" / f"{SUBSET}.wer.json") for s in seeds], step.name)
        add_seeded(g, step, [(s, dataclasses.replace(
            step, name=f"{step.name}:seed{s}", out=str(run / f"seed{s}"), subset=f"{SUBSET}@seed{s}",
            overrides=[*t["overrides"], f"seed={s}"], deps=list(step.deps), outputs=[str(run / f"seed{s}")]),
            str(run / f"seed{s}" / f"{SUBSET}.wer.json")) for s in seeds])


def _refuse_unfinetunable(g: Graph, tname: str, ck: str) -> None:
    """A family SpeechBrain cannot fine-tune (w2v-BERT) is refused at planning, so at the dry run,
    in one line on the checkpoint's config line; not hours into a sweep."""
    path = g.cfg.checkpoints[ck].get("path")
    family = folder_family(g.path(path)) if path else None
    if family is not None and not family.finetune:
        raise UserError(f"task {tname!r} fine-tunes checkpoint {ck!r}, a {family.label} model: {NOT_FINETUNABLE}",
                        path=g.cfg.path, line=g.cfg.lines.get(f"checkpoints.{ck}"),
                        fix=f"list the other checkpoints under tasks.{tname}.checkpoints")


# --- what a config entry must satisfy beyond its schema, and what a step costs --------------------

def check_asr(cfg, name: str, t: dict) -> None:
    """asr-e2e has a model to fine-tune in each checkpoint; an ASR task's `overrides:` and `hparams:`
    file are read now, as plain data (safe YAML of KEY: VALUE overrides of the recipe's template,
    downstream_asr.rundir): never as HyperPyYAML, which could run code from a file that came with
    the config; a problem is refused before any job runs."""
    from downstream_asr.rundir import check_overrides, read_hparams_file

    line, recipe = cfg.lines.get(f"tasks.{name}"), RECIPES[t["type"]]
    for ck in t["checkpoints"] or []:
        if recipe == "finetune" and cfg.checkpoints[ck]["baseline"]:
            raise UserError(f"task '{name}' fine-tunes '{ck}', a baseline without a model", path=cfg.path,
                            line=line, fix="list only pretrained checkpoints for asr-e2e (FBANK runs the frozen tasks)")
    try:   # `overrides:` (KEY=VALUE) too: keys of the template's plain values only
        check_overrides(parse_overrides(t["overrides"]), recipe)
    except UserError as e:
        raise UserError(f"task '{name}': overrides: {e.message}", path=cfg.path, line=line, fix=e.fix) from None
    if not t.get("hparams"):
        return
    path = Path(t["hparams"]).expanduser()
    path = path if path.is_absolute() else cfg.path.parent / path
    if not path.is_file():
        raise UserError(f"task '{name}': hparams file {t['hparams']} not found (paths are relative to the config)",
                        path=cfg.path, line=line, fix="give a YAML file of KEY: VALUE overrides, e.g. `lr: 1.0e-3`")
    read_hparams_file(path, recipe)


# sizes measured on the built-in study
SPEECHBRAIN_CKPT_BYTES_PER_PARAM = 4 * 3 * 2    # fp32 weights + Adam's two moments, best + interval checkpoint
HEAD_PARAMS = 5e5                               # the CTC head on top of a fine-tuned encoder (1024-d dense + output)
FROZEN_RUN_BYTES = 8.5e6                        # a frozen-ASR run dir (head checkpoints, logs, hypotheses)


def estimate_asr(j: AsrStep, ctx) -> tuple[float | None, dict]:
    """Seconds and bytes of one ASR step (gendergap.tasks.Estimator): its step budget (`max_steps`)
    at the profile's seconds per frozen step, or, fine-tuning, at the encoder's FLOPs."""
    fig = ctx.figures(ctx.device(j))
    over = parse_overrides(j.overrides)
    steps = int(float(over.get("max_steps") or 0))
    if not steps:   # no step budget: epochs x batches, which the hyper-parameters do not bound here
        return None, {j.out: FROZEN_RUN_BYTES}
    if j.recipe == "frozen":
        return steps * fig["frozen_s_per_step"] + fig["job_overhead_s"], {j.out: FROZEN_RUN_BYTES}
    f = ctx.models.facts(j.ckpt)
    if f is None:
        return None, {}
    batch = float(over.get("batch_seconds", 60))      # finetune_ctc.yaml's default
    # forward + backward ~ 3 forwards of what trains; a frozen CNN (the recipe's default) runs
    # forward only, and not at all once its output is cached (the cache's first pass not counted)
    frozen_cnn = str(over.get("freeze_feature_encoder", True)).lower() not in ("false", "0")
    cached = frozen_cnn and float(over.get("front_end_cache_mb") or 0) > 0
    trained = f["gflops"] - f["front_gflops"] if frozen_cnn else f["gflops"]
    gflop = steps * batch * (3 * trained + (0 if cached or not frozen_cnn else f["front_gflops"]))
    return (gflop / fig["train_gflops"] + steps * fig["train_overhead_s_per_step"] + fig["job_overhead_s"],
            {j.out: (f["params"] + HEAD_PARAMS) * SPEECHBRAIN_CKPT_BYTES_PER_PARAM})


# the report titles these kinds' rows itself (analysis.tables.ASR_TASK_TITLES): no title here
register_task("asr-e2e", AsrE2ETask, plan_asr, check=check_asr, estimate=estimate_asr, order=10,
              error_counts=True,
              also=[StepKind("asr-e2e-layers", estimate=estimate_asr)])   # ssl_layers=all: rows of its own
register_task("asr-frozen", AsrFrozenTask, plan_asr, features=Graph.split_request, check=check_asr,
              estimate=estimate_asr, order=20, error_counts=True)
