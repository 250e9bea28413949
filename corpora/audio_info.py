"""Audio headers (sample rate, frames, channels) of many files, read in parallel, never decoded.

Durations in gendergap come from headers only: ``soundfile.info`` opens the file, libsndfile
parses the header, nothing is decoded. One exception: float-coded files (WAV/AIFF/CAF ``FLOAT``
or ``DOUBLE``) are the only ones that can hold NaN or Inf samples, which turn every loss and
feature computed from them into NaN, so their samples are scanned once (``_first_nonfinite``).
Integer PCM, FLAC, mp3, Vorbis and Opus cannot hold them and stay header-only.

A corpus index touches every file once, so on network file systems the latency of each
``open`` dominates; libsndfile's open releases the GIL, so a thread pool overlaps those waits
(see ``_read_chunk`` for why it calls soundfile's binding rather than ``sf.info``). Each path
is read once even when many segments (rows) point into the same long recording.
``benchmarks/bench_audio_headers.py`` measures it.

    infos = probe_headers(paths)          # {path: AudioInfo or HeaderError}
    info = infos["/data/talk1.flac"]      # AudioInfo(sample_rate=16000, frames=..., ...)
"""
from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

import numpy as np
import soundfile as sf
from tqdm.auto import tqdm

from corpora.base.boundary import special_kind
from corpora.prepared_audio import open_audio

_interrupted = threading.Event()  # set when the main thread stops a parallel read (Ctrl-C)


class _Stopped(Exception):
    """Raised in a reader thread once the read was interrupted; nobody collects its result."""


@dataclass(frozen=True)
class AudioInfo:
    """What the header of one audio file says."""
    path: str
    sample_rate: int
    frames: int
    channels: int
    format: str
    subtype: str

    @property
    def duration(self) -> float:
        """Seconds, from the header's frame count."""
        return self.frames / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True)
class HeaderError:
    """Why a header could not be read; the caller turns it into a UserError naming its metadata line."""
    path: str
    kind: str      # "missing" | "corrupt" | "empty" | "nonfinite" | "special"
    detail: str

    def message(self) -> str:
        if self.kind == "missing":
            return f"audio file {self.path} does not exist"
        if self.kind == "empty":
            return f"audio file {self.path} is empty ({self.detail})"
        if self.kind == "nonfinite":
            return f"audio file {self.path} holds NaN or Inf samples ({self.detail})"
        if self.kind == "special":
            return f"audio path {self.path} is {self.detail}, not a regular file"
        return f"cannot read the audio header of {self.path} ({self.detail})"

    def fix(self) -> str:
        if self.kind == "missing":
            return "check --root and the path in the metadata, or remove the row"
        if self.kind == "special":
            return "point the row at an audio file (FIFOs, devices and directories are never opened)"
        if self.kind == "nonfinite":
            return "re-export the audio without NaN/Inf (e.g. as 16-bit PCM, or with them set to 0), or remove its rows"
        return "re-download or re-encode the file (wav/flac, 16 kHz mono), or remove its rows"


