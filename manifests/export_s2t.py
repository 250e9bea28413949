"""fairseq speech-to-text data: ``<split>.tsv`` + ``config.yaml`` + a sentencepiece vocabulary.

The TSV columns are the ones fairseq's ``SpeechToTextDataset`` reads: ``id, audio, n_frames,
tgt_text, speaker[, tgt_lang]``. Here ``audio`` names a per-utterance ``.npy`` feature file
that a later stage writes (fairseq's own fbank extraction needs ``torchaudio.sox_effects``,
gone from current torchaudio), so both the path template and the frame count are parameters:

    export_s2t(splits, out, feature_template="fbank80/{id}.npy", n_frames=kaldi_num_frames_of_row,
               text_column="tgt_text_en", tgt_lang="en")

The template's fields are any table column ({id}, {speaker}, {split}, {corpus}, ...) and
{safe_id} (the id as a file name); paths are relative to ``audio_root`` in config.yaml.
The sentencepiece model is trained on the train split's target text, with fairseq's special
ids (bos 0, pad 1, eos 2, unk 3) as its ``gen_vocab`` does; ``hard_vocab_limit=False`` lets a
tiny corpus get fewer pieces than asked for instead of failing.
"""
from __future__ import annotations

import csv
import os
import tempfile
from pathlib import Path
from typing import Callable

import pandas as pd
import yaml

from corpora.base.atomic import atomic_open, write_text
from corpora.base.errors import UserError
from manifests.export_fairseq import safe_name


def kaldi_num_frames(num_samples: int, sample_rate: int, frame_length_ms: float = 25.0,
                     frame_shift_ms: float = 10.0) -> int:
    """Frames Kaldi-style fbank (snip_edges=True, torchaudio.compliance.kaldi's default) yields."""
    win = int(sample_rate * frame_length_ms / 1000)
    shift = int(sample_rate * frame_shift_ms / 1000)
    return 0 if num_samples < win else 1 + (num_samples - win) // shift


def kaldi_num_frames_of_row(row: dict) -> int:
    """Default ``n_frames``: 25 ms / 10 ms frames over the row's samples."""
    sr = int(row["sample_rate"])
    return kaldi_num_frames(int(round(float(row["duration"]) * sr)), sr)


def _n_frames(df: pd.DataFrame, n_frames) -> list[int]:
    if n_frames is None:
        n_frames = kaldi_num_frames_of_row
    if isinstance(n_frames, str):
        if n_frames not in df.columns:
            raise UserError(f"no column {n_frames!r} for n_frames",
                            fix="name a column of the table, or pass a callable")
        return [int(v) for v in pd.to_numeric(df[n_frames])]
    if callable(n_frames):
        return [int(n_frames(r)) for r in df.to_dict("records")]
    raise UserError("n_frames must be a column name or a callable(row) -> int")


def _feature_paths(df: pd.DataFrame, template: str) -> list[str]:
    out = []
    for r in df.to_dict("records"):
        try:
            out.append(template.format(**r, safe_id=safe_name(r["id"])))
        except (KeyError, IndexError, ValueError) as e:
            raise UserError(f"feature path template {template!r} cannot be filled ({e})",
                            fix="use fields that are table columns, e.g. {id}, {speaker}, {split}, "
                            "or {safe_id}") from None
    return out


def train_sentencepiece(texts: list[str], model_prefix: str | os.PathLike, vocab_size: int = 1000,
                        model_type: str = "unigram") -> Path:
    """Train a sentencepiece model on ``texts``; returns the ``.model`` path. Deterministic."""
    import sentencepiece as spm

    texts = [t for t in texts if t.strip()]
    if not texts:
        raise UserError("no target text to build the vocabulary from", fix="the train split needs a text column")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(texts) + "\n")
        corpus = f.name
    try:
        spm.SentencePieceTrainer.train(
            input=corpus, model_prefix=str(model_prefix), vocab_size=vocab_size, model_type=model_type,
            character_coverage=1.0, hard_vocab_limit=False, bos_id=0, pad_id=1, eos_id=2, unk_id=3,
            num_threads=1, minloglevel=2)
    finally:
        os.unlink(corpus)
    return Path(f"{model_prefix}.model")


