"""Frozen-feature CTC ASR (the study's strategy 1, runnable without Kaldi), with SpeechBrain.

Features of a frozen wav2vec 2.0 checkpoint come from the feature store
(ssl_pretrain.feature_store: extracted once per checkpoint and rows, shared with ST and the
probes, on the run's device and precision); the model reads either one layer or all of them
through a learned softmax-weighted sum (s3prl's "weighted sum": each layer layer-normalised
per frame or standardised with the training set's statistics, one scalar weight per layer),
then projection -> TDNN layers and/or BiLSTM -> softmax over characters,
CTC. Batches group utterances of similar length (SpeechBrain's DynamicBatchSampler). Budgets,
resume, checkpoints and decoding are shared with the fine-tuning recipe (downstream_asr/common.py).

    model = ModelChoice.resolve("F-tiny", "runs/checkpoints.json", device="cuda", precision="bf16")
    train_frozen(model, "all", "train.csv", "valid.csv", "runs/frozen", feature_store="runs/features",
                 overrides={"max_minutes": 2})
    decode_frozen("runs/frozen", "test.csv")     # runs/frozen/test.hyp.tsv + test.ref.tsv
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pandas as pd
import speechbrain as sb
import torch
from torch import nn

from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from corpora.feature_request import Layers
from downstream_asr.cluster import check_run_options, launched_by_torchrun
from downstream_asr.common import CTCBrain, fit_by_length
from downstream_asr.data import add_tokens_pipeline, length_batch_sampler, read_csv
from downstream_asr.decode import open_for_decoding, recover_best, run_options, write_transcripts
from downstream_asr.errors import batch_option
from downstream_asr.perturb import check_factors, speed_perturbed
from downstream_asr.rundir import build_hparams, locate, outside, prepare_run, relative
from downstream_asr.text import TextNorm
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.device import runtime_info
from ssl_pretrain.feature_store import FeatureStore
from ssl_pretrain.model_choice import ModelChoice

log = logging.getLogger(__name__)

DEFAULT_HPARAMS = Path(__file__).parent / "hparams" / "frozen_ctc.yaml"   # the only yaml evaluated (rundir.py)


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


def _frame_mask(lengths, x):
    """[B, T, 1] in ``x``'s dtype and device: 1 on an utterance's frames, 0 on the padding after them."""
    real = torch.arange(x.shape[1], device=x.device)[None] < lengths.to(x.device)[:, None]
    return real.unsqueeze(-1).to(x.dtype)


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
        """``lengths``: frames per utterance (int tensor). Returns (log_probs, output lengths).
        Batch-invariant: an utterance's outputs do not depend on what else is in the batch."""
        x = self.combine(feats)
        # padding zeroed after the normalisation (global: a zero frame became -mean/std), so that
        # stacking frames packs the same zeros after an utterance's last frame as it does alone
        x = x * _frame_mask(lengths, x)
        if self.subsample > 1:  # stack neighbouring frames: fewer steps for the LSTM
            b, t, d = x.shape
            pad = (-t) % self.subsample
            x = nn.functional.pad(x, (0, 0, 0, pad)).reshape(b, (t + pad) // self.subsample, d * self.subsample)
            lengths = torch.div(lengths + self.subsample - 1, self.subsample, rounding_mode="floor")
        x = self.proj(x)
        if self.tdnn is not None:
            x = self.tdnn(x, _frame_mask(lengths, x)).transpose(1, 2)
        if self.lstm is not None:
            # packing keeps the backward LSTM from reading padding first
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
            y, _ = self.lstm(packed)
            x, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return torch.log_softmax(self.out(x), -1), lengths


def feature_stats(view, ids, n_max: int = 400, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-layer, per-dimension mean and standard deviation [L, D] of the view's features for
    ``ids`` (a seeded sample of at most ``n_max`` utterances: enough for 128-1024 dims, and cheap)."""
    rng = np.random.default_rng(seed)
    ids = list(ids)
    if len(ids) > n_max:
        ids = [ids[i] for i in sorted(rng.choice(len(ids), n_max, replace=False))]
    total = sq = None
    n = 0
    for uid in ids:
        x = view.get(uid).astype(np.float64)  # [L, T, D]
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

def _checked_layer(layer, extractor) -> tuple:
    """(the layer as the run records it: an int, "last" or "all"; the index of the extractor's last
    layer), or a UserError: not one layer or all (corpora.feature_request.Layers.one_or_all), or a
    layer the model lacks."""
    layers = Layers.parse(layer, "--layer")
    layers.resolve(extractor.n_outputs, "--layer")
    return layers.one_or_all("--layer"), extractor.n_outputs - 1


def csv_segments(df: pd.DataFrame, sample_rate: int) -> pd.DataFrame:
    """A SpeechBrain CSV's rows as the store's rows (id, audio, offset, duration in seconds)."""
    start = df["start"].astype(int) if "start" in df.columns else pd.Series(0, index=df.index)
    if "stop" in df.columns:
        duration = (df["stop"].astype(int) - start) / sample_rate
    else:
        duration = df["duration"].astype(float)
    return pd.DataFrame({"id": df["ID"].to_numpy(), "audio": df["wav"].to_numpy(),
                         "offset": (start / sample_rate).to_numpy(), "duration": duration.to_numpy()})


def feature_view(store, extractor, layer, df: pd.DataFrame, batch_seconds: float, progress: bool = True):
    """The store's view of a CSV's rows (extracting only what no entry holds)."""
    return store.view(extractor, csv_segments(df, extractor.sample_rate), layer, batch_seconds=batch_seconds,
                      progress=progress)


def feature_dataset(df: pd.DataFrame, view, enc):
    """A DynamicItemDataset yielding ``id, feats [T, L, D] (float32), tokens, text``."""
    data = {r.ID: {"duration": float(r.duration), "text": r.text} for r in df.itertuples(index=False)}
    ds = sb.dataio.dataset.DynamicItemDataset(data)

    @sb.utils.data_pipeline.takes("id")
    @sb.utils.data_pipeline.provides("feats")
    def feat_pipeline(uid):
        return torch.from_numpy(view.get(uid).astype(np.float32)).transpose(0, 1).contiguous()  # [T, L, D]

    sb.dataio.dataset.add_dynamic_item([ds], feat_pipeline)
    add_tokens_pipeline(ds, enc)
    sb.dataio.dataset.set_output_keys([ds], ["id", "feats", "tokens", "text"])
    return ds


# --------------------------------------------------------------------------- recipe

def _build(out_dir: Path, run: dict, vocab, run_opts=None, trust: bool = False):
    fixed = {"output_folder": str(out_dir), "n_layers": int(run["n_layers"]), "feat_dim": int(run["feat_dim"]),
             "n_chars": len(vocab)}
    hparams = build_hparams(out_dir, run, fixed, trust)
    opts = {"noprogressbar": not run.get("progress", True), **(run_opts or {})}
    check_run_options(hparams, opts)
    brain = FrozenBrain(modules=hparams["modules"], opt_class=hparams["opt_class"], hparams=hparams, run_opts=opts,
                        checkpointer=hparams["checkpointer"])
    brain.vocab = vocab
    return brain, hparams


class _Views:
    """Several views looked up by id: the training set and its speed-perturbed copies."""

    def __init__(self, views):
        self.by_id = {uid: v for v in views for uid in v.ids}

    def get(self, uid):
        return self.by_id[uid].get(uid)


def _open_store(out_dir: Path, run: dict, training: bool = False):
    """The run's feature store (training: where it was given, created if need be). Decoding: found
    relative to the run directory (a study copied whole keeps its ``../../features``), else where
    it was; a cache: when neither is there, test features are extracted anew into ``OUT/features``."""
    if training:
        return FeatureStore(locate(out_dir, run["feature_store"]) or Path(out_dir) / run["feature_store"])
    found = locate(out_dir, run["feature_store"], run.get("feature_store_abs"))
    if found is None:
        found = out_dir / "features"
        log.info("%s: the feature store it was trained with is not here; extracting test features into %s",
                 out_dir, found)
    return FeatureStore(found)


def _run_ssl(out_dir: Path, run: dict, trust: bool):
    """The SSL checkpoint the run was trained on (features are extracted with it): where run.json
    says relative to the run directory, else where it was; it must have the recorded content."""
    ssl = run["ssl"]
    if ssl["kind"] == "fbank":   # no file: its hash is the filterbank extractor's settings
        ref = CheckpointRef(ssl["name"], Path(ssl["path"]), "fbank")
        if ref.content_hash != ssl["sha256"]:
            raise UserError("the filterbank features changed since this model was trained", path=out_dir / "run.json",
                            fix="train anew")
        return ref
    looked = [str(Path(out_dir) / run["ssl_relpath"])] if run.get("ssl_relpath") else []
    for where in looked + [ssl["path"]]:
        if Path(where).exists():
            ref = CheckpointRef(ssl["name"], Path(where), ssl["kind"], ssl.get("random_init_seed"), trusted=trust)
            if ref.content_hash == ssl["sha256"]:
                return ref
    raise UserError(f"the SSL checkpoint this model was trained on (sha256 {ssl['sha256'][:12]}...) is not at "
                    f"{' nor '.join(looked + [ssl['path']])}, or has changed since", path=Path(out_dir) / "run.json",
                    fix="put the checkpoint it was trained on back (same content), or train anew")


def train_frozen(model, layer, train_csv, valid_csv, out_dir, *, feature_store=None, hparams_file=None,
                 overrides: dict | None = None, data_root: str | None = None, progress: bool = True,
                 extra_csvs: list | None = None, run_opts: dict | None = None, grad_accum: int | None = None,
                 ckpt_interval_minutes: float | None = None) -> dict:
    """Read (or extract into the feature store) the checkpoint's features, then train (or resume)
    the CTC model in ``out_dir``.

    ``model``: a ssl_pretrain.model_choice.ModelChoice. ``layer``: an int, "last" or "all"
    (learned weighted sum). ``feature_store``: the store's root (default OUT/features). Training
    and any extraction run on the model's device in its precision. ``extra_csvs`` (e.g. the test CSV)
    are read up front so that bad input fails before training, not after. ``grad_accum`` and
    ``ckpt_interval_minutes`` as in downstream_asr.finetune.train_finetune (None: the yaml's).
    """
    if launched_by_torchrun():
        # the heads are small and train in minutes on one process; several ranks would each
        # extract into the same feature store and write the same run directory
        raise UserError("`asr frozen` runs in one process, not under torchrun",
                        fix="launch it without torchrun (use --grad-accum for a larger batch)")
    ref, device, precision, extractor = model.ref, model.device, model.precision, model.extractor
    layer, num_layers = _checked_layer(layer, extractor)
    out_dir = Path(out_dir)
    store_dir = Path(feature_store or out_dir / "features").resolve()
    extra = {"layer": layer, "n_layers": num_layers + 1 if layer == "all" else 1, "feat_dim": extractor.dim,
             "feature_store": relative(out_dir, store_dir), "feature_store_abs": outside(out_dir, store_dir),
             "runtime": runtime_info(device, precision)}
    run, vocab, train = prepare_run(ref.describe(), train_csv, out_dir, hparams_file, overrides, data_root,
                                    kind="frozen", extra=extra)
    run["progress"] = progress
    norm = TextNorm.from_dict(run["text_norm"])
    valid = read_csv(valid_csv, norm, training=False, data_root=data_root)
    for extra_csv in extra_csvs or []:
        read_csv(extra_csv, norm, training=False, data_root=data_root)
    run["valid_csv"] = str(Path(valid_csv).resolve())
    write_json(out_dir / "run.json", run)
    opts = {"device": device, "precision": precision, "eval_precision": precision, **(run_opts or {})}
    if grad_accum is not None:
        opts["grad_accumulation_factor"] = grad_accum
    if ckpt_interval_minutes is not None:
        opts["ckpt_interval_minutes"] = ckpt_interval_minutes
    brain, hparams = _build(out_dir, run, vocab, opts, trust=ref.trusted)
    store = _open_store(out_dir, run, training=True)
    t_feat = time.monotonic()
    views, train, valid_view = _extract_features(store, extractor, layer, train, valid, train_csv=train_csv,
                                                 out_dir=out_dir, hparams=hparams, progress=progress)
    feat_seconds = time.monotonic() - t_feat
    train_views = _Views(views)
    combine = brain.modules.model.combine
    if combine.norm == "global" and not any((out_dir / "save").glob("CKPT*")):
        # a fresh run: the training set's statistics (a resumed run loads them from its checkpoint)
        combine.set_stats(*feature_stats(train_views, train["ID"], seed=hparams["seed"]))
    train_ds, valid_ds = feature_dataset(train, train_views, vocab), feature_dataset(valid, valid_view, vocab)
    weights = torch.softmax(brain.modules.model.combine.weights.detach(), 0).tolist()
    return fit_by_length(brain, hparams, train_ds, valid_ds, out_dir, progress, feature_seconds=round(feat_seconds, 2),
                         train_utterances=len(train), vocab_size=len(vocab), layer_weights=weights,
                         features=views[0].describe())


def _extract_features(store, extractor, layer, train: pd.DataFrame, valid: pd.DataFrame, *, train_csv,
                      out_dir: Path, hparams, progress: bool):
    """(views of the training set and its speed-perturbed copies, the training rows with those
    copies appended, the valid set's view): features read from the store, or extracted into it."""
    with batch_option("extract_batch_seconds", hparams["extract_batch_seconds"], "feature extraction"):
        views = [feature_view(store, extractor, layer, train, hparams["extract_batch_seconds"], progress)]
        # speed-perturbed copies of the TRAINING set only (valid/test stay as recorded): each factor
        # is a new voice to the model; their features are stored like the originals'
        copies = [train]
        for factor in check_factors(hparams.get("speed_perturb", [1.0])):
            if factor != 1.0:
                sp, _ = speed_perturbed(train, train_csv, factor, out_dir / "perturbed", extractor.sample_rate)
                views.append(feature_view(store, extractor, layer, sp, hparams["extract_batch_seconds"], progress))
                copies.append(sp)
        train = pd.concat(copies, ignore_index=True)
        valid_view = feature_view(store, extractor, layer, valid, hparams["extract_batch_seconds"], progress)
    return views, train, valid_view


def decode_frozen(out_dir, test_csv, name: str = "test", data_root: str | None = None,
                  batch_seconds: float | None = None, run_opts: dict | None = None, trust: bool = False) -> dict:
    """Greedy-decode ``test_csv`` with the best checkpoint of ``out_dir``; writes hyp/ref TSVs.
    Features come from the run's feature store, on the run's device and precision. ``trust``
    (--trust-checkpoint): unpickle the run's checkpoint files fully."""
    out_dir = Path(out_dir)
    run, vocab, test, oov = open_for_decoding(out_dir, test_csv, data_root)
    opts, rt = run_options(run, run_opts)
    brain, hparams = _build(out_dir, run, vocab, opts, trust=trust)
    ckpt = recover_best(brain, out_dir, "gendergap asr frozen", run)
    ssl = run["ssl"]
    ref = _run_ssl(out_dir, run, trust)
    extractor = ModelChoice(ref, opts["device"], opts["precision"]).extractor
    view = feature_view(_open_store(out_dir, run), extractor, run["layer"], test, hparams["extract_batch_seconds"],
                        run.get("progress", True))
    ds = feature_dataset(test, view, vocab)
    requested = batch_seconds or hparams["valid_batch_seconds"]
    sampler = length_batch_sampler(ds, requested, shuffle=False, seed=0)
    t0 = time.monotonic()
    with batch_option("batch_seconds", requested, "decoding"):
        hyps = brain.transcribe(sb.dataio.dataloader.make_dataloader(ds, batch_sampler=sampler))
    info = {"model": str(out_dir), "kind": "frozen", "ssl": ssl, "layer": run["layer"],
            "test_csv": str(Path(test_csv).resolve()), "text_norm": run["text_norm"],
            "text_norm_name": run["text_norm_name"], "checkpoint": ckpt, "oov": oov, "runtime": rt,
            "features": view.describe(), "batching": _batching(sampler, requested),
            "decode_seconds": round(time.monotonic() - t0, 2)}
    return write_transcripts(test["ID"].tolist(), hyps, test["text"].tolist(), out_dir, name, info)


def _batching(sampler, requested: float) -> dict:
    """How the decode batched its utterances, for its result record. The hypotheses do not depend
    on it (tests/test_batch_invariance_frozen.py); the record says what ran. ``batch_seconds``:
    the padded seconds per batch the sampler used (grown to the longest utterance when asked for less)."""
    return {"batch_seconds": round(float(sampler._max_batch_length), 3), "requested_batch_seconds": float(requested),
            "order": "by length", "batches": len(sampler)}
