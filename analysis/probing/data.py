"""Probe data: gender-balanced, speaker-disjoint splits from the utterance table, and what the
probes need from a source of hidden states (``Features``: a feature-store view, handed in by
the CLI); analysis never runs a model itself.
"""
from __future__ import annotations

import os
from typing import Protocol

import numpy as np
import pandas as pd

from corpora.base.errors import UserError
from corpora.table import speaker_genders

CLASSES = ("F", "M")            # label 0 = F (the paper's She), 1 = M (He)
SPLITS = ("train", "valid", "test")
DEFAULT_MAX_UTTS = {"train": 1000, "valid": 200, "test": 400}


def probe_splits(table: pd.DataFrame, *, seed: int = 0, split_names: dict | None = None,
                 max_utts: dict | None = None, source: str | os.PathLike = "<table>") -> dict[str, pd.DataFrame]:
    """Rows for train / valid / test, each with as many F as M utterances, speakers disjoint.

    The splits are the table's own ``split`` labels (``split_names`` maps ours to theirs,
    default train -> train, valid -> valid or dev, test -> test); rows of unknown gender (U)
    are left out. Each split is balanced by down-sampling the larger gender to the smaller
    one's count (utterance counts: the probe classifies utterances), capped at
    ``max_utts[split]`` rows in all; the draw is seeded and independent of row order.
    Raises UserError when a split is missing, holds one gender only, or shares speakers.
    """
    names = {"train": ("train",), "valid": ("valid", "dev"), "test": ("test",)}
    names.update({k: (v,) if isinstance(v, str) else tuple(v) for k, v in (split_names or {}).items()})
    caps = {**DEFAULT_MAX_UTTS, **(max_utts or {})}
    missing = [c for c in ("id", "speaker", "gender", "split") if c not in table.columns]
    if missing:
        raise UserError(f"the table has no {', '.join(missing)} column", path=source, line=1,
                        fix="probes need an utterance table (corpora.table) with id, speaker, gender, split")
    known = table[table["gender"].isin(CLASSES)]
    speaker_genders(known, source)  # a speaker with two genders is an error, not a label
    out, owner = {}, {}
    rng = np.random.default_rng(seed)
    for split in SPLITS:
        rows = known[known["split"].isin(names[split])]
        have = sorted(set(rows["gender"]))
        if have != list(CLASSES):
            labels = "/".join(names[split])
            found = f"only {have[0]} speakers" if have else "no F/M rows"
            raise UserError(f"the {split} split ({labels} rows) has {found}", path=source,
                            fix=f"a probe needs female and male speakers in every split: label some F and M "
                                f"speakers {names[split][0]!r} in the split column")
        for spk in rows["speaker"].unique():
            if spk in owner:
                raise UserError(f"speaker {spk!r} is in both the {owner[spk]} and the {split} split", path=source,
                                fix="probe splits must be speaker-disjoint: give each speaker one split label")
            owner[spk] = split
        per_gender = min(int((rows["gender"] == g).sum()) for g in CLASSES)
        per_gender = min(per_gender, max(caps[split] // 2, 1))
        parts = []
        for g in CLASSES:
            ids = np.sort(rows.loc[rows["gender"] == g, "id"].astype(str).to_numpy())
            parts.append(rng.permutation(ids)[:per_gender])
        chosen = set(np.concatenate(parts))
        out[split] = rows[rows["id"].astype(str).isin(chosen)].sort_values("id").reset_index(drop=True)
    return out


def labels_of(rows: pd.DataFrame) -> np.ndarray:
    return rows["gender"].map({g: i for i, g in enumerate(CLASSES)}).to_numpy(dtype=np.int64)


class Features(Protocol):
    """What the probes read: ``layer(ids, layer)`` -> one float32 ``[T, D]`` array per id, and
    ``n_layers`` (layers are numbered 0..n_layers-1). ssl_pretrain's feature-store views are
    one; analysis never imports them (the CLI hands them in)."""
    n_layers: int

    def layer(self, ids, layer: int) -> list[np.ndarray]: ...


def standardise(train: list[np.ndarray], *others: list[np.ndarray]) -> list[list[np.ndarray]]:
    """z-score every dimension with the train frames' mean and std (applied to all splits).

    The paper does not say it scaled the states; wav2vec 2.0 states have a few dimensions
    hundreds of times larger than the rest, which makes SGD logistic regression and Adam at
    lr 1e-4 crawl. A per-dimension affine map changes no probe's expressiveness.
    """
    frames = np.concatenate(train)
    mean, std = frames.mean(axis=0), frames.std(axis=0) + 1e-6
    return [[(s - mean) / std for s in part] for part in (train, *others)]


def parse_layers(text: str, n_layers: int, source="--layers") -> list[int]:
    """'all' -> 0..L; 'last'; '1,3' -> [1, 3]. A layer outside 0..L is a UserError."""
    text = str(text).strip().lower()
    if text == "all":
        return list(range(n_layers))
    if text == "last":
        return [n_layers - 1]
    try:
        layers = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise UserError(f"bad layer list {text!r}", path=source,
                        fix="use all, last, or comma-separated layer numbers such as 0,3,6") from None
    bad = [l for l in layers if not 0 <= l < n_layers]
    if bad or not layers:
        raise UserError(f"layer {bad[0] if bad else text!r} is out of range: this model has layers 0..{n_layers - 1} "
                        f"(0 = the transformer's input)", path=source,
                        fix=f"pass --layers all or numbers between 0 and {n_layers - 1}")
    return sorted(set(layers))