def write_fairseq_vocab(spm_model: str | os.PathLike, path: str | os.PathLike) -> int:
    """fairseq's dictionary file (``piece 1`` per line, special symbols left out); returns its size."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    special = {sp.bos_id(), sp.eos_id(), sp.pad_id(), sp.unk_id()}
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if i not in special]
    write_text(path, "".join(f"{p} 1\n" for p in pieces))
    return len(pieces)


def export_s2t(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, *,
               feature_template: str = "fbank80/{safe_id}.npy", n_frames: Callable | str | None = None,
               text_column: str = "text", tgt_lang: str | None = None, vocab_size: int = 1000,
               vocab_type: str = "unigram", feature_dim: int = 80, audio_root: str | None = None,
               extra_config: dict | None = None) -> dict:
    """Write ``<split>.tsv``, ``spm_<type><size>.model/.txt`` and ``config.yaml`` into ``out_dir``.

    ``audio_root`` goes into config.yaml (fairseq joins it with each ``audio`` entry); default:
    empty, so relative feature paths are taken from fairseq's working directory -- set it to the
    feature directory's parent for a layout that survives ``cd``. Returns a summary.
    """
    out_dir = Path(out_dir)
    if "train" not in splits:
        raise UserError("the s2t export needs a train split (its text builds the vocabulary)")
    for split, df in splits.items():
        if text_column not in df.columns:
            raise UserError(f"no column {text_column!r} for tgt_text",
                            fix="pick the target text with --text-column (e.g. tgt_text_en for fr->en ST)")
        empty = df[df[text_column].astype(str).str.strip() == ""]
        if len(empty):
            raise UserError(f"{split}: row {empty['id'].iloc[0]!r} has an empty {text_column}",
                            fix="drop rows without text, or pick another --text-column")
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = f"spm_{vocab_type}{vocab_size}"
    model = train_sentencepiece(list(splits["train"][text_column]), out_dir / prefix, vocab_size, vocab_type)
    (out_dir / f"{prefix}.vocab").unlink(missing_ok=True)   # sentencepiece's own listing; fairseq wants .txt
    n_vocab = write_fairseq_vocab(model, out_dir / f"{prefix}.txt")
    rows = {}
    for split, df in splits.items():
        table = pd.DataFrame({"id": df["id"].to_numpy(), "audio": _feature_paths(df, feature_template),
                              "n_frames": _n_frames(df, n_frames), "tgt_text": df[text_column].to_numpy(),
                              "speaker": df["speaker"].to_numpy()})
        if tgt_lang:
            table["tgt_lang"] = tgt_lang
        if (table["n_frames"] <= 0).any():
            bad = table[table["n_frames"] <= 0]["id"].iloc[0]
            raise UserError(f"{split}: row {bad!r} has n_frames <= 0 (shorter than one frame)",
                            fix="drop utterances shorter than 25 ms")
        with atomic_open(out_dir / f"{split}.tsv") as f:
            table.to_csv(f, sep="\t", index=False, quoting=csv.QUOTE_NONE, lineterminator="\n")
        rows[split] = len(table)
    config = {"input_channels": 1, "input_feat_per_channel": feature_dim,
              "audio_root": audio_root or "",
              "vocab_filename": f"{prefix}.txt",
              "bpe_tokenizer": {"bpe": "sentencepiece", "sentencepiece_model": f"{prefix}.model"}}
    config.update(extra_config or {})
    write_text(out_dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    return {"rows": rows, "vocab_size": n_vocab, "spm_model": f"{prefix}.model", "feature_template": feature_template}
