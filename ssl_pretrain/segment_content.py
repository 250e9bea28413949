"""What makes two rows the same audio segment for the feature store: the same file bytes, first sample and length.

A segment's features depend only on the samples read, so the store keys a row by the sha256 of
its audio file's bytes with the first sample and the sample count (at the extractor's rate), not
by row id or path: each mTEDx pair ships its own copy of a talk's audio, and a study that reads
fr-fr and the fr-en / fr-es pairs asks for the same segments under several corpora, ids and
paths. Keyed by content, each is extracted and stored once (corpus merge's cheaper notion of the
same recording, file name and size, is a heuristic; features must never come from another file).

Hashing reads every audio file once per store. The hashes are kept beside the features, in
``<store>/audio-sha256.tsv`` (path, size, mtime in ns, sha256), so later requests only stat the
files; a file whose size or mtime changed is hashed again.
"""
from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from corpora.base.atomic import atomic_open
from corpora.base.provenance import file_sha256

CACHE = "audio-sha256.tsv"
HEADER = "path\tsize\tmtime_ns\tsha256"


def _read_cache(path: Path) -> dict[tuple[str, int, int], str]:
    """The cache's entries; a line that is not four well-formed fields is ignored (hashed again)."""
    out = {}
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):   # a FIFO put there would block the read
            return out
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return out
    for line in text.splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) == 4 and parts[1].isdigit() and parts[2].isdigit() and len(parts[3]) == 64:
            out[(parts[0], int(parts[1]), int(parts[2]))] = parts[3]
    return out


def content_ids(paths, root: str | os.PathLike, progress: bool = True) -> dict[str, str]:
    """``{path: sha256 of its bytes}`` for each distinct path, through the cache under ``root``.
    A path that is no regular file keeps ``missing:<path>`` (reading it fails later, naming it)."""
    root = Path(root)
    stats = {}
    for p in dict.fromkeys(paths):
        try:
            st = os.stat(p)
        except OSError:
            stats[p] = None
            continue
        # only regular files are hashed: a FIFO would block (reading it is refused later, named)
        stats[p] = (p, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
    cached = _read_cache(root / CACHE)
    todo = [p for p, k in stats.items() if k is not None and k not in cached]
    new = {stats[p]: file_sha256(p) for p in tqdm(todo, desc="hashing audio", unit="file",
                                                   disable=not progress or len(todo) < 100)}
    if new:
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f".{CACHE}.lock", "w") as lock:   # concurrent extractions merge, not clobber
            fcntl.flock(lock, fcntl.LOCK_EX)
            merged = {**_read_cache(root / CACHE), **new}
            with atomic_open(root / CACHE) as f:
                f.write(HEADER + "\n")
                f.writelines(f"{p}\t{s}\t{m}\t{h}\n" for (p, s, m), h in sorted(merged.items())
                             if "\t" not in p and "\n" not in p)
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
