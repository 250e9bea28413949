"""What `gendergap ckpt add|eval|features` do with a checkpoint: register it with its pretraining
make-up, score it next to its random-init twin, extract its frozen features into the store."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from corpora.feature_request import Layers
from ssl_pretrain.checkpoints import register_checkpoint
from ssl_pretrain.model_choice import ModelChoice
from ssl_pretrain.registry import Registry

TWIN = "random-init twin"


def add_checkpoint(*, registry: str | None, name: str, path: str | os.PathLike, hours: float | None = None,
                   male_pct: float | None = None, female_pct: float | None = None, unknown_pct: float | None = None,
                   manifest: str | None = None, updates: int | None = None, replace: bool = False, note: str = "",
                   trust_checkpoint: bool = False) -> tuple[dict, Path]:
    """Check and register the checkpoint at ``path`` (ssl_pretrain.registry.run_checkpoint's answer);
    the (entry, registry file). Shares not given are measured on ``manifest`` (a `manifest build`
    dir: its selection_report.json) when one is named."""
    shares = {"hours": hours, "male_pct": male_pct, "female_pct": female_pct, "unknown_pct": unknown_pct}
    if manifest:   # Table 3's facts measured on the manifest it was pretrained on (given ones win)
        from manifests.build import make_up
        shares = {k: v if v is not None else make_up(Path(manifest) / "selection_report.json")[k]
                  for k, v in shares.items()}
    entry = register_checkpoint(Registry(registry), name, path, **shares, updates=updates, replace_entry=replace,
                                note=note, trust=trust_checkpoint, manifest=manifest)
    return entry, Registry(registry).path


def contrastive_text(model: ModelChoice, *, manifest: str, split: str, seed: int) -> str:
    """The wav2vec 2.0 objective's accuracy of ``model`` and of its random-init twin, as `ckpt eval` prints it."""
    from ssl_pretrain.evaluate import contrastive_accuracy

    ref, device = model.ref, model.device
    rows = [contrastive_accuracy(r, manifest, split, seed=seed, device=device) for r in (ref, ref.twin(seed))]
    lines = [f"contrastive accuracy on {manifest}/{split}.tsv ({rows[0]['n_masked']} masked frames, "
             f"chance {rows[0]['chance']:.3f}, seed {seed}, {device}, fp32: fairseq's forward does not run "
             "under autocast)"]
    lines += [f"  {name:30s} accuracy {r['accuracy']:.3f}  code perplexity {r['code_perplexity']:.1f}"
              f" / {r['codebook_size']}" for name, r in zip((ref.name, TWIN), rows)]
    return "\n".join(lines)


def table_rows(table: list[str], split: str | None):
    """The rows of the utterance table(s) (several are merged as corpora.merge does) to read audio
    of, only ``split``'s when given."""
    from corpora.utterances import UtteranceTable
    return UtteranceTable.load(table).select(split=split or None).audio_rows()


def retrieval_lines(model: ModelChoice, *, table: list[str], split_rows: str | None, seed: int,
                    feature_store: str) -> Iterator[str]:
    """Cross-speaker sentence retrieval per layer of ``model`` and its twin: a heading, then one line
    per model as soon as it is scored."""
    from ssl_pretrain.evaluate import retrieval_by_layer

    rows = df = table_rows(table, split_rows)
    yield (f"cross-speaker sentence retrieval by layer ({len(df)} utterances, "
           f"{df['speaker'].nunique()} speakers; chance ~1/{df.groupby('speaker').size().min()})")
    for name, m in ((model.name, model), (TWIN, model.twin(seed))):
        scores = retrieval_by_layer(m.features(feature_store, rows, "all"), df)
        yield f"  {name:30s} " + "  ".join(f"L{i} {s:.2f}" for i, s in enumerate(scores))


def extract_features(model: ModelChoice, *, table: list[str], split: str | None, layer: str, feature_store: str,
                     batch_seconds: float = 60.0, shard_mb: float = 1000.0):
    """The model's hidden states of the table's rows at ``layer`` (a layer spec: a number, 'last', 'all'
    or a comma list; corpora.feature_request.Layers), extracted into the feature store where it holds
    none: the FeatureView."""
    rows = table_rows(table, split)
    layers = Layers.parse(layer, "--layer")
    return model.features(feature_store, rows, layers, batch_seconds=batch_seconds, shard_bytes=int(shard_mb * 1e6))
