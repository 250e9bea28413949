"""The feature store: frozen features extracted once per extractor and rows, read by every consumer.

    store = FeatureStore("runs/features")
    view = store.view(SSLExtractor(ref, device="cuda:0", precision="bf16"), rows, layers="all")
    view = store.view(extractor_for(ref), rows)   # FbankExtractor for FBANK, else SSLExtractor
    view.get("utt1")              # [layers, T, D] float16, memory-mapped from a shard
    view.layer(["utt1"], 3)       # probes: one layer per utterance, float32
    view.pointer("utt1", 3)       # fairseq s2t reads "shard-00000.zip:OFFSET:LENGTH" directly

``rows`` is a table with ``id, audio, offset, duration`` (an utterance table, or a SpeechBrain
CSV turned into one). A row's identity is its *segment*: the content of its audio file (sha256)
and the exact samples read from it (ssl_pretrain.segment_content), so the same utterance asked
for by a SpeechBrain CSV and by the utterance table, or the same talk segment of two corpora
whose audio is two copies of one file, is one entry row, extracted and stored once.

Layout under the root (one folder per extractor: checkpoint name + content hash, or fbank)::

    <extractor>/<entry>/entry.json       key fields, layers, dtype, precision, device, shard count
    <extractor>/<entry>/rows.tsv         every segment in extraction order and its shard
    <extractor>/<entry>/shard-00000.zip  uncompressed ZIP of <segment>/<layer>.npy (fp16 [T, D]):
                                         fairseq's own stored-zip feature format, an .npz to numpy
    <extractor>/<entry>/shard-00000.tsv  per member: byte offset/length of its .npy, data offset,
                                         frames, dim -- written last, so it marks the shard done

An entry is keyed by the extractor's content hash, the rows (hash of their segments), the
layer set, the storage dtype, the compute precision and EXTRACTOR_VERSION. Extraction goes
shard by shard in length-bucketed batches (rows sorted by duration); a killed extraction keeps
its finished shards and resumes with the next. A request is served by any finished entry whose
rows and layers include it (the study extracts every layer of every row once per checkpoint;
frozen ASR, ST, the probes and the exports then read views of it).
"""
from __future__ import annotations

import csv
import fcntl
import hashlib
import json
import logging
import mmap
import os
import re
import struct
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import soundfile as sf
from tqdm import tqdm

from corpora.base.atomic import atomic_open, write_json
from corpora.base.errors import UserError
from corpora.base.provenance import canonical_json
from ssl_pretrain.device import runtime_info
from ssl_pretrain.features import length_buckets, read_segment
from ssl_pretrain.segment_content import segment_keys

log = logging.getLogger(__name__)

EXTRACTOR_VERSION = 1   # bump when extraction changes the numbers it writes
DTYPES = {"float16": np.float16, "float32": np.float32}
SHARD_BYTES = 1 << 30   # ~1 GB of features per shard
COUNTERS = {"batches": 0, "utterances": 0}   # forward passes run in this process (tests read them)


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "x"


# --------------------------------------------------------------------------- extractors

class SSLExtractor:
    """Hidden states of a wav2vec 2.0 checkpoint (ssl_pretrain.checkpoints.CheckpointRef);
    outputs 0..L (0 = the transformer's input). The model is loaded on first use."""

    kind = "ssl"

    def __init__(self, ref, device: str = "cpu", precision: str = "fp32"):
        self.ref, self.device, self.precision = ref, device, precision
        self._model = None

    @property
    def key(self) -> str:
        return f"ssl:{self.ref.content_hash}"

    @property
    def slug(self) -> str:
        return f"{_safe(self.ref.name)}-{self.ref.content_hash[:12]}"

    def describe(self) -> dict:
        return {"kind": self.kind, "checkpoint": self.ref.describe()}

    def open(self):
        if self._model is None:
            self._model = self.ref.load(self.device, self.precision)
        return self._model

    @property
    def n_outputs(self) -> int:
        return self.open().num_layers + 1

    @property
    def dim(self) -> int:
        return self.open().dim

    @property
    def sample_rate(self) -> int:
        return self.open().sample_rate

    @property
    def frame_shift_s(self) -> float:
        return self.open().frame_shift_s

    def extract(self, waves: list[np.ndarray], layers: list[int], dtype) -> list[np.ndarray]:
        """Per utterance, ``[len(layers), T, D]`` in ``dtype``."""
        import torch
        states, mask = self.open().hidden_states(waves, layers, dtype=getattr(torch, np.dtype(dtype).name))
        return [states[:, b, :int(mask[b].sum())].numpy() for b in range(states.shape[1])]


