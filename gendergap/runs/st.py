"""`st train` and `st decode` as keyword functions: downstream_st trains and decodes, analysis scores
BLEU per gender (speaker-level CIs; MuST-SHE gender accuracy) and stores the rows. The CLI leaves
and the sweep's ST steps call these same functions."""
from __future__ import annotations

from collections.abc import Sequence

from downstream_st.runs import decode_model, one_or_several, train_model
from gendergap.options import store_path
from gendergap.runs.leaf import cli_leaf


@cli_leaf("st train")
def st_train(*, train: str, valid: str, src: str, tgt: str, out: str, ckpt: str | None = None,
             layer: str = "last", trust_checkpoint: bool = False, device: str = "auto", precision: str = "fp32",
             feature_store: str | None = None, features_index: str | None = None, registry: str | None = None,
             corpus: str | None = None, train_split: str | None = None, valid_split: str | None = None,
             valid_corpus: str | None = None, preset: str = "tiny", seed: int | None = None, gpus: int = 1,
             overrides: Sequence[str] = ()) -> dict:
    """Train a speech-translation model on frozen features in ``out``: features from the store, the
    s2t data, fairseq-train, checkpoint averaging (a rerun resumes). ``seed`` is fairseq's.
    Returns train_st's summary."""
    from ssl_pretrain.device import device_and_precision
    from ssl_pretrain.model_choice import ModelChoice

    device, precision = device_and_precision(device, precision)
    model = ModelChoice.resolve(ckpt, registry, trust=trust_checkpoint, device=device, precision=precision) \
        if ckpt else None
    return train_model(model, train=train, valid=valid, src=src, tgt=tgt, out=out, device=device, precision=precision,
                       store=store_path(feature_store), layer=layer, features_index=features_index, corpus=corpus,
                       train_split=train_split, valid_split=valid_split, valid_corpus=valid_corpus, preset=preset,
                       seed=seed, gpus=gpus, overrides=overrides, trust=trust_checkpoint)


@cli_leaf("st decode")
def st_decode(*, model: str, test: str | list[str], out: str, test_split: str | None = None, corpus: str | None = None,
              beam: int | None = None, feature_store: str | None = None, features_index: str | None = None,
              device: str | None = None, precision: str | None = None, registry: str | None = None,
              no_score: bool = False, mustshe: str | None = None, bootstrap: int = 1000, seed: int = 12345,
              db: str | None = None, name: str | None = None, subset: str = "test", task: str = "st",
              trust_checkpoint: bool = False) -> dict | None:
    """Decode ``test`` with a trained ST model into ``out`` (id<TAB>text), then score BLEU per gender
    (and MuST-SHE gender accuracy with ``mustshe``), store the rows in ``db`` and write OUT.json.
    ``seed`` is the bootstrap's. Returns what OUT.json holds (None with ``no_score``)."""
    from analysis.score_runs import score_st_run

    test = one_or_several(test)   # one table: recorded as before
    d = decode_model(model=model, test=test, out=out, test_split=test_split, corpus=corpus, beam=beam,
                     feature_store=feature_store, features_index=features_index, device=device, precision=precision,
                     registry=registry, references=not no_score, trust=trust_checkpoint)
    if no_score:
        return None
    return score_st_run(refs=d["refs"], out=out, model=model, meta=d["meta"], run=d["run"], test=test, corpus=corpus,
                        test_split=test_split, runtime=d["runtime"], mustshe=mustshe, bootstrap=bootstrap, seed=seed,
                        db=db, name=name, subset=subset, task=task)
