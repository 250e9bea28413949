"""Probe data: what the probes need from a source of hidden states (``Features``: a feature-store
view, handed in by the CLI; analysis never runs a model itself), labels and standardisation. The
gender-balanced, speaker-disjoint splits are drawn by corpora.feature_request (``probe_splits``, the
rows of a probe ``Request``), the one choice of the rows the features step extracts for them.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from corpora.feature_request import CLASSES


def labels_of(rows) -> np.ndarray:
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
