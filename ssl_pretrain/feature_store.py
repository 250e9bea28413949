"""The feature store: frozen features extracted once per extractor and rows, read by every consumer.

    store = FeatureStore("runs/features")
    view = store.view(SSLExtractor(ref, device="cuda:0", precision="bf16"), rows, layers="all")
    view = store.view(extractor_for(ref), rows)   # FbankExtractor for FBANK, else SSLExtractor
    view.get("utt1")              # [layers, T, D] float16, memory-mapped from a shard
    view.layer(["utt1"], 3)       # probes: one layer per utterance, float32
    view.pointer("utt1", 3)       # fairseq s2t reads "shard-00000.zip:OFFSET:LENGTH" directly

``rows`` is a table with ``id, audio, offset, duration`` (an utterance table, or a SpeechBrain
CSV turned into one). A row's identity is its *segment*: the content of its audio file (sha256)
and the exact samples read from it (corpora.segment_content), so the same utterance asked
for by a SpeechBrain CSV and by the utterance table, or the same talk segment of two corpora
whose audio is two copies of one file, is one entry row, extracted and stored once.

Layout under the root (one folder per extractor: checkpoint name + content hash, or fbank)::

    <extractor>/<entry>/entry.json       key fields, layers, dtype, precision, device, shard count,
                                         and the size and sha256 of every file below once written
    <extractor>/<entry>/rows.tsv         every segment in extraction order and its shard
    <extractor>/<entry>/shard-00000.zip  uncompressed ZIP of <segment>/<layer>.npy (fp16 [T, D]):
                                         fairseq's own stored-zip feature format, an .npz to numpy
    <extractor>/<entry>/shard-00000.tsv  per member: byte offset/length of its .npy, data offset,
                                         frames, dim
    <extractor>/<entry>/lock             held while the entry is written (boundary.locked)

An entry is keyed by the extractor's content hash, the rows (hash of their segments), the
layer set, the storage dtype, the compute precision and EXTRACTOR_VERSION; its folder is named
by that key's hash. Extraction goes shard by shard in length-bucketed batches (rows sorted by
duration); a shard is done once entry.json records its two files, so a killed extraction keeps
its finished shards and resumes with the next. A request is served by any finished entry whose
rows and layers include it (the study extracts every layer of every row once per checkpoint;
frozen ASR, ST, the probes and the exports then read views of it).

What is served is what was stored. Before a view is served its entry's files are checked against
entry.json's records (ssl_pretrain.store_files): ``rows.tsv`` and every shard index by size and
sha256, each shard a view reads by size and sha256 (hashes once per process per version of a file;
sizes on every open). A file that fails -- edited, replaced by other bytes of the same size with
its mtime restored, a shard copied in from another entry -- makes the entry *not used*: one warning
line on stderr, and the request is extracted again (an entry of its own key is repaired in place,
shard by shard). So is an entry.json that is not what the store writes (read_json with the
EntryMeta shape: malformed, NaN, too deep, wrongly typed): it is treated as absent. A shard
index that does not parse stays a one-line refusal naming its line (the security suite's policy). An entry
written before entries recorded hashes has its files recorded as found on first use. What this
cannot catch is a rewrite of entry.json's records to match (whoever can do that can write the
features too): the checks are against files changed behind the store's back, not against a store
forged whole -- a handed store is data, like any feature file.
"""
from __future__ import annotations

import csv
import hashlib
import logging
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from corpora.base.atomic import atomic_open, write_json
from corpora.base.boundary import locked
from corpora.base.errors import UserError
from corpora.base.provenance import canonical_json
from corpora.feature_request import Layers
from corpora.segment_content import segment_keys
from ssl_pretrain.device import runtime_info
from ssl_pretrain.store_files import (  # noqa: F401
    COUNTERS,
    DTYPES,
    EntryChanged,
    bytes_on_disk,
    entry_members,
    export_view,
    mismatch,
    plan_shards,
    read_meta,
    record,
    record_found,
    remove_stale_temporaries,
    shard_names,
    write_kaldi,
    write_meta,
    write_shard,
)

log = logging.getLogger(__name__)

EXTRACTOR_VERSION = 1   # bump when extraction changes the numbers it writes
SHARD_BYTES = 1 << 30   # ~1 GB of features per shard


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