class FbankExtractor:
    """80-d log-mel filterbanks as Kaldi computes them (torchaudio.compliance.kaldi: 25 ms
    windows every 10 ms, povey window, no dither), ``stack`` consecutive frames concatenated so
    the rate matches the SSL models' 20 ms: the no-pretraining baseline (SUPERB's FBANK row)."""

    kind = "fbank"
    precision = "fp32"
    device = "cpu"

    def __init__(self, num_mel_bins: int = 80, stack: int = 2, sample_rate: int = 16000):
        self.num_mel_bins, self.stack, self.sample_rate = int(num_mel_bins), int(stack), int(sample_rate)

    @property
    def key(self) -> str:
        return f"fbank:{self.num_mel_bins}:stack{self.stack}:{self.sample_rate}"

    @property
    def slug(self) -> str:
        return f"fbank{self.num_mel_bins}x{self.stack}"

    def describe(self) -> dict:
        return {"kind": self.kind, "num_mel_bins": self.num_mel_bins, "stack": self.stack,
                "sample_rate": self.sample_rate, "frame_shift_ms": 10 * self.stack}

    n_outputs = 1

    @property
    def dim(self) -> int:
        return self.num_mel_bins * self.stack

    @property
    def frame_shift_s(self) -> float:
        return 0.01 * self.stack

    def extract(self, waves: list[np.ndarray], layers: list[int], dtype) -> list[np.ndarray]:
        import torch
        from torchaudio.compliance import kaldi
        out = []
        for w in waves:
            x = torch.as_tensor(np.asarray(w, dtype=np.float32))[None] * 32768  # Kaldi reads 16-bit samples
            f = kaldi.fbank(x, num_mel_bins=self.num_mel_bins, sample_frequency=self.sample_rate, dither=0.0,
                            energy_floor=0.0)
            pad = (-f.shape[0]) % self.stack  # repeat the last frame so no audio is dropped
            if pad:
                f = torch.cat([f, f[-1:].expand(pad, -1)])
            f = f.reshape(-1, self.dim)
            out.append(f[None].numpy().astype(dtype))
        return out


def extractor_for(ref, device: str = "cpu", precision: str = "fp32"):
    """The extractor a checkpoint reference stands for: FBANK's filterbanks (computed on the CPU
    in fp32 whatever the task's device: there is no model to accelerate) or the SSL model."""
    return FbankExtractor() if getattr(ref, "is_fbank", False) else SSLExtractor(ref, device, precision)


# --------------------------------------------------------------------------- rows

def _hash(obj) -> str:
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


# --------------------------------------------------------------------------- the view

