"""An ST run from a table to hypotheses: features from the store, the s2t data, fairseq-train and
checkpoint averaging; then beam search on a test table and its reference file.

What `gendergap st train|decode` and the sweep's ST steps run before scoring
(gendergap/runs/st.py hands the hypothesis and reference files to analysis).
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from corpora.base.boundary import inside
from corpora.base.errors import UserError
from corpora.feature_request import Layers
from downstream_st.fairseq_flags import check_flags


def feature_source(*, model, layer: str, features_index: str | None, store: str):
    """Where the features come from: ``model``'s ``layer`` through the feature store, or a ready index."""
    from downstream_st.prepare import FeatureSource

    if model is None and not features_index:
        raise UserError("no features: pass --ckpt (and --layer), or --features-index",
                        fix="e.g. --ckpt F-tiny --layer 1")
    one = Layers.parse(layer, "--layer").one("--layer")   # one layer's features (a number or "last"), as recorded
    return FeatureSource(model, layer=one, store=store, index=features_index)


def limit_threads(preset: dict) -> None:
    """Feature extraction runs in this process: give torch the preset's thread count (on a
    shared CPU, one thread per process avoids oversubscription; see benchmarks/bench_st_threads.py)."""
    if preset.get("cpu_threads"):
        import torch
        torch.set_num_threads(int(preset["cpu_threads"]))


def one_or_several(table):
    """A table argument as given (repeated --train, --valid, --test: a list): one path as itself, so a
    one-table run records what it always did; several as a list (merged as corpora.merge does)."""
    if isinstance(table, (list, tuple)):
        return str(table[0]) if len(table) == 1 else [str(t) for t in table]
    return table


def _resolved(table):
    return [str(Path(t).resolve()) for t in table] if isinstance(table, list) else str(Path(table).resolve())


def train_model(model, *, train: str | list[str], valid: str | list[str], src: str, tgt: str, out: str, device: str,
                precision: str, store: str, layer: str = "last", features_index: str | None = None,
                corpus: str | None = None, train_split: str | None = None, valid_split: str | None = None,
                valid_corpus: str | None = None, preset: str = "tiny", seed: int | None = None, gpus: int = 1,
                overrides: Sequence[str] = (), trust: bool = False) -> dict:
    """Train a speech-translation model on the features of ``model``'s ``layer`` (a
    ssl_pretrain.model_choice.ModelChoice; None with a ready ``features_index``) in ``out`` (a rerun
    resumes), then average its last checkpoints. ``device``/``precision``: fairseq's (the model's
    when there is one). ``trust``: the preset's and overrides' flags and values beyond FLAGS. Returns
    train_st's summary."""
    from downstream_st.prepare import prepare_rows
    from downstream_st.presets import apply_overrides, load_preset, on_device, on_gpus
    from downstream_st.train import train_st
    from ssl_pretrain.device import runtime_info

    train, valid = one_or_several(train), one_or_several(valid)
    overrides = list(overrides) + ([f"seed={seed}"] if seed is not None else [])
    recipe = on_gpus(on_device(apply_overrides(load_preset(preset), overrides, trust=trust), device, precision), gpus)
    limit_threads(recipe)
    source = feature_source(model=model, layer=layer, features_index=features_index, store=store)
    started = time.time()
    train_rows = prepare_rows(train, source, corpus=corpus, split=train_split, src=src, tgt=tgt)
    valid_corpus = valid_corpus or corpus
    valid_rows = prepare_rows(valid, source, corpus=valid_corpus, split=valid_split, src=src, tgt=tgt,
                              expected_dim=train_rows.attrs["feature_dim"])
    meta = {**source.describe(), "runtime": runtime_info(device, precision), "preset_name": str(preset),
            "overrides": overrides,
            "tables": {"train": _resolved(train), "valid": _resolved(valid)},
            "selection": {"corpus": corpus, "train_split": train_split, "valid_split": valid_split,
                          "valid_corpus": valid_corpus}}
    summary = train_st(train_rows, valid_rows, out, preset=recipe, src_lang=src, tgt_lang=tgt,
                       feature_dim=train_rows.attrs["feature_dim"], meta=meta, train_source=train,
                       valid_source=valid, trust=trust)
    data = summary["data"]
    print(f"trained {src}->{tgt} on {data['rows']['train']} utterances "
          f"({data['dropped']['train']} dropped over {recipe['data']['max_frames']} frames), "
          f"averaged {len(summary['averaged'])} checkpoint(s) -> {Path(out) / summary['checkpoint']} "
          f"in {time.time() - started:.0f} s")
    return summary