def _not_regular(path: str) -> HeaderError | None:
    """Checked before any open: opening a FIFO blocks until someone writes to it (forever, in a thread
    Ctrl-C cannot reach), and a device or a directory is no audio file either."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return HeaderError(path, "missing", "no such file")
    except OSError:
        return None  # e.g. no permission: the open that follows says why
    kind = special_kind(mode)
    return None if kind is None else HeaderError(path, "special", kind)


def _slow_header(path: str) -> AudioInfo | HeaderError:
    """``soundfile.info``: the reference way, and the one that explains failures."""
    try:
        info = sf.info(path)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        if not os.path.exists(path):
            return HeaderError(path, "missing", "no such file")
        if os.path.getsize(path) == 0:
            return HeaderError(path, "empty", "0 bytes")
        detail = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        return HeaderError(path, "corrupt", detail)
    return _checked(path, int(info.samplerate), int(info.frames), int(info.channels), str(info.format),
                    str(info.subtype))


def _checked(path, sample_rate, frames, channels, fmt, subtype) -> AudioInfo | HeaderError:
    if frames <= 0 or sample_rate <= 0:
        return HeaderError(path, "empty", f"{frames} samples")
    if subtype in _FLOAT_SUBTYPES:
        bad = _first_nonfinite(path, sample_rate, subtype)
        if bad is not None:
            return bad
    return AudioInfo(path=path, sample_rate=sample_rate, frames=frames, channels=channels, format=fmt,
                     subtype=subtype)


_FLOAT_SUBTYPES = ("FLOAT", "DOUBLE")


def _first_nonfinite(path: str, sample_rate: int, subtype: str) -> HeaderError | None:
    """A HeaderError naming the first NaN/Inf sample's time, or None when every sample is finite.
    Read in blocks (bounded memory); DOUBLE as float64 so no large finite value overflows."""
    pos = 0
    try:
        for block in sf.blocks(path, blocksize=1 << 16, dtype="float64" if subtype == "DOUBLE" else "float32",
                               always_2d=True):
            if _interrupted.is_set():  # Ctrl-C in the main thread: stop scanning, do not hold the exit
                raise _Stopped
            bad = ~np.isfinite(block).all(axis=1)
            if bad.any():
                return HeaderError(path, "nonfinite", f"first at {(pos + int(bad.argmax())) / sample_rate:.3f} s")
            pos += len(block)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        return HeaderError(path, "corrupt", str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)
    return None


# soundfile's own cffi binding of libsndfile. Going through it directly skips what makes
# `sf.info` slow for a header: a SoundFile object, the log-info string, and a process-wide lock
# held around every sf_open (for libsndfile's global error state), which serialises threads.
# The open itself releases the GIL, so threads overlap. Any failure falls back to sf.info,
# which gives the error message; if a future soundfile drops these internals, sf.info is used.
_snd = getattr(sf, "_snd", None)
_ffi = getattr(sf, "_ffi", None)
# (Windows opens need wide-char paths: leave those to sf.info.)
_FAST = _snd is not None and _ffi is not None and hasattr(sf, "_format_str") and sys.platform != "win32"


@lru_cache(maxsize=None)
def _format_names(format_int: int) -> tuple[str, str]:
    # sf._format_str scans soundfile's format tables: once per distinct format, not per file.
    return (sf._format_str(format_int & _snd.SF_FORMAT_TYPEMASK), sf._format_str(format_int & _snd.SF_FORMAT_SUBMASK))


def _gz_header(path: str) -> AudioInfo | HeaderError:
    """A ``x.wav.gz`` (WinoST ships them): the header of the decompressed bytes, which
    libsndfile cannot reach through gzip itself (corpora.prepared_audio.open_audio)."""
    special = _not_regular(path)
    if special is not None:
        return special
    try:
        with open_audio(path) as f:
            info = sf.info(f)
    except (sf.LibsndfileError, RuntimeError, OSError, EOFError) as e:
        return HeaderError(path, "corrupt", str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)
    if info.frames <= 0 or info.samplerate <= 0:
        return HeaderError(path, "empty", f"{info.frames} samples")
    return AudioInfo(path=path, sample_rate=int(info.samplerate), frames=int(info.frames), channels=int(info.channels),
                     format=str(info.format), subtype=str(info.subtype))


def _read_chunk(paths: list[str]) -> list[AudioInfo | HeaderError]:
    if any(p.lower().endswith(".gz") for p in paths):
        return [_gz_header(p) if p.lower().endswith(".gz") else _read_chunk([p])[0] for p in paths]
    if not _FAST:
        return [_not_regular(p) or _slow_header(p) for p in paths]
    info = _ffi.new("SF_INFO*")
    out = []
    for p in paths:
        if _interrupted.is_set():
            raise _Stopped
        special = _not_regular(p)
        if special is not None:
            out.append(special)
            continue
        info.format = 0  # libsndfile reads the format from the header when this is 0
        handle = _snd.sf_open(os.fsencode(p), _snd.SFM_READ, info)
        if handle == _ffi.NULL:
            out.append(_slow_header(p))
            continue
        _snd.sf_close(handle)
        out.append(_checked(p, int(info.samplerate), int(info.frames), int(info.channels),
                            *_format_names(int(info.format))))
    return out


def read_header(path: str | os.PathLike) -> AudioInfo | HeaderError:
    """One header; errors are returned (not raised) so a batch can report the first in row order."""
    return _read_chunk([os.fspath(path)])[0]


def default_workers() -> int:
    # Two threads per core overlap the GIL-free opens on local disks (more only adds
    # contention there, see the benchmark); on network storage, where each open waits,
    # pass more (`--workers 32`).
    return min(32, 2 * (os.cpu_count() or 1))


def probe_headers(paths: Iterable[str], workers: int | None = None, progress: bool = True,
                  desc: str = "audio headers") -> dict[str, AudioInfo | HeaderError]:
    """Read the header of every distinct path once, in parallel, with a progress bar.

    Returns ``{path: AudioInfo | HeaderError}`` in first-seen order. ``workers=1`` reads
    sequentially (no pool).
    """
    unique = list(dict.fromkeys(os.fspath(p) for p in paths))
    _interrupted.clear()
    workers = default_workers() if workers is None else max(1, int(workers))
    # Chunks, not single files: a header takes ~25 us, less than handing a task to a thread.
    size = max(16, min(256, len(unique) // (workers * 4) or 1))
    chunks = [unique[i:i + size] for i in range(0, len(unique), size)]
    bar = tqdm(total=len(unique), desc=desc, unit="file", disable=not progress or len(unique) < 2,
               mininterval=0.5)
    out: dict[str, AudioInfo | HeaderError] = {}

    def collect(chunk, infos):
        out.update(zip(chunk, infos))
        bar.update(len(chunk))

    if workers == 1 or len(chunks) < 2:
        for chunk in chunks:
            collect(chunk, _read_chunk(chunk))
    else:
        pool = ThreadPoolExecutor(max_workers=workers)
        try:
            for chunk, infos in zip(chunks, pool.map(_read_chunk, chunks)):
                collect(chunk, infos)
        except BaseException:
            # Ctrl-C (or an error): `with pool` would wait for every queued chunk; instead drop them and
            # tell the running ones to stop after their current file, so the interrupt ends the run now.
            _interrupted.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    bar.close()
    return out