class FeatureView:
    """Read-only access to the rows of one store entry, by the consumer's ids."""

    def __init__(self, entry_dir: Path, meta: dict, ids: list[str], segs: list[int], layers: list[int],
                 members: pd.DataFrame):
        self.dir, self.meta, self.ids = entry_dir, meta, list(ids)
        self._seg = dict(zip(self.ids, segs))
        self.layers = list(layers)  # the layers asked for (the entry may keep more)
        self.n_layers = int(meta["n_outputs"])   # layers are numbered 0..n_layers-1 (L + 1 for SSL)
        self.dim = int(meta["dim"])
        self.frame_shift_s = float(meta["frame_shift_s"])
        self.dtype = np.dtype(meta["dtype"])
        wanted = set(segs)
        members = members[members["seg"].isin(wanted) & members["layer"].isin(self.layers)]
        self._members = {(int(s), int(layer)): (int(sh), int(o), int(nb), int(do), int(n))
                         for s, layer, sh, o, nb, do, n in members[
                             ["seg", "layer", "shard", "npy_offset", "npy_bytes", "data_offset", "n_frames"]]
                         .itertuples(index=False)}
        self._maps: dict[int, np.memmap] = {}

    def __getstate__(self):  # data-loader workers open their own maps
        return {**self.__dict__, "_maps": {}}

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def n_segments(self) -> int:
        """Distinct audio segments under the view's ids (fewer than ids where rows share audio)."""
        return len(set(self._seg.values()))

    def shard_path(self, shard: int) -> Path:
        return self.dir / f"shard-{shard:05d}.zip"

    def _member(self, uid: str, layer: int):
        try:
            return self._members[(self._seg[uid], int(layer))]
        except KeyError:
            if uid not in self._seg:
                raise UserError(f"utterance {uid!r} is not in this feature view", path=self.dir,
                                fix="ask the store for a view of the rows you read") from None
            raise UserError(f"layer {layer} is not in this view (layers {self.layers})", path=self.dir,
                            fix="ask the store for a view with that layer") from None

    def n_frames(self, uid: str) -> int:
        return self._member(uid, self.layers[0])[4]

    def array(self, uid: str, layer: int) -> np.ndarray:
        """One layer of one utterance, ``[T, D]``, memory-mapped (no copy)."""
        shard, _, _, data_offset, n = self._member(uid, layer)
        m = self._maps.get(shard)
        if m is None:
            m = self._maps[shard] = np.memmap(self.shard_path(shard), dtype=np.uint8, mode="r")
        nbytes = n * self.dim * self.dtype.itemsize
        return m[data_offset:data_offset + nbytes].view(self.dtype).reshape(n, self.dim)

    def get(self, uid: str, layers: list[int] | None = None) -> np.ndarray:
        """``[len(layers), T, D]`` (default: the view's layers)."""
        return np.stack([self.array(uid, layer) for layer in (layers if layers is not None else self.layers)])

    def layer(self, ids, layer: int) -> list[np.ndarray]:
        """Layer ``layer`` of each utterance in ``ids`` as float32 ``[T, D]`` (the probes' reader)."""
        return [np.asarray(self.array(uid, layer), dtype=np.float32) for uid in ids]

    def pointer(self, uid: str, layer: int) -> str:
        """``<shard.zip>:<offset>:<length>`` of the utterance's .npy, the path form fairseq s2t reads."""
        shard, offset, nbytes, _, _ = self._member(uid, layer)
        return f"{self.shard_path(shard)}:{offset}:{nbytes}"

    def index_table(self, layer: int) -> pd.DataFrame:
        """``id, path, n_frames, dim`` for one layer: a feature index whose paths are shard pointers."""
        return pd.DataFrame({"id": self.ids, "path": [self.pointer(u, layer) for u in self.ids],
                             "n_frames": [self._member(u, layer)[4] for u in self.ids], "dim": self.dim})

    def describe(self) -> dict:
        return {"entry": str(self.dir), **{k: self.meta[k] for k in ("key", "extractor", "layers", "dtype", "precision",
                                                                       "runtime", "version")}}


# --------------------------------------------------------------------------- the store

