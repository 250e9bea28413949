"""What makes two rows the same audio segment for the feature store: the same file bytes, first sample and length.

A segment's features depend only on the samples read, so the store keys a row by the sha256 of
its audio file's bytes with the first sample and the sample count (at the extractor's rate), not
by row id or path: each mTEDx pair ships its own copy of a talk's audio, and a study that reads
fr-fr and the fr-en / fr-es pairs asks for the same segments under several corpora, ids and
paths. Keyed by content, each is extracted and stored once (corpus merge's cheaper notion of the
same recording, file name and size, is a heuristic; features must never come from another file).

Hashing reads every audio file once per store. The hashes are kept beside the features, in
``<store>/audio-sha256.tsv`` (path, size, mtime_ns, inode, ctime_ns, sha256), so later requests
only stat the files. A file is hashed again unless all five match: size and mtime alone would
trust a file replaced by other bytes of the same size with its mtime restored (``touch -d``),
but every change to a file sets its ctime, which no user can set back, and a file copied or
moved in place of another has another inode.

The cache is itself a file in the store, so it carries its own check: its last line is the
sha256 of the lines above it. A cache edited by hand (a line's hash set to another file's, so
that file's features would be served) fails it, and is not used: every file is hashed again and
the cache rewritten (one warning line). A cache in an older format is hashed again silently.
Locking the cache (boundary.locked) never truncates, and never opens through a symlink.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from corpora.base.atomic import atomic_open
from corpora.base.boundary import locked, regular_file, special_kind
from corpora.base.errors import UserError
from corpora.base.provenance import file_sha256
from corpora.base.textfile import split_lines

log = logging.getLogger(__name__)

CACHE = "audio-sha256.tsv"
HEADER = "path\tsize\tmtime_ns\tino\tctime_ns\tsha256"
SEAL = "# sha256 of the lines above: "
MAX_CACHE_BYTES = 1 << 30   # ~150 bytes a file: millions of audio files

Key = tuple[str, int, int, int, int]   # path, size, mtime_ns, inode, ctime_ns


def _stat_key(path: str) -> Key | None:
    """The cache key of a regular file, None for anything else (a FIFO would block the hash; reading
    a missing or special file is refused later, naming it)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns) if special_kind(st.st_mode) is None else None


def _read_cache(path: Path) -> dict[Key, str]:
    """The cache's entries if it passes its own check (see the module doc); else none."""
    if not os.path.lexists(path):
        return {}
    try:   # a FIFO put there would block the read; a huge file is no cache of ours
        data = regular_file(path, "audio-hash cache", max_bytes=MAX_CACHE_BYTES).read_bytes()
    except (UserError, OSError):
        return {}
    body, _, last = data.rstrip(b"\n").rpartition(b"\n")
    body += b"\n"
    if not body.startswith(HEADER.encode() + b"\n"):
        return {}   # absent, empty or an older format (no inode or ctime): hashed again
    if last != (SEAL + hashlib.sha256(body).hexdigest()).encode():
        log.warning("%s was changed outside gendergap (its last line no longer checks the lines above): "
                    "not used; the audio files are hashed again", path)
        return {}
    out = {}
    for line in split_lines(body.decode("utf-8", errors="replace"))[1:]:   # a path may hold U+2028: "\n" only
        p = line.split("\t")
        if len(p) == 6 and all(x.isdigit() for x in p[1:5]) and len(p[5]) == 64:
            out[(p[0], int(p[1]), int(p[2]), int(p[3]), int(p[4]))] = p[5]
    return out


def _write_cache(root: Path, new: dict[Key, str]) -> None:
    """Merge ``new`` into the cache under its lock (concurrent extractions merge, not clobber); a
    path's older versions are dropped."""
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f".{CACHE}.lock"):
        paths = {k[0] for k in new}
        merged = {k: h for k, h in _read_cache(root / CACHE).items() if k[0] not in paths} | new
        lines = ["\t".join([*map(str, k), h]) for k, h in sorted(merged.items())
                 if "\t" not in k[0] and "\n" not in k[0]]
        body = "\n".join([HEADER, *lines]) + "\n"
        with atomic_open(root / CACHE) as f:
            f.write(body + SEAL + hashlib.sha256(body.encode()).hexdigest() + "\n")


def content_ids(paths, root: str | os.PathLike, progress: bool = True) -> dict[str, str]:
    """``{path: sha256 of its bytes}`` for each distinct path, through the cache under ``root``.
    A path that is no regular file keeps ``missing:<path>`` (reading it fails later, naming it)."""
    root = Path(root)
    stats = {p: _stat_key(p) for p in dict.fromkeys(paths)}
    cached = _read_cache(root / CACHE)
    todo = [p for p, k in stats.items() if k is not None and k not in cached]
    new = {stats[p]: file_sha256(p) for p in tqdm(todo, desc="hashing audio", unit="file",
                                               disable=not progress or len(todo) < 100)}
    if new:
        _write_cache(root, new)
        cached.update(new)
    return {p: cached[k] if k is not None else f"missing:{p}" for p, k in stats.items()}


def segment_keys(rows: pd.DataFrame, sample_rate: int, root: str | os.PathLike,
                 progress: bool = True) -> list[str]:
    """``<sha256 of the file>|<first sample>|<n samples>`` per row (n = -1: to the end of the
    file), the samples read_segment reads at ``sample_rate``; the audio paths are absolute."""
    offsets = rows["offset"].astype(float) if "offset" in rows.columns else pd.Series(0.0, index=rows.index)
    start = (offsets * sample_rate).round().astype(np.int64)
    durations = pd.to_numeric(rows["duration"], errors="coerce").fillna(-1.0).astype(float)
    count = np.where(durations > 0, (durations * sample_rate).round(), -1).astype(np.int64)
    audio = rows["audio"].astype(str).map(os.path.abspath).tolist()
    content = content_ids(audio, root, progress)
    return [f"{content[a]}|{s}|{n}" for a, s, n in zip(audio, start, count)]
