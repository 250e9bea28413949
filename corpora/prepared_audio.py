"""One prepared-audio cache: engine-ready copies of corpus audio, written once, the corpus untouched.

Some engines open audio files themselves and cannot take them as released: fairseq's
``audio_pretraining`` reads ``task.sample_rate`` (16 kHz) only, where Common Voice ships 48 kHz
mp3 (a few 32 kHz); Kaldi recipes read 16 kHz RIFF wav; WinoST ships ``.wav.gz``. Their manifests
point at copies prepared here: mono, resampled with soxr (python-soxr, the SoX resampler as a
library, "HQ"), cut when a row is a segment of a longer recording, written as 16-bit FLAC or WAV.

Keyed by the source's identity and the parameters. Identity is the absolute path, size and
mtime (ns) -- what make and rsync trust -- not a content hash: hashing would read every byte of
a corpus (Common Voice fr is ~20 GB) on each re-run, and a re-run must be a no-op that costs a
``stat`` per file. A source rewritten in place gets a new mtime, hence a new key: it is redone.

Resumable: each file is written to a temp name beside it and ``os.replace``d, so a killed run
leaves only whole files; the next run skips those and redoes the rest. An entry is used only when
it verifies (the cache is handed data like any other): a regular file, not a symlink, with the size,
mtime and header frames its index row recorded at write time, or, unindexed, one that decodes whole;
anything else is rebuilt, and frame counts are read from the file, never taken from the index.
``index.tsv`` (the cache's library: key -> file, frames, source identity) is merged under a
lock at the end of each run; files a killed run wrote but did not index are found by name and
indexed from their headers.

    cache = AudioCache("runs/prepared-audio", Target(16000, "flac"))
    done = cache.prepare([Source("/cv/clips/a.mp3"), Source("/mtedx/talk.flac", start=8000, frames=32000)], jobs=4)
    done[Source("/cv/clips/a.mp3")]     # Prepared(path='runs/prepared-audio/16000-flac/3f/a-3f9c...flac', frames=...)
"""
from __future__ import annotations

import contextlib
import csv
import glob
import gzip
import hashlib
import io
import json
import os
import re
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import soundfile as sf
from tqdm.auto import tqdm

from corpora.base.atomic import atomic_open, atomic_path
from corpora.base.boundary import locked, special_kind
from corpora.base.errors import UserError

VERSION = 1   # bump when what is written for the same key changes (resampler, dither, layout)
FORMATS = {"flac": ("FLAC", ".flac"), "wav": ("WAV", ".wav")}
# file_size / file_mtime_ns: the prepared copy as written (an entry is used only while they match)
INDEX_COLUMNS = ("key", "file", "frames", "sample_rate", "source", "size", "mtime_ns", "start", "source_frames",
                 "file_size", "file_mtime_ns")
DEFAULT_DIR = Path("runs") / "prepared-audio"   # beside the feature store's runs/features
_STALE_TEMP_S = 600   # a temp file this old belongs to a killed run, not to a concurrent writer
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def default_cache_dir(feature_store: str | os.PathLike | None = None) -> Path:
    """$GENDERGAP_AUDIO_CACHE, else ``prepared-audio`` beside the feature store (runs/prepared-audio)."""
    if os.environ.get("GENDERGAP_AUDIO_CACHE"):
        return Path(os.environ["GENDERGAP_AUDIO_CACHE"]).resolve()
    store = feature_store or os.environ.get("GENDERGAP_FEATURE_STORE")
    return (Path(store).parent / "prepared-audio" if store else DEFAULT_DIR).resolve()


@dataclass(frozen=True)
class Target:
    """What a prepared file is: ``sample_rate`` Hz, mono, 16-bit ``fmt`` (flac or wav)."""
    sample_rate: int = 16000
    fmt: str = "flac"

    def __post_init__(self):
        if self.fmt not in FORMATS:
            raise UserError(f"unknown prepared-audio format {self.fmt!r}", fix="use flac or wav")
        if int(self.sample_rate) <= 0:
            raise UserError(f"sample rate {self.sample_rate} is not positive", fix="e.g. --resample 16000")

    @property
    def tag(self) -> str:
        return f"{int(self.sample_rate)}-{self.fmt}"


