"""The feature store's files: what an entry writes (ZIP shards and their member offsets), the
record that says what it wrote (size and sha256 of each file), and the copies exported out of it.

ssl_pretrain.feature_store decides what to extract and serves views; this module only writes and
checks bytes. Its checks and why:

- **records**: an entry's ``entry.json`` lists ``rows.tsv`` and every finished shard's ``.zip`` and
  ``.tsv`` with their size and sha256, taken when they were written. ``mismatch`` compares a file
  with its record: the size on every call (a stat), the sha256 once per process per version of the
  file (corpora.base.provenance.file_sha256, memoised on path, size, mtime_ns, inode and ctime_ns).
  The kernel sets ctime on every change to a file and no user can set it back (``touch`` restores
  only mtime/atime); a file replaced by another (a copy from another entry) has another inode. So a memo hit means these
  very bytes were hashed by this process, and a file changed behind its back is hashed again.
  Hashes are not memoised on disk: a memo file would be one more file in the store to trust.
- **temporary files**: unique names (corpora.base.atomic.atomic_path: mkstemp in the same folder,
  then ``os.replace``), never a fixed ``.NAME.tmp`` a planted symlink could redirect the write through.
- **exports**: an utterance id becomes a file name under OUT only part by part through
  corpora.base.boundary.check_name (``../x``, an absolute id or a control character is one line).
"""
from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import zipfile
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import soundfile as sf
from pydantic import BaseModel, ConfigDict, Field

from corpora.base.atomic import atomic_open, atomic_path, write_json
from corpora.base.boundary import check_name, locked, read_json
from corpora.base.errors import UserError, printable
from corpora.base.provenance import file_sha256
from corpora.base.textfile import read_delimited
from ssl_pretrain.features import length_buckets, read_segment

DTYPES = {"float16": np.float16, "float32": np.float32}
COUNTERS = {"batches": 0, "utterances": 0}   # forward passes run in this process (tests read them)
log = logging.getLogger("ssl_pretrain.feature_store")   # its messages are the store's
MAX_META_BYTES = 64 << 20   # entry.json: a record per shard file; a 100k-shard entry is ~20 MB

# --------------------------------------------------------------------------- records

def _stat_key(path: Path) -> tuple:
    st = os.stat(path)
    return str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


def record(path: Path) -> dict:
    """``{"bytes", "sha256"}`` of a file the store has just written."""
    key = _stat_key(path)
    return {"bytes": key[1], "sha256": file_sha256(path)}


def mismatch(path: Path, rec: dict | None) -> str | None:
    """Why ``path`` is not the file ``rec`` recorded (None when it is): no record, missing, another
    size (checked first: a stat), other bytes (sha256, once per version of the file: see above)."""
    if rec is None:
        return "has no record in entry.json"
    try:
        key = _stat_key(path)
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if key[1] != rec["bytes"]:
        return f"is {key[1]} bytes, not the {rec['bytes']} written"
    if not os.path.isfile(path):   # a FIFO of the recorded size would block the hash
        return "is not a regular file"
    if file_sha256(path) != rec["sha256"]:
        return "holds other bytes than were written (sha256 differs)"
    return None