class FeatureStore:
    """Feature entries under one root folder (see the module doc)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()

    def view(self, extractor, rows: pd.DataFrame, layers="all", *, dtype: str = "float16",
             batch_seconds: float = 60.0, shard_bytes: int = SHARD_BYTES, progress: bool = True) -> FeatureView:
        """A view of ``rows`` (``id, audio, offset, duration``), extracting what no entry holds yet."""
        if dtype not in DTYPES:
            raise UserError(f"feature dtype {dtype!r}", fix=f"use one of {', '.join(DTYPES)}")
        if rows.empty:
            raise UserError("no rows to extract features for", fix="check the table and its split/corpus filters")
        ext_dir = self.root / extractor.slug
        ids = rows["id"].astype(str).tolist()
        keys_at: dict[int, list[str]] = {}

        def keys(rate: int) -> list[str]:   # once per view; a stored entry's rate spares loading the model
            if rate not in keys_at:
                keys_at[rate] = segment_keys(rows, rate, self.root, progress)
            return keys_at[rate]

        found = self._find(ext_dir, extractor, keys, layers, dtype)
        if found is not None:
            entry, meta, segs = found
            log.info("features: %d utterance(s) from %s", len(ids), entry)
            return self._open(entry, meta, ids, segs, _layer_list(layers, int(meta["n_outputs"])))
        return self._extract(ext_dir, extractor, rows, keys(extractor.sample_rate), layers, dtype, batch_seconds,
                             shard_bytes, progress)

    # ---- lookup ------------------------------------------------------------------------
    def _entries(self, ext_dir: Path):
        for meta_path in sorted(ext_dir.glob("*/entry.json")):
            try:
                yield meta_path.parent, json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                continue

    def _find(self, ext_dir: Path, extractor, keys, layers, dtype: str):
        """(entry dir, meta, segment numbers of the rows) of a finished entry holding them, or None;
        ``keys(sample_rate)`` gives the rows' segment keys."""
        for entry, meta in self._entries(ext_dir):
            if not (meta.get("complete") and meta["extractor_key"] == extractor.key and meta["dtype"] == dtype
                    and meta["precision"] == extractor.precision and meta["version"] == EXTRACTOR_VERSION):
                continue
            want = _layer_list(layers, int(meta["n_outputs"]))
            if not set(want) <= set(meta["layers"]):
                continue
            wanted, seg_of = keys(int(meta["sample_rate"])), _read_rows(entry)
            if all(k in seg_of for k in wanted):
                return entry, meta, [seg_of[k] for k in wanted]
        return None

    def _open(self, entry: Path, meta: dict, ids: list[str], segs: list[int], layers: list[int]) -> FeatureView:
        members = pd.concat([_read_shard_index(entry, i, meta) for i in range(int(meta["shards"]))],
                            ignore_index=True)
        return FeatureView(entry, meta, ids, segs, layers, members)

    # ---- extraction --------------------------------------------------------------------
    def _extract(self, ext_dir: Path, extractor, rows: pd.DataFrame, keys: list[str], layers, dtype: str,
                 batch_seconds: float, shard_bytes: int, progress: bool) -> FeatureView:
        want = _layer_list(layers, extractor.n_outputs)
        audio_of = dict(zip(reversed(keys), reversed(rows["audio"].astype(str).map(os.path.abspath).tolist())))
        unique = list(dict.fromkeys(keys))
        if len(unique) < len(keys):
            log.info("features: %d row(s) are the same audio segment as another row (same file content, first "
                     "sample and length): %d segment(s) extracted for %d rows", len(keys) - len(unique),
                     len(unique), len(keys))
        key = {"extractor": extractor.key, "rows": _hash(sorted(unique)), "layers": want, "dtype": dtype,
               "precision": extractor.precision, "version": EXTRACTOR_VERSION}
        entry = ext_dir / _hash(key)[:16]
        entry.mkdir(parents=True, exist_ok=True)
        # one extraction per entry at a time: a second process asking for the same features
        # waits here, then finds them finished (or resumes what the first one left)
        with open(entry / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._extract_locked(entry, ext_dir, extractor, rows, keys, audio_of, want, dtype, key,
                                        batch_seconds, shard_bytes, progress)

    def _extract_locked(self, entry: Path, ext_dir: Path, extractor, rows: pd.DataFrame, keys: list[str],
                        audio_of: dict[str, str], want: list[int], dtype: str, key: dict, batch_seconds: float,
                        shard_bytes: int, progress: bool) -> FeatureView:
        meta_path = entry / "entry.json"
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else None
        if meta is None:
            ext_dir.mkdir(parents=True, exist_ok=True)
            write_json(ext_dir / "extractor.json", extractor.describe())
            plan = _plan_shards(list(dict.fromkeys(keys)), audio_of, extractor, len(want), np.dtype(dtype).itemsize,
                                shard_bytes)
            with atomic_open(entry / "rows.tsv") as f:
                plan.to_csv(f, sep="\t", index=False, quoting=csv.QUOTE_NONE, lineterminator="\n")
            meta = {"key": key, "extractor_key": extractor.key, "extractor": extractor.describe(), "layers": want,
                    "n_outputs": extractor.n_outputs, "dim": extractor.dim, "frame_shift_s": extractor.frame_shift_s,
                    "sample_rate": extractor.sample_rate, "dtype": dtype, "precision": extractor.precision,
                    "version": EXTRACTOR_VERSION, "rows": len(audio_of), "shards": int(plan["shard"].max()) + 1,
                    "runtime": runtime_info(extractor.device, extractor.precision), "complete": False}
            write_json(meta_path, meta)
        plan = pd.read_csv(entry / "rows.tsv", sep="\t", dtype={"audio": str}, keep_default_na=False,
                           quoting=csv.QUOTE_NONE)
        todo = [s for s in range(int(meta["shards"])) if not (entry / f"shard-{s:05d}.tsv").is_file()]
        if todo:
            done = int(meta["shards"]) - len(todo)
            log.info("features: extracting %d shard(s) into %s%s", len(todo), entry,
                     f" ({done} finished before)" if done else "")
            total = int(plan["shard"].isin(todo).sum())
            with tqdm(total=total, desc=f"features {extractor.slug}", unit="utt", disable=not progress) as bar:
                for s in todo:
                    _write_shard(entry, s, plan[plan["shard"] == s], extractor, want, dtype, batch_seconds, bar)
            meta["complete"] = True
            meta["runtime"] = runtime_info(extractor.device, extractor.precision)
            write_json(meta_path, meta)
        seg_of = dict(zip(plan["key"], plan["seg"]))
        return self._open(entry, meta, rows["id"].astype(str).tolist(), [seg_of[k] for k in keys], want)


def _layer_list(layers, n_outputs: int) -> list[int]:
    """'all' | 'last' | int | list of ints -> sorted layer numbers within 0..n_outputs-1."""
    if layers in ("all", None):
        return list(range(n_outputs))
    if layers == "last":
        return [n_outputs - 1]
    items = [layers] if isinstance(layers, (int, str)) else list(layers)
    try:
        out = sorted({n_outputs - 1 if x == "last" else int(x) for x in items})
    except (TypeError, ValueError):
        raise UserError(f"layer {layers!r} is not a number, 'last' or 'all'", fix="e.g. --layer 6 or --layer all") from None
    bad = [x for x in out if not 0 <= x < n_outputs]
    if bad:
        raise UserError(f"layer {bad[0]} does not exist (the model has layers 0..{n_outputs - 1})",
                        fix=f"pass a layer between 0 and {n_outputs - 1}, 'last' or 'all'")
    return out


INDEX_COLUMNS = ("seg", "layer", "npy_offset", "npy_bytes", "data_offset", "n_frames", "dim")


def _read_shard_index(entry: Path, shard: int, meta: dict) -> pd.DataFrame:
    """One shard's member index, checked against its ZIP: every member's bytes lie inside the
    .npy they point into, and that inside the shard file. An edited or damaged index would
    otherwise read another utterance's bytes, or fail deep in numpy."""
    path = entry / f"shard-{shard:05d}.tsv"
    fix = f"the store entry was edited or damaged: delete {entry} and its features are extracted again"
    try:
        df = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, quoting=csv.QUOTE_NONE)
    except FileNotFoundError:
        raise UserError("feature-store shard index missing", path=path, fix=fix) from None
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise UserError(f"cannot read the feature-store shard index ({type(e).__name__})", path=path,
                        fix=fix) from None
    missing = [c for c in INDEX_COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"feature-store shard index has no column(s) {', '.join(missing)}", path=path, line=1, fix=fix)
    nums = {}
    for c in INDEX_COLUMNS:
        v = pd.to_numeric(df[c], errors="coerce")
        bad = v.isna() | (v < 0) | (v != v.round())
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise UserError(f"feature-store shard index: {c} = {df[c].iloc[i]!r} is not a count or offset", path=path,
                            line=i + 2, fix=fix)
        nums[c] = v.astype(np.int64)
    out = pd.DataFrame(nums)
    try:
        size = (entry / f"shard-{shard:05d}.zip").stat().st_size
    except OSError:
        raise UserError("feature-store shard missing", path=entry / f"shard-{shard:05d}.zip", fix=fix) from None
    itemsize = np.dtype(meta["dtype"]).itemsize
    end = out["data_offset"] + out["n_frames"] * out["dim"] * itemsize
    bad = ((out["dim"] != int(meta["dim"])) | (out["data_offset"] < out["npy_offset"])
           | (end > out["npy_offset"] + out["npy_bytes"]) | (out["npy_offset"] + out["npy_bytes"] > size))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"feature-store shard index: member {out['seg'].iloc[i]}/{out['layer'].iloc[i]} does not fit "
                        f"its shard ({size} bytes)", path=path, line=i + 2, fix=fix)
    return out.assign(shard=shard)