@dataclass(frozen=True)
class Source:
    """What to prepare: an absolute path, and a segment of it in the file's own samples
    (``frames`` None = to the end: the whole file)."""
    path: str
    start: int = 0
    frames: int | None = None


@dataclass(frozen=True)
class Prepared:
    path: str
    frames: int


# --------------------------------------------------------------------------- reading sources

def is_gzipped(path: str) -> bool:
    return str(path).lower().endswith(".gz")


@contextlib.contextmanager
def _open_source(path: str):
    """The file, or for ``x.wav.gz`` its decompressed bytes (libsndfile cannot read gzip)."""
    if is_gzipped(path):
        with gzip.open(path, "rb") as g:
            yield io.BytesIO(g.read())
    else:
        yield path


# Public name for readers outside this module (corpora.audio_info's headers, ssl_pretrain.features'
# samples): one place decides how a .wav.gz is read.
open_audio = _open_source


def read_header(path: str):
    """soundfile's header info of a file (``.gz`` read through gzip); a UserError when unreadable."""
    try:
        with _open_source(path) as f:
            return sf.info(f)
    except (sf.LibsndfileError, RuntimeError, OSError, EOFError) as e:
        raise UserError(f"cannot read the audio header of {path} ({str(e).strip().splitlines()[-1]})",
                        fix="check the table's audio paths (re-index the corpus if files moved)") from None


def engine_readable(path: str, info, sample_rate: int) -> bool:
    """True when an engine can open the file as it lies: the rate, mono, RIFF wav or FLAC."""
    return (int(info.samplerate) == int(sample_rate) and int(info.channels) == 1 and not is_gzipped(path)
            and str(info.format) in ("WAV", "FLAC"))


def rate_counts(rates: Iterable[int]) -> str:
    """'3 files are 48000 Hz, 1 is 32000 Hz' (most frequent first) -- for refusals."""
    counts = sorted(Counter(int(r) for r in rates).items(), key=lambda rn: (-rn[1], rn[0]))
    parts = []
    for i, (rate, n) in enumerate(counts):
        noun = ("file " if n == 1 else "files ") if i == 0 else ""   # "1 file is ..., 2 are ..."
        parts.append(f"{n} {noun}{'is' if n == 1 else 'are'} {rate} Hz")
    return ", ".join(parts)


def convert(src: str, dest: str | os.PathLike, *, start: int = 0, frames: int | None = None,
            sample_rate: int | None = None, mono: bool = False, fmt: str = "WAV",
            subtype: str | None = None) -> int:
    """Write ``src[start:start+frames]`` to ``dest`` atomically (temp + os.replace); returns its frames.

    ``sample_rate``: resample to it (soxr HQ) when the file has another; ``mono``: average the
    channels. ``subtype`` None keeps 16-bit sources bit-exact and writes others as float
    (segments cut at the native rate); prepared copies pass "PCM_16" (clipped to [-1, 1] first:
    libsndfile wraps, not clips, on float -> int overflow, and resampling can overshoot)."""
    with _open_source(src) as f:
        with sf.SoundFile(f) as snd:
            rate, pcm16 = snd.samplerate, snd.subtype == "PCM_16"
            if start:
                snd.seek(start)
            keep = pcm16 and subtype in (None, "PCM_16") and not mono and not sample_rate
            x = snd.read(-1 if frames is None else frames, dtype="int16" if keep else "float32", always_2d=True)
    if mono and x.shape[1] > 1:
        x = x.mean(axis=1, keepdims=True, dtype=np.float32)
    if sample_rate and int(sample_rate) != rate:
        import soxr  # imported here: only the preparation of other-rate audio needs it
        x = soxr.resample(x, rate, int(sample_rate), quality="HQ")
        rate = int(sample_rate)
    if subtype is None:
        subtype = "PCM_16" if x.dtype == np.int16 else "FLOAT"
    if subtype == "PCM_16" and x.dtype != np.int16:
        x = np.clip(x, -1.0, 1.0)
    with atomic_path(dest) as tmp:
        sf.write(str(tmp), x[:, 0] if x.shape[1] == 1 else x, rate, format=fmt, subtype=subtype)
    return int(x.shape[0])