_WARNED: set[str] = set()   # entries this process has warned about (once each)


def _not_used(entry: Path, why) -> None:
    if str(entry) not in _WARNED:
        _WARNED.add(str(entry))
        log.warning("feature-store entry %s: %s; not used, its features are extracted again", entry, why)


class FeatureStore:
    """Feature entries under one root folder (see the module doc)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).resolve()

    def view(self, extractor, rows: pd.DataFrame, layers="all", *, dtype: str = "float16",
             batch_seconds: float = 60.0, shard_bytes: int = SHARD_BYTES, progress: bool = True) -> FeatureView:
        """A view of ``rows`` (``id, audio, offset, duration``) at ``layers`` (corpora.feature_request.Layers,
        or a spec or list it parses), extracting what no entry holds yet."""
        layers = Layers.parse(layers, "layers")
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

        found = self._find(ext_dir, extractor, keys, layers, dtype, ids)
        if found is not None:
            log.info("features: %d utterance(s) from %s", len(ids), found.dir)
            return found
        return self._extract(ext_dir, extractor, rows, keys(extractor.sample_rate), layers, dtype, batch_seconds,
                             shard_bytes, progress)

    # ---- lookup ------------------------------------------------------------------------
    def _entries(self, ext_dir: Path):
        """(entry dir, entry.json) of each entry; one whose entry.json is not the store's is absent."""
        for meta_path in sorted(ext_dir.glob("*/entry.json")):
            meta, _ = read_meta(meta_path)
            if meta is not None:
                yield meta_path.parent, meta

    def _find(self, ext_dir: Path, extractor, keys, layers, dtype: str, ids: list[str]) -> FeatureView | None:
        """A view of a finished entry holding the rows, its files checked, or None; ``keys(sample_rate)``
        gives the rows' segment keys."""
        for entry, meta in self._entries(ext_dir):
            key = meta["key"]
            # matched on the key the folder is named by, so an edited field elsewhere cannot redirect it
            if not (meta["complete"] and entry.name == _hash(key)[:16] and key.get("extractor") == extractor.key
                    and key.get("dtype") == dtype and key.get("precision") == extractor.precision
                    and key.get("version") == EXTRACTOR_VERSION and key.get("layers") == meta["layers"]):
                continue
            want = list(layers.resolve(meta["n_outputs"]))
            if not set(want) <= set(meta["layers"]):
                continue
            try:
                meta = meta if meta["files"] else record_found(entry)
                plan = _read_plan(entry, meta)
                seg_of, wanted = dict(zip(plan["key"], plan["seg"])), keys(meta["sample_rate"])
                if all(k in seg_of for k in wanted):
                    segs = [seg_of[k] for k in wanted]
                    return FeatureView(entry, meta, ids, segs, want, entry_members(entry, meta, segs))
            except EntryChanged as e:
                _not_used(entry, e)
        return None

    # ---- extraction --------------------------------------------------------------------
    def _extract(self, ext_dir: Path, extractor, rows: pd.DataFrame, keys: list[str], layers, dtype: str,
                 batch_seconds: float, shard_bytes: int, progress: bool) -> FeatureView:
        want = list(layers.resolve(extractor.n_outputs))
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
        with locked(entry / "lock"):
            meta, plan = self._entry_plan(entry, ext_dir, extractor, unique, audio_of, want, dtype, key, shard_bytes)
            # read from this request's files (their content is the key's): a path recorded in rows.tsv may be gone
            plan["audio"] = plan["key"].map(audio_of)
            _extract_shards(entry, meta, plan, extractor, want, dtype, batch_seconds, progress)
        seg_of = dict(zip(plan["key"], plan["seg"]))
        try:
            segs = [seg_of[k] for k in keys]
            members = entry_members(entry, meta, segs)
            return FeatureView(entry, meta, rows["id"].astype(str).tolist(), segs, want, members)
        except EntryChanged as e:   # only another process changing the entry right now gets here
            raise UserError(f"the feature-store entry changed while it was read ({e})", path=entry,
                            fix="run the command again (and stop whatever writes into the feature store)") from None

    def _entry_plan(self, entry: Path, ext_dir: Path, extractor, unique: list[str], audio_of: dict[str, str],
                    want: list[int], dtype: str, key: dict, shard_bytes: int) -> tuple[dict, pd.DataFrame]:
        """entry.json and rows.tsv of the entry being extracted: as found when they are the store's
        (a resume, or a repair), else written anew (any shard then left there has no record: redone)."""
        meta_path = entry / "entry.json"
        meta, why = read_meta(meta_path)
        if meta is not None:
            try:
                if meta["key"] != key:
                    raise EntryChanged("entry.json is another entry's")
                return meta, _read_plan(entry, meta)
            except EntryChanged as e:
                why = e
        if why != "absent":
            _not_used(entry, why)
        ext_dir.mkdir(parents=True, exist_ok=True)
        write_json(ext_dir / "extractor.json", extractor.describe())
        plan = plan_shards(unique, audio_of, extractor, len(want), np.dtype(dtype).itemsize, shard_bytes)
        with atomic_open(entry / "rows.tsv") as f:
            plan.to_csv(f, sep="\t", index=False, quoting=csv.QUOTE_NONE, lineterminator="\n")
        meta = {"key": key, "extractor_key": extractor.key, "extractor": extractor.describe(), "layers": want,
                "n_outputs": extractor.n_outputs, "dim": extractor.dim, "frame_shift_s": extractor.frame_shift_s,
                "sample_rate": extractor.sample_rate, "dtype": dtype, "precision": extractor.precision,
                "version": EXTRACTOR_VERSION, "rows": len(audio_of), "shards": int(plan["shard"].max()) + 1,
                "runtime": runtime_info(extractor.device, extractor.precision), "complete": False,
                "files": {"rows.tsv": record(entry / "rows.tsv")}}
        write_meta(meta_path, meta)
        return meta, _read_plan(entry, meta)