def decode_store(feature_store: str | None, meta: dict, model: str, out: str) -> str:
    """Where a decode reads and extracts its features. A handed run dir is read, never written: its
    st.json may name any folder (or, moved out of its study, the study's), so its store is used only
    when it lies inside the run dir; else the store the command names, else a fresh one beside --out."""
    if feature_store:
        return feature_store
    named = meta.get("feature_store")
    if isinstance(named, str) and named:
        try:
            return str(inside(model, named, "feature store"))
        except UserError:
            pass   # outside the run dir: not ours to write into
    return str(Path(out).resolve().with_name(Path(out).name + ".work") / "features")


def _check_before_decoding(model: str, meta: dict, trust: bool) -> None:
    """The run dir's decoding flags and values, its averaged checkpoint (the safe loader) and its
    model files' sha256 (the ones it trained), refused in one line before features are extracted
    (decode_st checks them again where it uses them)."""
    from downstream_st.train import check_model_files
    from ssl_pretrain.safe_load import check_before_fairseq
    check_flags("decode", dict(meta["preset"].get("decode", {})), source=Path(model) / "st.json", trust=trust)
    check_before_fairseq([p for p in [Path(meta["checkpoint"])] if p.is_file()], trust=trust)
    check_model_files(model, meta, trust)


def decode_model(*, model: str, test: str | list[str], out: str, test_split: str | None = None,
                 corpus: str | None = None,
                 beam: int | None = None, feature_store: str | None = None, features_index: str | None = None,
                 device: str | None = None, precision: str | None = None, registry: str | None = None,
                 references: bool = True, trust: bool = False) -> dict:
    """Beam-search ``test`` with the model dir ``model`` into ``out`` (id<TAB>text) and, with
    ``references``, write the reference file beside it. The model dir is untrusted: its decoding flags
    must be on the allowlist with values of their types and its averaged checkpoint must load safely,
    unless ``trust``; its files must be the ones it trained (st.json's sha256 record).
    ``device``/``precision`` default to the training run's. Returns {meta, run, refs, runtime}."""
    from downstream_st.data import data_config_files
    from downstream_st.decode import decode_st, write_references
    from downstream_st.prepare import FeatureSource, prepare_rows
    from downstream_st.presets import on_device
    from downstream_st.train import read_model_meta
    from ssl_pretrain.device import device_and_precision, runtime_info

    test = one_or_several(test)
    meta = read_model_meta(model)
    # what a handed run dir names is checked before any work: its data config's files, its decoding
    # flags (an allowlist) and the checkpoint fairseq-generate will load (the safe loader)
    data_config_files(Path(model) / "data" / "config.yaml")
    _check_before_decoding(model, meta, trust)
    device, precision = device_and_precision(device or meta["preset"]["device"],
                                             precision or meta["preset"]["precision"])
    meta["preset"] = on_device(meta["preset"], device, precision)
    limit_threads(meta["preset"])
    index = features_index or (meta.get("feature_index") if not meta.get("ssl_checkpoint") else None)
    ssl = None
    if not index and meta.get("ssl_checkpoint"):   # the name st.json records, resolved as the user's choice says
        from ssl_pretrain.model_choice import ModelChoice  # torch: kept out of --help
        ssl = ModelChoice.resolve(meta["ssl_checkpoint"], registry or meta.get("registry"), trust=trust,
                                  device=device, precision=precision)
    source = FeatureSource(ssl, layer=meta.get("layer", "last"), store=decode_store(feature_store, meta, model, out),
                           index=index, expect_sha256=meta.get("ssl_sha256"))
    rows = prepare_rows(test, source, corpus=corpus, split=test_split, src=meta["src_lang"],
                        tgt=meta["tgt_lang"] if references else None, expected_dim=int(meta["feature_dim"]))
    started = time.time()
    run = decode_st(model, meta, rows, out, beam=beam, trust=trust)
    print(f"decoded {len(rows)} utterance(s) with beam {run['beam']} in {time.time() - started:.0f} s -> {out}")
    refs = write_references(rows, meta["tgt_lang"], Path(run["work_dir"]) / "refs.tsv") if references else None
    return {"meta": meta, "run": run, "refs": refs, "runtime": runtime_info(device, precision)}
