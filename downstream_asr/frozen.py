"""Frozen-feature CTC ASR (the study's strategy 1, runnable without Kaldi), with SpeechBrain.

Features of a frozen wav2vec 2.0 checkpoint are extracted ONCE per (checkpoint, layer, CSV)
with ssl_pretrain.features.export_features and cached as .npy; the model reads either one
layer or all of them through a learned softmax-weighted sum (s3prl's "weighted sum": each
layer layer-normalised per frame or standardised with the training set's statistics, one scalar
weight per layer), then projection -> TDNN layers and/or BiLSTM -> softmax over characters,
CTC. Batches group utterances of similar length (SpeechBrain's DynamicBatchSampler). Budgets,
resume, checkpoints and decoding are shared with the fine-tuning recipe (downstream_asr/common.py).

    train_frozen("ckpt_hf/", "all", "train.csv", "valid.csv", "runs/frozen", overrides={"max_minutes": 2})
    decode_frozen("runs/frozen", "test.csv")     # runs/frozen/test.hyp.tsv + test.ref.tsv
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import speechbrain as sb
import torch
from torch import nn

from corpora.atomic import write_json
from corpora.errors import UserError
from corpora.provenance import config_hash
from downstream_asr.common import CTCBrain, fit_by_length
from downstream_asr.data import length_batch_sampler, read_csv
from downstream_asr.decode import merge, open_for_decoding, recover_best, write_transcripts
from downstream_asr.perturb import check_factors, speed_perturbed
from downstream_asr.rundir import load_hparams, prepare_run, ssl_fingerprint
from downstream_asr.text import TextNorm, encode

log = logging.getLogger(__name__)

DEFAULT_HPARAMS = Path(__file__).parent / "hparams" / "frozen_ctc.yaml"


class LayerWeightedSum(nn.Module):
    """Softmax-weighted sum over layers of [B, T, L, D] features.

    ``norm="frame"``: each layer layer-normalised per frame (s3prl's weighted sum).
    ``norm="global"``: each layer standardised per dimension with the training set's mean and
    standard deviation (buffers filled once by :meth:`set_stats`, then saved with the model):
    measured on the built-in corpus, this learns faster than per-frame layer norm (valid CER
    37 vs 40 % after 60 CPU-s, notes in hparams/frozen_ctc.yaml).
    """

    def __init__(self, n_layers: int, feat_dim: int | None = None, norm: str = "frame"):
        super().__init__()
        if norm not in ("frame", "global"):
            raise UserError(f"feature_norm={norm!r}", fix="use feature_norm=frame or feature_norm=global")
        self.norm = norm
        self.weights = nn.Parameter(torch.zeros(n_layers))
        if norm == "global":
            self.register_buffer("mean", torch.zeros(n_layers, feat_dim))
            self.register_buffer("std", torch.ones(n_layers, feat_dim))
            self.register_buffer("stats_set", torch.zeros((), dtype=torch.bool))

    @torch.no_grad()
    def set_stats(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        self.mean.copy_(mean)
        self.std.copy_(std.clamp(min=1e-5))
        self.stats_set.fill_(True)

    def forward(self, x):
        if self.norm == "global":
            x = (x - self.mean) / self.std
        else:
            x = nn.functional.layer_norm(x, x.shape[-1:])
        return (x * torch.softmax(self.weights, 0)[:, None]).sum(-2)


class TDNN(nn.Module):
    """Time-delay layers (1-D convolutions over frames, dilations 1, 2, 3, 1, ...), each ReLU,
    batch norm and dropout (Kaldi's TDNN block), padding zeroed before every convolution so it
    never reaches a real frame. Batch norm rather than per-frame layer norm: measured on the
    built-in corpus, valid CER 40 vs 55 % after 60 CPU-s. (In training its batch statistics
    count the padded frames; batches of similar length keep those few.)

    The reference study's frozen-feature ASR is a Kaldi TDNN-F; on one CPU thread these
    layers also run ~1.5x more updates per second than a BiLSTM of the same width."""

    def __init__(self, dim: int, n_layers: int, kernel: int = 5, dropout: float = 0.15):
        super().__init__()
        self.convs = nn.ModuleList()
        self.norms = nn.ModuleList()
        for i in range(n_layers):
            d = 1 + i % 3
            self.convs.append(nn.Conv1d(dim, dim, kernel, padding=d * (kernel // 2), dilation=d))
            self.norms.append(nn.BatchNorm1d(dim))
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        """x [B, T, D], mask [B, T, 1] (1 = real frame)."""
        x, mask = x.transpose(1, 2), mask.transpose(1, 2)  # channels first for Conv1d / BatchNorm1d
        for conv, norm in zip(self.convs, self.norms):
            x = self.drop(norm(torch.relu(conv(x * mask))))
        return x * mask


class FrozenCTCModel(nn.Module):
    """[B, T, L, D] frozen features -> log-probabilities over characters [B, T', V].

    layers -> (weighted sum) -> projection -> ``tdnn_layers`` TDNN layers -> ``num_layers``
    BiLSTM layers (0: none) -> output layer."""

    def __init__(self, n_layers: int, feat_dim: int, n_chars: int, proj_dim: int = 256, hidden_size: int = 256,
                 num_layers: int = 2, subsample: int = 1, dropout: float = 0.15, feature_norm: str = "frame",
                 tdnn_layers: int = 0, tdnn_kernel: int = 5):
        super().__init__()
        self.combine = LayerWeightedSum(n_layers, feat_dim, feature_norm)
        self.subsample = int(subsample)
        self.proj = nn.Sequential(nn.Linear(feat_dim * self.subsample, proj_dim), nn.LeakyReLU(), nn.Dropout(dropout))
        self.tdnn = TDNN(proj_dim, int(tdnn_layers), int(tdnn_kernel), dropout) if int(tdnn_layers) > 0 else None
        self.lstm = None
        if int(num_layers) > 0:
            self.lstm = nn.LSTM(proj_dim, hidden_size, num_layers=num_layers, bidirectional=True, batch_first=True,
                                dropout=dropout if num_layers > 1 else 0.0)
        self.out = nn.Linear(2 * hidden_size if self.lstm is not None else proj_dim, n_chars)

    def forward(self, feats, lengths):
        """``lengths``: frames per utterance (int tensor). Returns (log_probs, output lengths)."""
        x = self.combine(feats)
        if self.subsample > 1:  # stack neighbouring frames: fewer steps for the LSTM
            b, t, d = x.shape
            pad = (-t) % self.subsample
            x = nn.functional.pad(x, (0, 0, 0, pad)).reshape(b, (t + pad) // self.subsample, d * self.subsample)
            lengths = torch.div(lengths + self.subsample - 1, self.subsample, rounding_mode="floor")
        x = self.proj(x)
        if self.tdnn is not None:
            mask = (torch.arange(x.shape[1], device=x.device)[None] < lengths.to(x.device)[:, None])
            x = self.tdnn(x, mask.unsqueeze(-1).to(x.dtype)).transpose(1, 2)
        if self.lstm is not None:
            # packing keeps the backward LSTM from reading padding first
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            y, _ = self.lstm(packed)
            x, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return torch.log_softmax(self.out(x), -1), lengths


def feature_stats(paths, n_max: int = 400, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer, per-dimension mean and standard deviation [L, D] of cached feature files
    (a seeded sample of at most ``n_max`` utterances: enough for 128-1024 dims, and cheap)."""
    rng = np.random.default_rng(seed)
    paths = list(paths)
    if len(paths) > n_max:
        paths = [paths[i] for i in sorted(rng.choice(len(paths), n_max, replace=False))]
    total = sq = None
    n = 0
    for p in paths:
        x = np.load(p).astype(np.float64)
        x = x[None] if x.ndim == 2 else x  # [L, T, D]
        total = x.sum(1) if total is None else total + x.sum(1)
        sq = (x ** 2).sum(1) if sq is None else sq + (x ** 2).sum(1)
        n += x.shape[1]
    mean = total / n
    std = np.sqrt(np.maximum(sq / n - mean ** 2, 0.0))
    return torch.from_numpy(mean).float(), torch.from_numpy(std).float()


class FrozenBrain(CTCBrain):
    def forward_logprobs(self, batch, stage):
        feats, rel = batch.feats
        lengths = torch.round(rel * feats.shape[1]).long().clamp(min=1)
        log_probs, out_lengths = self.modules.model(feats, lengths)
        return log_probs, out_lengths.float().to(log_probs.device) / log_probs.shape[1]


# --------------------------------------------------------------------------- features

def _layer_arg(layer):
    if layer in ("all", "last", None):
        return layer or "last"
    try:
        return int(layer)
    except (TypeError, ValueError):
        raise UserError(f"layer {layer!r} is not a number, 'last' or 'all'", fix="e.g. --layer 6 or --layer all") from None


def cached_features(ssl, layer, df: pd.DataFrame, csv_path, cache_root: Path, batch_seconds: float,
                    progress: bool = True) -> dict[str, str]:
    """{ID: .npy path} for every row of a CSV, extracting only when the cache lacks them."""
    from ssl_pretrain.features import export_features
    # keyed on the checkpoint's file fingerprints too: a retrained checkpoint at the same path
    # must not reuse old features
    key = config_hash({"csv": str(Path(csv_path).resolve()), "ssl": str(ssl.source),
                       "ssl_files": ssl_fingerprint(ssl.source)})[:10]
    out = cache_root / f"layer-{layer}" / f"{Path(csv_path).stem}-{key}"
    index, meta = out / "features.tsv", out / "features.json"
    if index.is_file() and meta.is_file() and json.loads(meta.read_text())["source"] == str(ssl.source):
        cached = pd.read_csv(index, sep="\t", dtype=str)
        paths = dict(zip(cached["id"], cached["path"]))
        if set(df["ID"]) <= set(paths) and all(os.path.isfile(paths[i]) for i in df["ID"]):
            log.info("using cached features in %s", out)
            return paths
    sr = ssl.sample_rate
    start = df["start"].astype(int) if "start" in df.columns else pd.Series(0, index=df.index)
    if "stop" in df.columns:
        duration = (df["stop"].astype(int) - start) / sr
    else:
        duration = df["duration"].astype(float)
    table = pd.DataFrame({"id": df["ID"].to_numpy(), "offset": (start / sr).to_numpy(), "duration": duration.to_numpy()})
    index = export_features(ssl, table, df["wav"].tolist(), out, fmt="npy", layer=layer,
                            max_batch_seconds=batch_seconds, progress=progress)
    cached = pd.read_csv(index, sep="\t", dtype=str)
    return dict(zip(cached["id"], cached["path"]))


def feature_dataset(df: pd.DataFrame, paths: dict[str, str], enc):
    """A DynamicItemDataset yielding ``id, feats [T, L, D], tokens, text``."""
    data = {r.ID: {"path": paths[r.ID], "duration": float(r.duration), "text": r.text}
            for r in df.itertuples(index=False)}
    ds = sb.dataio.dataset.DynamicItemDataset(data)

    @sb.utils.data_pipeline.takes("path")
    @sb.utils.data_pipeline.provides("feats")
    def feat_pipeline(path):
        x = torch.from_numpy(np.load(path))
        return x.unsqueeze(1) if x.dim() == 2 else x.transpose(0, 1).contiguous()  # [T, L, D]

    @sb.utils.data_pipeline.takes("text")
    @sb.utils.data_pipeline.provides("tokens")
    def text_pipeline(text):
        return torch.LongTensor(encode(text, enc))

    sb.dataio.dataset.add_dynamic_item([ds], feat_pipeline)
    sb.dataio.dataset.add_dynamic_item([ds], text_pipeline)
    sb.dataio.dataset.set_output_keys([ds], ["id", "feats", "tokens", "text"])
    return ds


# --------------------------------------------------------------------------- recipe

def _build(out_dir: Path, run: dict, vocab, run_opts=None):
    fixed = {"output_folder": str(out_dir), "n_layers": run["n_layers"], "feat_dim": run["feat_dim"],
             "n_chars": len(vocab)}
    hparams = load_hparams(out_dir / "hparams.yaml", merge(run["overrides"], fixed))
    opts = {"noprogressbar": not run.get("progress", True), **(run_opts or {})}
    brain = FrozenBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams, run_opts=opts,
                        checkpointer=hparams["checkpointer"])
    brain.vocab = vocab
    return brain, hparams


def _feature_cache(out_dir: Path, run: dict) -> Path:
    return Path(run["feature_cache"]) if run.get("feature_cache") else out_dir / "features"


def train_frozen(ssl_folder, layer, train_csv, valid_csv, out_dir, *, feature_cache=None, hparams_file=None,
                 overrides: dict | None = None, data_root: str | None = None, progress: bool = True,
                 extra_csvs: list | None = None, run_opts: dict | None = None) -> dict:
    """Extract (or reuse) features, then train (or resume) the BiLSTM CTC model in ``out_dir``.

    ``layer``: an int, "last" or "all" (learned weighted sum). ``extra_csvs`` (e.g. the test
    CSV) are read up front so that bad input fails before training, not after.
    """
    from ssl_pretrain.features import load_ssl
    layer = _layer_arg(layer)
    ssl = load_ssl(str(ssl_folder))
    if layer not in ("all", "last") and not 0 <= layer <= ssl.num_layers:
        raise UserError(f"layer {layer} does not exist (the model has layers 0..{ssl.num_layers})",
                        fix=f"pass --layer between 0 and {ssl.num_layers}, 'last' or 'all'")
    out_dir = Path(out_dir)
    extra = {"layer": layer, "n_layers": ssl.num_layers + 1 if layer == "all" else 1, "feat_dim": ssl.dim,
             "feature_cache": str(Path(feature_cache).resolve()) if feature_cache else None}
    run, vocab, train = prepare_run(ssl_folder, train_csv, out_dir, hparams_file, overrides, data_root,
                                    kind="frozen", default_hparams=DEFAULT_HPARAMS, extra=extra)
    run["progress"] = progress
    norm = TextNorm.from_dict(run["text_norm"])
    valid = read_csv(valid_csv, norm, training=False, data_root=data_root)
    for extra_csv in extra_csvs or []:
        read_csv(extra_csv, norm, training=False, data_root=data_root)
    run["valid_csv"] = str(Path(valid_csv).resolve())
    write_json(out_dir / "run.json", run)
    brain, hparams = _build(out_dir, run, vocab, run_opts)
    cache = _feature_cache(out_dir, run)
    t_feat = time.monotonic()
    train_paths = cached_features(ssl, layer, train, train_csv, cache, hparams["extract_batch_seconds"], progress)
    # speed-perturbed copies of the TRAINING set only (valid/test stay as recorded): each factor
    # is a new voice to the model; their features are cached like the originals'
    copies = [train]
    for factor in check_factors(hparams.get("speed_perturb", [1.0])):
        if factor != 1.0:
            sp, sp_csv = speed_perturbed(train, train_csv, factor, cache, ssl.sample_rate)
            train_paths.update(cached_features(ssl, layer, sp, sp_csv, cache, hparams["extract_batch_seconds"],
                                               progress))
            copies.append(sp)
    train = pd.concat(copies, ignore_index=True)
    valid_paths = cached_features(ssl, layer, valid, valid_csv, cache, hparams["extract_batch_seconds"], progress)
    feat_seconds = time.monotonic() - t_feat
    combine = brain.modules.model.combine
    if combine.norm == "global" and not any((out_dir / "save").glob("CKPT*")):
        # a fresh run: the training set's statistics (a resumed run loads them from its checkpoint)
        combine.set_stats(*feature_stats([train_paths[i] for i in train["ID"]], seed=hparams["seed"]))
    train_ds, valid_ds = feature_dataset(train, train_paths, vocab), feature_dataset(valid, valid_paths, vocab)
    weights = torch.softmax(brain.modules.model.combine.weights.detach(), 0).tolist()
    return fit_by_length(brain, hparams, train_ds, valid_ds, out_dir, progress, feature_seconds=round(feat_seconds, 2),
                         train_utterances=len(train), vocab_size=len(vocab), layer_weights=weights)


def decode_frozen(out_dir, test_csv, name: str = "test", data_root: str | None = None,
                  batch_seconds: float | None = None, run_opts: dict | None = None) -> dict:
    """Greedy-decode ``test_csv`` with the best checkpoint of ``out_dir``; writes hyp/ref TSVs."""
    from ssl_pretrain.features import load_ssl
    out_dir = Path(out_dir)
    run, vocab, test, oov = open_for_decoding(out_dir, test_csv, data_root)
    brain, hparams = _build(out_dir, run, vocab, run_opts)
    ckpt = recover_best(brain, out_dir, "gendergap asr frozen")
    ssl = load_ssl(run["ssl_folder"])
    paths = cached_features(ssl, run["layer"], test, test_csv, _feature_cache(out_dir, run),
                            hparams["extract_batch_seconds"], run.get("progress", True))
    ds = feature_dataset(test, paths, vocab)
    sampler = length_batch_sampler(ds, batch_seconds or hparams["valid_batch_seconds"], shuffle=False, seed=0)
    t0 = time.monotonic()
    hyps = brain.transcribe(sb.dataio.dataloader.make_dataloader(ds, batch_sampler=sampler))
    info = {"model": str(out_dir), "kind": "frozen", "ssl": run["ssl_folder"], "layer": run["layer"],
            "test_csv": str(Path(test_csv).resolve()), "text_norm": run["text_norm"],
            "text_norm_name": run["text_norm_name"], "checkpoint": ckpt, "oov": oov,
            "decode_seconds": round(time.monotonic() - t0, 2)}
    return write_transcripts(test["ID"].tolist(), hyps, test["text"].tolist(), out_dir, name, info)
