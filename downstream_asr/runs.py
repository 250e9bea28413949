"""An ASR run from start to hypotheses: train (or resume) a recipe, then greedy-decode a test CSV.

What `gendergap asr finetune|frozen|decode` and the sweep's ASR steps run before scoring
(gendergap/runs/asr.py hands the hypothesis and reference files to analysis). Both recipes
share this path: they differ in the trainer and the decoder only.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from corpora.base.atomic import write_json
from corpora.base.boundary import read_json
from downstream_asr.decode import read_run

TASK_OF = {"finetune": "asr-e2e", "frozen": "asr-frozen"}   # the results DB's task per recipe
# fine-tuning variants that are not the reference study's recipe file their rows under a task of their
# own (ssl_layers: all -> a weighted sum of every layer into the head), never beside the recipe's
E2E_VARIANTS = {"all": "asr-e2e-layers"}


def task_of(run: dict) -> str:
    """The results DB's task of a run directory's rows (its run.json): the recipe's, or its variant's."""
    if run.get("kind") == "finetune":
        return E2E_VARIANTS.get(str((run.get("overrides") or {}).get("ssl_layers", "last")), TASK_OF["finetune"])
    return TASK_OF[run["kind"]]


def train_run(recipe: str, model, *, train: str, valid: str, out: str, overrides: dict, hparams: str | None = None,
              data_root: str | None = None, progress: bool = True, grad_accum: int | None = None,
              ckpt_interval_minutes: float | None = None, layer: str = "all", feature_store: str | None = None,
              extra_csvs: Sequence[str] = ()) -> dict:
    """Train ``recipe`` (finetune: end-to-end CTC; frozen: a CTC head on ``layer``'s stored features)
    on ``model`` (a ssl_pretrain.model_choice.ModelChoice) in ``out``, resuming it; say how far it got
    and record the checkpoint's name in run.json. Returns the trainer's summary (``main_process``
    False on a torchrun rank > 0)."""
    common = dict(progress=progress, grad_accum=grad_accum, ckpt_interval_minutes=ckpt_interval_minutes)
    if recipe == "finetune":
        from downstream_asr.finetune import train_finetune
        summary = train_finetune(model, train, valid, Path(out), hparams, overrides, data_root, **common)
    else:
        from downstream_asr.frozen import train_frozen
        summary = train_frozen(model, layer, train, valid, Path(out), feature_store=feature_store,
                               hparams_file=hparams, overrides=overrides, data_root=data_root,
                               extra_csvs=list(extra_csvs), **common)
    summary.pop("brain")
    if summary["main_process"]:
        print(f"trained to optimizer step {summary['optimizer_step']} in {summary['train_seconds']:.0f} s"
              + (" (stopped by the budget: run again to continue)" if summary["stopped_by_budget"] else ""))
        _record_ckpt_name(Path(out), model.name)
    return summary


def decode_trained(recipe: str, ref, summary: dict, *, out: str, test: str, overrides: dict,
                   data_root: str | None = None, layer: str | None = None) -> tuple[dict, dict]:
    """Greedy-decode ``test`` with the run just trained in ``out``. Returns the transcript files'
    record and the config a result row keeps (recipe, model, overrides, SSL checkpoint, runtime,
    how an optimizer step was made)."""
    meta = _decoder(recipe)(Path(out), test, Path(test).stem, data_root, trust=ref.trusted)
    config = {"recipe": recipe, **({"layer": layer} if recipe == "frozen" else {}), "model": str(Path(out).resolve()),
              "overrides": overrides, "optimizer_step": summary["optimizer_step"], "ssl": ref.describe(),
              "runtime": meta["runtime"], "batching": meta.get("batching"),
              **{k: summary[k] for k in ("world_size", "grad_accum", "global_batch_seconds")}}
    return meta, config


def decode_model(model: str, test: str, *, name: str, data_root: str | None = None, device: str | None = None,
                 precision: str | None = None, trust: bool = False) -> tuple[dict, dict, dict]:
    """Greedy-decode ``test`` with a run directory someone hands over (`asr decode`): its model is
    rebuilt from the package's template and run.json's plain values, its checkpoints load safely
    unless ``trust``. ``device``/``precision`` default to the run's. Returns (transcripts record,
    run.json, the config a result row keeps)."""
    run = read_run(model)
    run_opts = None
    if device or precision:
        from ssl_pretrain.device import device_and_precision
        device, precision = device_and_precision(device or run["runtime"]["device"],
                                                 precision or run["runtime"]["precision"])
        run_opts = {"device": device, "precision": precision, "eval_precision": precision}
    meta = _decoder(run["kind"])(model, test, name, data_root, run_opts=run_opts, trust=trust)
    config = {"recipe": run["kind"], "model": str(Path(model).resolve()), "overrides": run.get("overrides", {}),
              "ssl": run["ssl"], "runtime": meta["runtime"], "batching": meta.get("batching")}
    return meta, run, config


def _decoder(recipe: str):
    if recipe == "finetune":
        from downstream_asr.finetune import decode_finetuned
        return decode_finetuned
    from downstream_asr.frozen import decode_frozen
    return decode_frozen


def _record_ckpt_name(out: Path, name: str) -> None:
    run = read_json(out / "run.json", "run.json", shape=dict)
    run["ckpt_name"] = name
    write_json(out / "run.json", run)