def run_parallel(fn, items: list, jobs: int | None, desc: str, unit: str = "file") -> list:
    """``[fn(i) for i in items]`` on a thread pool with a progress bar. Threads suffice: decoding,
    resampling (soxr) and encoding run in C with the GIL released (benchmarks/bench_prepared_audio.py)."""
    jobs = max(1, int(jobs or min(8, os.cpu_count() or 1)))
    bar = tqdm(total=len(items), desc=desc, unit=unit, disable=None if items else True)
    try:
        if jobs == 1:
            out = []
            for i in items:
                out.append(fn(i))
                bar.update()
            return out
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = [pool.submit(fn, i) for i in items]
            out = []
            try:
                for f in futures:
                    out.append(f.result())
                    bar.update()
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
            return out
    finally:
        bar.close()


# --------------------------------------------------------------------------- the cache

class AudioCache:
    """Prepared copies of sources for one ``Target`` under ``root/<rate>-<fmt>/``."""

    def __init__(self, root: str | os.PathLike, target: Target = Target()):
        self.root = Path(root).resolve()
        self.target = target

    def key(self, src: Source, st: os.stat_result | None = None) -> str:
        st = st or os.stat(src.path)
        ident = {"path": os.path.abspath(src.path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                 "start": int(src.start), "frames": None if src.frames is None else int(src.frames),
                 "rate": int(self.target.sample_rate), "fmt": self.target.fmt, "mono": True,
                 "resampler": "soxr-HQ", "version": VERSION}
        return hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()

    def file_for(self, src: Source, key: str) -> Path:
        name = Path(src.path).name
        stem = name[:-3] if is_gzipped(name) else name
        stem = _UNSAFE.sub("_", Path(stem).stem).strip("._")[:80] or "audio"
        return self.root / self.target.tag / key[:2] / f"{stem}-{key[:16]}{FORMATS[self.target.fmt][1]}"

    def prepare(self, sources: Iterable[Source], jobs: int | None = None) -> dict[Source, Prepared]:
        """Prepared copies of ``sources`` (distinct), writing only those not already there."""
        sources = sorted(set(sources), key=lambda s: (s.path, s.start, s.frames or -1))
        stats = {}
        for s in sources:
            try:
                stats[s] = os.stat(s.path)
            except OSError as e:
                raise UserError(f"cannot read {s.path} ({e.strerror})",
                                fix="check the table's audio paths (re-index the corpus if files moved)") from None
        keys = {s: self.key(s, stats[s]) for s in sources}
        index = self._read_index()
        done: dict[Source, Prepared] = {}
        todo, found = [], {}
        for s in sources:
            path = self.file_for(s, keys[s])
            frames, indexed = self._verified(path, index.get(keys[s]))
            if frames is None:
                todo.append(s)      # absent, or failed its check: rebuilt
            else:
                done[s] = Prepared(str(path), frames)
                if not indexed:     # written by a run killed before it updated the index, or re-checked
                    found[s] = path
        fmt = FORMATS[self.target.fmt][0]

        def one(s: Source) -> Prepared:
            dest = self.file_for(s, keys[s])
            for old in glob.glob(glob.escape(str(dest.parent / f".{dest.name}.")) + "*.tmp"):
                with contextlib.suppress(OSError):
                    if time.time() - os.stat(old).st_mtime > _STALE_TEMP_S:
                        os.unlink(old)
            n = convert(s.path, dest, start=s.start, frames=s.frames, sample_rate=self.target.sample_rate,
                        mono=True, fmt=fmt, subtype="PCM_16")
            return Prepared(str(dest), n)

        new: dict[Source, Prepared] = {}
        try:
            for s, p in zip(todo, run_parallel(one, todo, jobs, f"prepare {self.target.tag} audio")):
                new[s] = p
        finally:
            # on an error or Ctrl-C only the files found above are indexed; the whole files this
            # run wrote are found by name by the next one
            self._merge_index({**{s: done[s] for s in found}, **new}, keys, stats)
        done.update(new)
        return done

    def _verified(self, path: Path, rec: dict | None) -> tuple[int | None, bool]:
        """(frames, indexed) of a cached copy that verifies, else (None, False): the cache is handed data
        too. A symlink (to another speaker's copy) or special file never verifies; an indexed copy must
        have its recorded size and mtime and header frames; any other is decoded whole (a truncated
        FLAC's header still says its full length). Frames always come from the file, not the index."""
        try:
            st = os.lstat(path)
        except OSError:
            return None, False
        if special_kind(st.st_mode) is not None:   # lstat: a symlink is not this cache's copy either
            return None, False
        try:
            info = sf.info(str(path))
        except (sf.LibsndfileError, RuntimeError, OSError):
            return None, False
        if (int(info.samplerate), int(info.channels)) != (int(self.target.sample_rate), 1):
            return None, False
        frames = int(info.frames)
        rec = rec or {}
        if [rec.get("frames"), rec.get("file_size"), rec.get("file_mtime_ns")] == \
                [str(frames), str(st.st_size), str(st.st_mtime_ns)]:
            return frames, True
        return (frames if _decodes_whole(path, frames) else None), False

    # ----------------------------------------------------------------------- index.tsv

    @property
    def index_path(self) -> Path:
        return self.root / "index.tsv"

    def _read_index(self) -> dict[str, dict]:
        if not self.index_path.is_file():
            return {}
        with open(self.index_path, encoding="utf-8", newline="") as f:
            return {r["key"]: r for r in csv.DictReader(f, delimiter="\t") if r.get("key")}

    def _merge_index(self, added: dict[Source, Prepared], keys: dict, stats: dict) -> None:
        if not added:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with locked(self.root / "index.lock"):   # two builds sharing the cache merge, not overwrite
            rows = self._read_index()
            for s, p in added.items():
                rows[keys[s]] = {"key": keys[s], "file": os.path.relpath(p.path, self.root), "frames": p.frames,
                                 "sample_rate": self.target.sample_rate, "source": s.path,
                                 "size": stats[s].st_size, "mtime_ns": stats[s].st_mtime_ns, "start": s.start,
                                 "source_frames": "" if s.frames is None else s.frames,
                                 **_written(p.path)}
            with atomic_open(self.index_path) as f:   # text mode, newline="": csv's own line ends
                w = csv.DictWriter(f, fieldnames=INDEX_COLUMNS, delimiter="\t", lineterminator="\n")
                w.writeheader()
                for k in sorted(rows):
                    w.writerow({c: rows[k].get(c, "") for c in INDEX_COLUMNS})


def _written(path: str) -> dict:
    """What a prepared copy's index row records of the file itself, to verify it on reuse."""
    st = os.lstat(path)
    return {"file_size": st.st_size, "file_mtime_ns": st.st_mtime_ns}


def _decodes_whole(path: Path, frames: int) -> bool:
    """True when the file decodes to exactly ``frames`` frames (read in blocks, not held in memory)."""
    n = 0
    try:
        with sf.SoundFile(str(path)) as f:
            for block in f.blocks(blocksize=1 << 16, dtype="int16"):
                n += len(block)
    except (sf.LibsndfileError, RuntimeError, OSError):
        return False
    return n == frames > 0
