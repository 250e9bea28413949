"""What every result row records about where it came from: versions, git sha, config hash."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
from importlib import metadata
from pathlib import Path

# Distribution names of the engines whose versions change numbers.
ENGINES = ("gendergap", "torch", "torchaudio", "fairseq-fixed", "speechbrain", "transformers",
           "sacrebleu", "jiwer", "kaldiio", "numpy", "pandas", "submitit", "soundfile",
           "scikit-learn", "espeakng-loader", "pyrealb")


@functools.lru_cache(maxsize=1)
def engine_versions() -> dict[str, str]:
    out = {}
    for name in ENGINES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


@functools.lru_cache(maxsize=1)
def git_sha() -> str:
    """The sha of the gendergap checkout, with '+dirty' if it has uncommitted changes."""
    repo = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@functools.lru_cache(maxsize=256)
def _sha256(path: str, size: int, mtime_ns: int, inode: int, ctime_ns: int) -> str:
    del size, mtime_ns, inode, ctime_ns  # part of the cache key only
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, the one file hash of the project; cached within a process (a
    checkpoint is hashed by every command that resolves it) per path, size, mtime, inode and ctime:
    any write resets the ctime, which no user can set back (``touch`` restores only the mtime), and
    a file copied in has a new inode."""
    st = os.stat(path)
    return _sha256(str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def config_hash(config) -> str:
    """A stable short hash of a JSON-able config: the key that makes re-runs a no-op."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16]


def file_fingerprint(path: str | os.PathLike) -> dict:
    """Path, size and mtime of an input file: cheap, and enough to see that an input changed."""
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime": int(st.st_mtime)}
