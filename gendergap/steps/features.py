"""The features step's work: a checkpoint's extraction requests, as table rows, served by the store."""
from __future__ import annotations

from corpora.base.errors import UserError


def extract_features(table: str, ckpt: str, registry: str, store: str, requests: list[dict], device: str,
                     precision: str, trust: bool = False) -> None:
    """Extract, once, what a checkpoint's frozen-feature tasks will read from the feature store.

    Each request names a corpus, splits and layers (probes: also the seed probe_splits draws its
    rows with); ssl_pretrain.feature_cover merges them into as few store entries as cover them.
    The built-in study gets one entry with every layer of synth-fr (frozen ASR, fr->en ST, probes)
    and one with layer 1 of the gender set (en->fr ST).
    """
    from corpora.table import read_table
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.device import device_and_precision
    from ssl_pretrain.feature_cover import extract_covering
    from ssl_pretrain.feature_store import extractor_for

    device, precision = device_and_precision(device, precision)
    df = read_table(table)
    extractor = extractor_for(CheckpointRef.resolve(ckpt, registry, trust=trust), device, precision)
    wanted = [(_rows(df, req, table), req["layers"]) for req in requests]
    for view in extract_covering(store, extractor, table, wanted):
        print(f"features of {ckpt}: {len(view)} utterances, layers {view.layers}, {device} {precision} "
              f"-> {view.dir}", flush=True)


def _rows(df, req: dict, table: str):
    """A request's rows of the table (probes: the rows probe_splits draws with its seed)."""
    import pandas as pd

    from analysis.probing import probe_splits

    rows = df[df["split"].isin(req["splits"]) & ((df["corpus"] == req["corpus"]) if req["corpus"] else True)]
    if rows.empty:
        raise UserError(f"no rows of corpus {req['corpus']!r} in splits {req['splits']} for a frozen-feature task",
                        path=table, fix="check the tasks' corpus and splits in the study config")
    if req.get("probe_seed") is not None:
        rows = pd.concat(probe_splits(rows, seed=req["probe_seed"], source=table).values())
    return rows