def _read_rows(entry: Path) -> dict[str, int]:
    plan = pd.read_csv(entry / "rows.tsv", sep="\t", usecols=["seg", "key"], dtype={"key": str},
                       keep_default_na=False, quoting=csv.QUOTE_NONE)
    return dict(zip(plan["key"], plan["seg"]))


def _plan_shards(keys: list[str], audio_of: dict[str, str], extractor, n_layers: int, itemsize: int,
                 shard_bytes: int) -> pd.DataFrame:
    """Segments sorted by length, cut into shards of at most ``shard_bytes`` of features; each is
    read from the first of its rows' files (``audio_of``: they hold the same bytes)."""
    parts = [k.rsplit("|", 2) for k in keys]
    sr = extractor.sample_rate
    audio = [audio_of[k] for k in keys]
    start = [int(p[1]) for p in parts]
    count = [int(p[2]) for p in parts]
    durations = []
    for a, n in zip(audio, count):
        if n < 0:  # "to the end of the file": read the header once (at the file's own rate)
            info = sf.info(a)
            durations.append(info.frames / info.samplerate)
        else:
            durations.append(n / sr)
    per_second = n_layers * extractor.dim * itemsize / extractor.frame_shift_s
    # by length, then by where the samples are read (not by content hash): the order, and so which
    # segments share a batch, stays what it was before segments were keyed by content. Batched
    # features equal single ones only up to float rounding (~1 fp16 ulp in 0.1 % of members), and
    # trained heads amplify that, so a new order would move the built-in study's scores.
    order = sorted(range(len(keys)), key=lambda i: (durations[i], f"{audio[i]}|{start[i]}|{count[i]}"))
    shard, used, shards = 0, 0.0, []
    for i in order:
        size = durations[i] * per_second
        if used and used + size > shard_bytes:
            shard, used = shard + 1, 0.0
        used += size
        shards.append(shard)
    return pd.DataFrame({"seg": range(len(order)), "key": [keys[i] for i in order],
                         "audio": [audio[i] for i in order], "offset": [start[i] / sr for i in order],
                         "duration": [durations[i] for i in order], "shard": shards})


