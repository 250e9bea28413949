"""Serving several consumers' feature requests from as few feature-store entries as cover them.

A study's frozen-feature tasks each want some rows of a table at some layers of one checkpoint
(frozen ASR: every layer of a corpus; ST: one layer; probes: every layer of the probe rows).
Extracting each request on its own would extract an utterance once per task; instead the
requests are merged: a request whose rows and layers an entry already holds adds nothing, one
with the same layers as an entry adds its rows to it. Rows are compared by their audio segment
(corpora.segment_content), so the same segment asked for by two corpora counts once. Each
segment is then extracted once per distinct layer set (ssl_pretrain.feature_store keys an entry
by extractor, segments and layers).
"""
from __future__ import annotations

import pandas as pd

from ssl_pretrain.feature_store import FeatureStore
from corpora.segment_content import segment_keys


def union_layers(options: list[str], n_outputs: int) -> list[int]:
    """The layer options of several tasks ("all", "last", "1", "0,2,4") as one list."""
    wanted = set()
    for option in options:
        for item in str(option).split(","):
            item = item.strip()
            if item == "all":
                return list(range(n_outputs))
            wanted.add(n_outputs - 1 if item == "last" else int(item))
    return sorted(wanted)


def cover(wanted: list[tuple[pd.DataFrame, set[int]]], segments=None) -> list[list]:
    """The store entries [rows, layer set] that serve ``wanted`` ((rows, layer set) each), merged as
    the module docstring says: what extract_covering extracts and gendergap.cost weighs.
    ``segments(rows)`` names each row's audio segment (default: its id); a request whose segments
    an entry already holds at its layers adds nothing, whatever its rows' ids and corpora."""
    segments = segments or (lambda rows: rows["id"].tolist())
    entries: list[list] = []  # [rows, layers, segment set]
    for rows, layers in sorted(wanted, key=lambda w: -len(w[1])):
        segs = set(segments(rows))
        if any(segs <= e[2] and layers <= e[1] for e in entries):
            continue
        same = next((e for e in entries if e[1] == layers), None)
        if same is not None:
            same[0] = pd.concat([same[0], rows]).drop_duplicates("id")
            same[2] |= segs
        else:
            entries.append([rows, layers, segs])
    return [[rows, layers] for rows, layers, _ in entries]


def extract_covering(store: str, extractor, requests: list[tuple[pd.DataFrame, str]]) -> list:
    """Extract what ``requests`` ((rows of an UtteranceTable, audio absolute; layer option) each) need into the store at ``store``,
    merged as the module docstring says; returns the store views written (or found)."""
    store = FeatureStore(store)
    entries = cover([(rows, set(union_layers([layers], extractor.n_outputs))) for rows, layers in requests],
                    lambda rows: segment_keys(rows, extractor.sample_rate, store.root))
    views = []
    for rows, layers in entries:
        rows = rows.reset_index(drop=True)
        views.append(store.view(extractor, rows, sorted(layers), progress=False))
    return views
