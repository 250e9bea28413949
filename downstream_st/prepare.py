"""One utterance-table file -> the rows an ST step uses, each with its feature file.

    model = ModelChoice.resolve("F-tiny", registry)          # ssl_pretrain.model_choice
    rows = prepare_rows("utterances.tsv", FeatureSource(model, layer=2, store="runs/features"),
                        corpus="synth-fr", split="train", src="fr", tgt="en")

Features come either from an SSL checkpoint + layer, read from the feature store
(ssl_pretrain.feature_store; extracted there on ``device``/``precision`` when no entry holds
them yet, and then shared with frozen ASR and the probes), or from an existing feature index
(``id, path, n_frames, dim``; paths to ``.npy`` files). Store features reach fairseq as
``shard.zip:offset:length`` pointers, its own stored-zip format: nothing is copied.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import pandas as pd

from corpora.base.errors import UserError
from corpora.feature_request import Layers
from corpora.utterances import UtteranceTable
from downstream_st.data import attach_features, read_feature_index, require_target

log = logging.getLogger(__name__)


@dataclass
class FeatureSource:
    """Where features come from: ``model``'s ``layer`` (a ssl_pretrain.model_choice.ModelChoice,
    resolved by the caller; from the store under ``store``), or a ready ``index`` file."""
    model: object = None
    layer: str | int = "last"
    store: str | None = None
    index: str | None = None
    expect_sha256: str | None = None   # decoding: the SSL checkpoint the model was trained on

    @property
    def ssl_sha256(self) -> str | None:
        ref = self.model.ref if self.model is not None and not self.index else None
        return None if ref is None or ref.is_fbank else ref.content_hash

    def describe(self) -> dict:
        return {"ssl_checkpoint": self.model.spec if self.model is not None else None, "layer": self.layer,
                "feature_store": self.store, "registry": self.model.registry if self.model is not None else None,
                "feature_index": self.index, "ssl_sha256": self.ssl_sha256}

    def index_for(self, rows: UtteranceTable, progress: bool = True) -> tuple[pd.DataFrame, str, bool]:
        """(feature index for ``rows``, where it came from, whether its files need checking)."""
        if self.index:
            return read_feature_index(self.index), self.index, True
        if self.model is None:
            raise UserError("no feature source", fix="pass --ckpt NAME --layer L, or --features-index TSV")
        if not self.store:
            raise UserError("no feature store", fix="pass --feature-store DIR")
        layer = Layers.parse(self.layer, "--layer").one("--layer")
        ref = self.model.ref
        if self.expect_sha256 and self.ssl_sha256 and self.expect_sha256 != self.ssl_sha256:
            # a copied or moved run dir whose checkpoint name now means another model: its
            # features would not be the ones the ST model was trained on
            raise UserError(f"the SSL checkpoint {self.model.spec!r} is now {ref.path} "
                            f"(sha256 {self.ssl_sha256[:12]}); "
                            f"the ST model was trained on features of sha256 {self.expect_sha256[:12]}",
                            path=ref.path, fix="pass --registry (or restore the checkpoint) naming the model it "
                            "was trained on")
        view = self.model.features(self.store, rows.audio_rows(), layer, progress=progress)
        index = view.index_table(view.layers[0])
        index["_index_line"] = 0
        return index, str(view.dir), False


def prepare_rows(table_path: str | os.PathLike | list, source: FeatureSource, *, corpus: str | None = None,
                 split: str | None = None, src: str | None = None, tgt: str | None = None,
                 expected_dim: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Read, select and check the table's rows, then attach each row's feature file.

    ``src`` filters on the table's ``lang`` column (the speech language) when the table has
    one; ``tgt`` requires a non-empty ``tgt_text_<tgt>`` on every selected row (None: not
    needed, e.g. decoding without references). The result has ``feature_path``, ``n_frames``
    and ``_line``; ``result.attrs["feature_dim"]`` is D.
    """
    loaded = UtteranceTable.load(table_path).with_lines()   # one table, or several merged (corpora.merge)
    if not len(loaded):
        raise UserError("the table has no rows", path=loaded.source, fix="give a table with utterances")
    table = loaded.rows
    lang = src if (src and "lang" in table.columns and (table["lang"].astype(str) != "").all()) else None
    chosen = loaded.select(corpus=corpus, split=split, lang=lang, strict=True)
    if tgt:
        require_target(chosen.rows, tgt, loaded.source)
    index, where, check = source.index_for(chosen, progress=progress)
    return attach_features(chosen.rows, index, where, expected_dim=expected_dim, check_files=check)