class FileRecord(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    bytes: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class EntryMeta(BaseModel):
    """entry.json as FeatureStore writes it; anything else is no entry (it is extracted again)."""
    model_config = ConfigDict(strict=True, extra="allow")
    key: dict
    extractor_key: str
    extractor: dict
    layers: list[int] = Field(min_length=1)
    n_outputs: int = Field(ge=1, le=10_000)
    dim: int = Field(ge=1, le=1 << 20)
    frame_shift_s: float = Field(gt=0, le=10, allow_inf_nan=False)
    sample_rate: int = Field(ge=1, le=1_000_000)
    dtype: Literal["float16", "float32"]
    precision: str
    version: int
    rows: int = Field(ge=0)
    shards: int = Field(ge=1, le=10_000_000)
    runtime: dict
    complete: bool
    files: dict[str, FileRecord] = {}


def read_meta(path: Path) -> tuple[dict | None, str | None]:
    """(entry.json as a dict, None), or (None, why it is no entry: absent, or its one-line error)."""
    if not os.path.lexists(path):
        return None, "absent"
    try:
        meta = read_json(path, "feature-store entry", shape=EntryMeta, max_bytes=MAX_META_BYTES)
    except UserError as e:   # the reason, for the warning that names the entry
        return None, "entry.json: " + printable(e.message)
    return meta.model_dump(), None


def write_meta(path: Path, meta: dict) -> None:
    write_json(path, meta)


def shard_names(shard: int) -> tuple[str, str]:
    return f"shard-{shard:05d}.zip", f"shard-{shard:05d}.tsv"


# --------------------------------------------------------------------------- reading an entry back

class EntryChanged(Exception):
    """An entry's file is not what entry.json recorded: the entry is not used (feature_store's doc)."""


INDEX_COLUMNS = ("seg", "layer", "npy_offset", "npy_bytes", "data_offset", "n_frames", "dim")


def _index_table(path: Path, fix: str) -> pd.DataFrame:
    """A shard index's cells as strings (the one table reader: a shard index is no utterance table)."""
    if not os.path.lexists(path):
        raise UserError("feature-store shard index missing", path=path, fix=fix)
    header, records = read_delimited(path, "\t", what="feature-store shard index", fix=fix)
    return pd.DataFrame([r for _, r in records], columns=list(dict.fromkeys(header)), dtype=str)


def read_shard_index(entry: Path, shard: int, meta: dict) -> pd.DataFrame:
    """One shard's member index, checked against its ZIP: every member's bytes lie inside the
    .npy they point into, and that inside the shard file. An edited or damaged index would
    otherwise read another utterance's bytes, or fail deep in numpy."""
    zip_name, tsv_name = shard_names(shard)
    path = entry / tsv_name
    fix = f"the store entry was edited or damaged: delete {entry} and its features are extracted again"
    df = _index_table(path, fix)
    missing = [c for c in INDEX_COLUMNS if c not in df.columns]
    if missing:
        raise UserError(f"feature-store shard index has no column(s) {', '.join(missing)}", path=path, line=1, fix=fix)
    nums = {}
    for c in INDEX_COLUMNS:
        v = pd.to_numeric(df[c], errors="coerce")
        bad = v.isna() | (v < 0) | (v != v.round()) | (v > 2 ** 53)   # 2**53: where a float stops being exact
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise UserError(f"feature-store shard index: {c} = {df[c].iloc[i]!r} is not a count or offset", path=path,
                            line=i + 2, fix=fix)
        nums[c] = v.astype(np.int64)
    out = pd.DataFrame(nums)
    try:
        size = (entry / zip_name).stat().st_size
    except OSError:
        raise UserError("feature-store shard missing", path=entry / zip_name, fix=fix) from None
    end = out["data_offset"] + out["n_frames"] * out["dim"] * np.dtype(meta["dtype"]).itemsize
    bad = ((out["dim"] != int(meta["dim"])) | (out["data_offset"] < out["npy_offset"])
           | (end > out["npy_offset"] + out["npy_bytes"]) | (out["npy_offset"] + out["npy_bytes"] > size))
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise UserError(f"feature-store shard index: member {out['seg'].iloc[i]}/{out['layer'].iloc[i]} does not fit "
                        f"its shard ({size} bytes)", path=path, line=i + 2, fix=fix)
    return out.assign(shard=shard)


def entry_members(entry: Path, meta: dict, segs: list[int]) -> pd.DataFrame:
    """Every member of the entry once its files pass their records: every shard index (it says where
    every member lies) and the shards holding ``segs`` (the view's); EntryChanged if one does not.
    A shard index that does not parse is a one-line UserError naming its line (read_shard_index)."""
    for s in range(meta["shards"]):
        gone = next((n for n in shard_names(s) if not os.path.lexists(entry / n)), None)
        if gone:
            raise EntryChanged(f"{gone} is missing")
    members = pd.concat([read_shard_index(entry, s, meta) for s in range(meta["shards"])], ignore_index=True)
    read = sorted(set(members.loc[members["seg"].isin(set(segs)), "shard"].tolist()))
    for name in [shard_names(s)[1] for s in range(meta["shards"])] + [shard_names(s)[0] for s in read]:
        why = mismatch(entry / name, meta["files"].get(name))
        if why:
            raise EntryChanged(f"{name} {why}")
    return members


def record_found(entry: Path) -> dict:
    """entry.json of an entry written before entries recorded their files (gendergap before issue
    47), with its files recorded as they are now: once, under the entry's lock."""
    with locked(entry / "lock"):
        meta, why = read_meta(entry / "entry.json")
        if meta is None or not meta["complete"]:
            raise EntryChanged(f"entry.json changed while it was read ({why or 'no longer complete'})")
        if not meta["files"]:
            names = ["rows.tsv", *(n for s in range(meta["shards"]) for n in shard_names(s))]
            gone = next((n for n in names if not os.path.isfile(entry / n)), None)
            if gone:
                raise EntryChanged(f"{gone} is missing")
            meta["files"] = {n: record(entry / n) for n in names}
            write_meta(entry / "entry.json", meta)
            log.info("features: recorded the sha256 of the files of %s (written before entries kept them)", entry)
        return meta


# --------------------------------------------------------------------------- plan and shards

def plan_shards(keys: list[str], audio_of: dict[str, str], extractor, n_layers: int, itemsize: int,
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


def write_shard(entry: Path, shard: int, rows: pd.DataFrame, extractor, layers: list[int], dtype: str,
                batch_seconds: float, bar) -> dict:
    """Extract one shard's rows in length-bucketed batches into an uncompressed ZIP, then its index;
    returns the records of both (for entry.json)."""
    zip_name, tsv_name = shard_names(shard)
    path = entry / zip_name
    segs, audio = rows["seg"].tolist(), rows["audio"].tolist()
    offsets, durations = rows["offset"].astype(float).tolist(), rows["duration"].astype(float).tolist()
    frames: dict[tuple[int, int], tuple[int, int]] = {}
    # a unique temporary name (a killed extraction leaves it behind, never under the final name)
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
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
    index = member_offsets(path)
    index["n_frames"] = [frames[(s, layer)][0] for s, layer in zip(index["seg"], index["layer"])]
    index["dim"] = [frames[(s, layer)][1] for s, layer in zip(index["seg"], index["layer"])]
    with atomic_open(entry / tsv_name) as f:
        index.to_csv(f, sep="\t", index=False, lineterminator="\n")
    return {zip_name: record(path), tsv_name: record(entry / tsv_name)}


def member_offsets(path: Path) -> pd.DataFrame:
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


def remove_stale_temporaries(entry: Path) -> None:
    """Shards a killed extraction left half-written (called under the entry's lock, so no live
    writer owns one); a symlink of that name is removed, never followed."""
    for p in entry.glob(".shard-*.tmp"):
        if re.fullmatch(r"\.shard-\d{5}\.zip\.[^/]+\.tmp", p.name):
            p.unlink(missing_ok=True)


# --------------------------------------------------------------------------- exports (thin writers)

def write_kaldi(view, out_dir: str | os.PathLike, layer: int, repeat: int = 1,
                keys: dict[str, str] | None = None) -> dict[str, tuple[int, int]]:
    """``feats.ark`` + ``feats.scp`` (kaldiio, float32, readable by kaldi-io too) of one layer of a
    FeatureView, keys (default: the view's ids; ``keys`` maps id -> Kaldi key) sorted in C order as
    Kaldi wants, each frame repeated ``repeat`` times (2: 20 ms -> the 10 ms Kaldi TDNN recipes
    expect). Returns {key: (frames, dim)}."""
    import kaldiio
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ark, scp = out_dir / "feats.ark", out_dir / "feats.scp"
    keys = keys or {u: u for u in view.ids}
    shapes = {}
    # the ark is replaced last: a feats.scp published before it would point into an older ark
    with atomic_path(ark) as tmp_ark, atomic_path(scp) as tmp_scp:
        with kaldiio.WriteHelper(f"ark,scp:{tmp_ark},{tmp_scp}") as writer:
            for uid in sorted(view.ids, key=lambda u: keys[u].encode()):
                x = np.asarray(view.array(uid, layer), dtype=np.float32)
                if repeat > 1:
                    x = np.repeat(x, repeat, axis=0)
                writer(keys[uid], x)
                shapes[keys[uid]] = x.shape
        # the scp names the ark it was written to; point it at the final name
        text = tmp_scp.read_text(encoding="utf-8").replace(str(tmp_ark), str(ark))
        tmp_scp.write_text(text, encoding="utf-8")
    return shapes


def export_name(uid: str, out_dir: Path) -> str:
    """The path under OUT an utterance id is written to: ``<id>.npy``, an id with ``/`` (a merged
    table's ``corpus/id``) in a subfolder; every part must be a plain name (boundary.check_name), so
    no id can lead outside OUT (``../x``, ``/x``) or forge a line of features.tsv (a tab or newline)."""
    try:
        for part in str(uid).split("/"):
            check_name(part)
    except UserError:
        raise UserError(f"utterance id '{printable(str(uid))[:80]}' cannot name a file inside {out_dir}: each "
                        "'/'-separated part must be a plain file name (no '..', no leading '/', no control "
                        "characters)", fix="give the rows plain ids (letters, digits, '-', '_', '.')") from None
    return f"{uid}.npy"


def export_view(view, out_dir: str | os.PathLike, fmt: str = "npy", repeat: int = 1) -> Path:
    """A copy of a FeatureView outside the store, for tools that want files: ``npy`` (OUT/<id>.npy,
    [T, D] for one layer, [L, T, D] for several; float32) or ``kaldi`` (one layer); both with
    OUT/features.tsv (id, path, n_frames, dim) and OUT/features.json. Returns features.tsv."""
    out_dir = Path(out_dir)
    if fmt not in ("npy", "kaldi"):
        raise UserError(f"unknown feature format {fmt!r}", fix="use npy (fairseq s2t) or kaldi (ark/scp)")
    if fmt == "kaldi" and len(view.layers) != 1:
        raise UserError("Kaldi archives hold one matrix per utterance", fix="pick one --layer for --format kaldi")
    names = {uid: export_name(uid, out_dir) for uid in view.ids}   # all checked before anything is written
    out_dir.mkdir(parents=True, exist_ok=True)
    if fmt == "kaldi":
        shapes = write_kaldi(view, out_dir, view.layers[0], repeat)
        rows = [(u, str(out_dir / "feats.ark"), *shapes[u]) for u in view.ids]
    else:
        rows = []
        for uid in view.ids:
            x = view.get(uid).astype(np.float32)
            x = x[0] if len(view.layers) == 1 else x
            if repeat > 1:
                x = np.repeat(x, repeat, axis=-2)
            with atomic_open(out_dir / names[uid], "wb") as f:
                np.save(f, x)
            rows.append((uid, str(out_dir / names[uid]), x.shape[-2], x.shape[-1]))
    index = out_dir / "features.tsv"
    with atomic_open(index) as f:
        f.write("id\tpath\tn_frames\tdim\n" + "".join(f"{a}\t{b}\t{c}\t{d}\n" for a, b, c, d in rows))
    write_json(out_dir / "features.json", {**view.describe(), "format": fmt, "repeat": repeat,
                                           "frame_shift_s": view.frame_shift_s / repeat})
    return index


def bytes_on_disk(root: str | os.PathLike) -> int:
    """Total size of the files under ``root`` (what a feature cache costs)."""
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())