def _write_shard(entry: Path, shard: int, rows: pd.DataFrame, extractor, layers: list[int], dtype: str,
                 batch_seconds: float, bar) -> None:
    """Extract one shard's rows in length-bucketed batches into an uncompressed ZIP, then its index."""
    path = entry / f"shard-{shard:05d}.zip"
    tmp = path.with_name(f".{path.name}.tmp")
    segs, audio = rows["seg"].tolist(), rows["audio"].tolist()
    offsets, durations = rows["offset"].astype(float).tolist(), rows["duration"].astype(float).tolist()
    frames: dict[tuple[int, int], tuple[int, int]] = {}
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for batch in length_buckets(durations, batch_seconds):
            waves = [read_segment(audio[i], offsets[i], durations[i], extractor.sample_rate) for i in batch]
            outs = extractor.extract(waves, layers, DTYPES[dtype])
            COUNTERS["batches"] += 1
            COUNTERS["utterances"] += len(batch)
            for i, x in zip(batch, outs):
                for j, layer in enumerate(layers):
                    with zf.open(f"{segs[i]}/{layer}.npy", "w", force_zip64=True) as f:
                        np.lib.format.write_array(f, np.ascontiguousarray(x[j]), allow_pickle=False)
                    frames[(segs[i], layer)] = x[j].shape
            bar.update(len(batch))
    os.replace(tmp, path)
    index = _member_offsets(path)
    index["n_frames"] = [frames[(s, layer)][0] for s, layer in zip(index["seg"], index["layer"])]
    index["dim"] = [frames[(s, layer)][1] for s, layer in zip(index["seg"], index["layer"])]
    with atomic_open(entry / f"shard-{shard:05d}.tsv") as f:
        index.to_csv(f, sep="\t", index=False, lineterminator="\n")