def _extract_shards(entry: Path, meta: dict, plan: pd.DataFrame, extractor, want: list[int], dtype: str,
                    batch_seconds: float, progress: bool) -> None:
    """Extract every shard entry.json has no record of, or whose files fail theirs; record each as done."""
    meta_path, todo = entry / "entry.json", []
    for s in range(meta["shards"]):
        names = shard_names(s)
        why = next(((n, w) for n in names if (w := mismatch(entry / n, meta["files"].get(n)))), None)
        if why is not None:
            todo.append(s)
            if any(n in meta["files"] for n in names):   # recorded once, changed since (unrecorded: unfinished)
                _not_used(entry, f"{why[0]} {why[1]}")
            for n in names:
                meta["files"].pop(n, None)
    if not todo:
        return
    remove_stale_temporaries(entry)
    meta["complete"] = False
    write_meta(meta_path, meta)
    done = meta["shards"] - len(todo)
    log.info("features: extracting %d shard(s) into %s%s", len(todo), entry,
             f" ({done} finished before)" if done else "")
    with tqdm(total=int(plan["shard"].isin(todo).sum()), desc=f"features {extractor.slug}", unit="utt",
              disable=not progress) as bar:
        for s in todo:
            meta["files"].update(write_shard(entry, s, plan[plan["shard"] == s], extractor, want, dtype,
                                             batch_seconds, bar))
            write_meta(meta_path, meta)   # the shard is done once recorded
    meta["complete"] = True
    meta["runtime"] = runtime_info(extractor.device, extractor.precision)
    write_meta(meta_path, meta)


PLAN_COLUMNS = ("seg", "key", "audio", "offset", "duration", "shard")


def _read_plan(entry: Path, meta: dict) -> pd.DataFrame:
    """rows.tsv, once it passes its record (EntryChanged if not): segment, key, audio, offset, duration, shard."""
    path = entry / "rows.tsv"
    why = mismatch(path, meta["files"].get("rows.tsv"))
    if why:
        raise EntryChanged(f"rows.tsv {why}")
    try:
        plan = pd.read_csv(path, sep="\t", dtype={"audio": str, "key": str}, keep_default_na=False,
                           quoting=csv.QUOTE_NONE)
        ok = (all(c in plan.columns for c in PLAN_COLUMNS) and plan["seg"].tolist() == list(range(len(plan)))
              and plan["shard"].between(0, meta["shards"] - 1).all() and plan["key"].is_unique)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, pd.errors.ParserError, pd.errors.EmptyDataError):
        ok = False
    if not ok:   # only an entry recorded as found (_record_found) can get here
        raise EntryChanged("rows.tsv is not a segment table the store writes")
    return plan
