"""`asr finetune`, `asr frozen` and `asr decode` as keyword functions: downstream_asr trains and
decodes, analysis scores WER per gender (speaker-level CIs) and stores the rows (task asr-e2e or
asr-frozen). The CLI leaves and the sweep's ASR steps call these same functions."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from downstream_asr.decode import parse_overrides, read_run
from downstream_asr.runs import decode_model, decode_trained, task_of, train_run
from gendergap.options import store_path
from gendergap.runs.leaf import cli_leaf


@cli_leaf("asr finetune")
def asr_finetune(*, ckpt: str, train: str, valid: str, out: str, registry: str | None = None,
                 trust_checkpoint: bool = False, device: str = "auto", precision: str = "fp32",
                 hparams: str | None = None, data_root: str | None = None, no_progress: bool = False,
                 grad_accum: int | None = None, ckpt_interval_minutes: float | None = None,
                 overrides: Sequence[str] = (), test: str | None = None, table: str | list[str] | None = None,
                 db: str | None = None, subset: str | None = None, bootstrap: int = 1000,
                 seed: int = 12345) -> dict | None:
    """Train an end-to-end CTC fine-tuning run in ``out`` (resuming it), then with ``test`` decode, score
    per gender and store the rows (task asr-e2e). ``seed`` is the bootstrap's. Returns the WER
    result; None without ``test``, or on a rank other than 0 under torchrun."""
    return _train_and_score("finetune", **locals())


@cli_leaf("asr frozen")
def asr_frozen(*, ckpt: str, train: str, valid: str, out: str, registry: str | None = None,
               layer: str = "all", trust_checkpoint: bool = False, device: str = "auto",
               precision: str = "fp32", feature_store: str | None = None, hparams: str | None = None,
               data_root: str | None = None, no_progress: bool = False, grad_accum: int | None = None,
               ckpt_interval_minutes: float | None = None, overrides: Sequence[str] = (),
               test: str | None = None, table: str | list[str] | None = None, db: str | None = None,
               subset: str | None = None, bootstrap: int = 1000, seed: int = 12345) -> dict | None:
    """Train a frozen-feature CTC model on ``layer`` (features from the feature store) in ``out``
    (resuming it), then with ``test`` decode, score per gender and store the rows (task asr-frozen).
    ``seed`` is the bootstrap's. Returns the WER result, or None without ``test``."""
    return _train_and_score("frozen", **locals())


def _train_and_score(recipe: str, *, ckpt, registry, trust_checkpoint, device, precision, overrides, test, table,
                     db, subset, bootstrap, seed, no_progress, feature_store=None, layer="all", **train) -> dict | None:
    from analysis.score_runs import score_asr_run, speakers_of_csv
    from ssl_pretrain.device import device_and_precision
    from ssl_pretrain.model_choice import ModelChoice

    parsed = parse_overrides(overrides)
    device, precision = device_and_precision(device, precision)
    speakers = speakers_of_csv(test, table) if test else None   # a bad table fails before training
    model = ModelChoice.resolve(ckpt, registry, trust=trust_checkpoint, device=device, precision=precision)
    frozen = dict(layer=layer, feature_store=store_path(feature_store), extra_csvs=[test] if test else []) \
        if recipe == "frozen" else {}
    summary = train_run(recipe, model, overrides=parsed, progress=not no_progress, **frozen, **train)
    if not summary["main_process"] or not test:
        return None   # under torchrun, rank 0 decodes and scores
    meta, config = decode_trained(recipe, model.ref, summary, out=train["out"], test=test, overrides=parsed,
                                  data_root=train["data_root"], layer=layer)
    return score_asr_run(meta, speakers, db=db, bootstrap=bootstrap, seed=seed, checkpoint=model.name,
                         task=task_of(read_run(train["out"])), subset=subset or Path(test).stem, config=config)


@cli_leaf("asr decode")
def asr_decode(*, model: str, test: str, name: str | None = None, data_root: str | None = None,
               ckpt_name: str | None = None, device: str | None = None, precision: str | None = None,
               table: str | list[str] | None = None, db: str | None = None, subset: str | None = None,
               bootstrap: int = 1000, seed: int = 12345, trust_checkpoint: bool = False) -> dict:
    """Greedy-decode ``test`` with a trained run directory (`asr finetune` or `asr frozen`), then score
    per gender and store the rows. The run directory is data (downstream_asr.runs.decode_model).
    Returns the WER result."""
    from analysis.score_runs import score_asr_run, speakers_of_csv

    speakers = speakers_of_csv(test, table)
    name = name or Path(test).stem
    meta, run, config = decode_model(model, test, name=name, data_root=data_root, device=device,
                                     precision=precision, trust=trust_checkpoint)
    print(f"wrote {meta['hyps']} and {meta['refs']}")
    return score_asr_run(meta, speakers, db=db, bootstrap=bootstrap, seed=seed,
                         checkpoint=ckpt_name or run.get("ckpt_name") or run["ssl"]["name"],
                         task=task_of(run), subset=subset or name, config=config)