def _member_offsets(path: Path) -> pd.DataFrame:
    """Where each member's .npy starts and its data begins (local ZIP headers, then the npy header)."""
    out = []
    with zipfile.ZipFile(path) as zf, open(path, "rb") as raw, \
            mmap.mmap(raw.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for info in zf.infolist():
            # local header: 30 fixed bytes, then name and extra field (lengths at bytes 26 and 28)
            name_len, extra_len = struct.unpack_from("<HH", m, info.header_offset + 26)
            start = info.header_offset + 30 + name_len + extra_len
            reader = _Reader(m, start)
            major, _ = np.lib.format.read_magic(reader)
            if major == 1:
                np.lib.format.read_array_header_1_0(reader)
            else:
                np.lib.format.read_array_header_2_0(reader)
            seg, layer = info.filename[:-len(".npy")].split("/")
            out.append((int(seg), int(layer), start, info.file_size, reader.pos))
    return pd.DataFrame(out, columns=["seg", "layer", "npy_offset", "npy_bytes", "data_offset"])


class _Reader:
    """A file-like read cursor over a memory map (numpy's header readers want ``.read``)."""

    def __init__(self, m, pos: int):
        self.m, self.pos = m, pos

    def read(self, n: int) -> bytes:
        data = self.m[self.pos:self.pos + n]
        self.pos += n
        return data


# --------------------------------------------------------------------------- exports (thin writers)

def write_kaldi(view: FeatureView, out_dir: str | os.PathLike, layer: int, repeat: int = 1,
                keys: dict[str, str] | None = None) -> dict[str, tuple[int, int]]:
    """``feats.ark`` + ``feats.scp`` (kaldiio, float32, readable by kaldi-io too) of one layer,
    keys (default: the view's ids; ``keys`` maps id -> Kaldi key) sorted in C order as Kaldi
    wants, each frame repeated ``repeat`` times (2: 20 ms -> the 10 ms Kaldi TDNN recipes expect).
    Returns {key: (frames, dim)}."""
    import kaldiio
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ark, tmp_ark, tmp_scp = out_dir / "feats.ark", out_dir / ".feats.ark.tmp", out_dir / ".feats.scp.tmp"
    keys = keys or {u: u for u in view.ids}
    shapes = {}
    with kaldiio.WriteHelper(f"ark,scp:{tmp_ark},{tmp_scp}") as writer:
        for uid in sorted(view.ids, key=lambda u: keys[u].encode()):
            x = np.asarray(view.array(uid, layer), dtype=np.float32)
            if repeat > 1:
                x = np.repeat(x, repeat, axis=0)
            writer(keys[uid], x)
            shapes[keys[uid]] = x.shape
    # the scp names the ark it was written to; point it at the final name, then publish both
    scp = tmp_scp.read_text(encoding="utf-8").replace(str(tmp_ark), str(ark))
    os.replace(tmp_ark, ark)
    with atomic_open(out_dir / "feats.scp") as f:
        f.write(scp)
    tmp_scp.unlink()
    return shapes


def export_view(view: FeatureView, out_dir: str | os.PathLike, fmt: str = "npy", repeat: int = 1) -> Path:
    """A copy of a view outside the store, for tools that want files: ``npy`` (OUT/<id>.npy,
    [T, D] for one layer, [L, T, D] for several; float32) or ``kaldi`` (one layer); both with
    OUT/features.tsv (id, path, n_frames, dim) and OUT/features.json. Returns features.tsv."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt == "kaldi":
        if len(view.layers) != 1:
            raise UserError("Kaldi archives hold one matrix per utterance", fix="pick one --layer for --format kaldi")
        shapes = write_kaldi(view, out_dir, view.layers[0], repeat)
        rows = [(u, str(out_dir / "feats.ark"), *shapes[u]) for u in view.ids]
    elif fmt == "npy":
        rows = []
        for uid in view.ids:
            x = view.get(uid).astype(np.float32)
            x = x[0] if len(view.layers) == 1 else x
            if repeat > 1:
                x = np.repeat(x, repeat, axis=-2)
            with atomic_open(out_dir / f"{uid}.npy", "wb") as f:
                np.save(f, x)
            rows.append((uid, str(out_dir / f"{uid}.npy"), x.shape[-2], x.shape[-1]))
    else:
        raise UserError(f"unknown feature format {fmt!r}", fix="use npy (fairseq s2t) or kaldi (ark/scp)")
    index = out_dir / "features.tsv"
    with atomic_open(index) as f:
        f.write("id\tpath\tn_frames\tdim\n" + "".join(f"{a}\t{b}\t{c}\t{d}\n" for a, b, c, d in rows))
    write_json(out_dir / "features.json", {**view.describe(), "format": fmt, "repeat": repeat,
                                           "frame_shift_s": view.frame_shift_s / repeat})
    return index


def bytes_on_disk(root: str | os.PathLike) -> int:
    """Total size of the files under ``root`` (what a feature cache costs)."""
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())
