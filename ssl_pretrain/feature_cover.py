"""Serving several consumers' feature requests from as few feature-store entries as cover them.

A study's frozen-feature tasks each want some rows of a table at some layers of one checkpoint
(frozen ASR: every layer of a corpus; ST: one layer; probes: every layer of the probe rows).
Extracting each request on its own would extract an utterance once per task; instead the
requests are merged: a request whose rows and layers an entry already holds adds nothing, one
with the same layers as an entry adds its rows to it. Rows are compared by their audio segment
(corpora.segment_content), so the same segment asked for by two corpora counts once. Each
segment is then extracted once per distinct layer set (ssl_pretrain.feature_store keys an entry
by extractor, segments and layers).

A request is a corpora.feature_request.Request: its rows are ``Request.rows(table)`` (the one
choice of them, the probes' draw included) and its layers ``Request.layers`` resolved against the
model's outputs. ``extract_requests`` is what the study's features step runs.
"""
from __future__ import annotations

import pandas as pd

from corpora.feature_request import Layers, Request
from corpora.segment_content import segment_keys
from corpora.utterances import UtteranceTable
from ssl_pretrain.feature_store import FeatureStore


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


def extract_requests(model, table: str | list[str], store: str, requests: list) -> list:
    """Extract, once, what ``model``'s (a ssl_pretrain.model_choice.ModelChoice) frozen-feature
    consumers read of ``table``: each of ``requests`` (Requests, or dicts of their fields) is its
    ``rows`` of the table at its layers, merged into as few store entries under ``store`` as cover
    them (the module doc). The built-in study gets one entry with every layer of synth-fr (frozen
    ASR, fr->en ST, probes) and one with layer 1 of the gender set (en->fr ST). Returns the views."""
    loaded = UtteranceTable.load(table)
    loaded.audio_rows()   # a piped or special audio row is refused before any extraction
    wanted = [(req.rows(loaded), req.layers) for req in map(Request.of, requests)]
    views = extract_covering(store, model.extractor, wanted)
    for view in views:
        print(f"features of {model.spec}: {len(view)} utterances ({view.n_segments} audio segments), "
              f"layers {view.layers}, "
              f"{model.device} {model.precision} -> {view.dir}", flush=True)
    asked = len({uid for rows, _ in wanted for uid in rows["id"]})
    stored = sum(view.n_segments for view in views)
    if stored < asked:
        print(f"features of {model.spec}: {asked - stored} of {asked} rows share their audio segment with another row "
              f"(the same file content, offset and length): extracted once, not again", flush=True)
    return views


def extract_covering(store: str, extractor, requests: list[tuple[pd.DataFrame, object]]) -> list:
    """Extract what ``requests`` ((rows of an UtteranceTable, audio absolute; their Layers or layer spec)
    each) need into the store at ``store``, merged as the module docstring says; returns the store
    views written (or found)."""
    store = FeatureStore(store)
    entries = cover([(rows, set(Layers.parse(layers).resolve(extractor.n_outputs))) for rows, layers in requests],
                    lambda rows: segment_keys(rows, extractor.sample_rate, store.root))
    views = []
    for rows, layers in entries:
        rows = rows.reset_index(drop=True)
        views.append(store.view(extractor, rows, sorted(layers), progress=False))
    return views
