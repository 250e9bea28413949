"""Atomic file writes: write to a temp file in the same directory, then ``os.replace``.

A killed process therefore leaves either the old file or the new one, never half of one.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterator

from corpora.base.errors import UserError


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temp file next to ``path``; on success it replaces ``path``, on error it is removed."""
    path = Path(path)
    if path.is_dir():  # checked first: os.replace would fail only after the work was done
        raise UserError("this is a directory, not a file name", path=path,
                        fix=f"give a file name, e.g. {path / 'out.json'}")
    binary = "b" in mode
    with atomic_path(path) as tmp:
        with open(tmp, mode, encoding=None if binary else encoding, newline=None if binary else "") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temp file name next to ``path``, for a library that writes to a path itself (soundfile,
    safetensors, torch.save); on success it replaces ``path``, on error it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp makes 0600; give what open() would have given
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def swap_in_dir(stage: str | os.PathLike, out: str | os.PathLike, prefix: str | None = None) -> None:
    """Make the finished staging directory ``stage`` (a sibling of ``out``) the directory ``out``:
    whole, in two renames, the old ``out`` moved aside first and then removed. ``prefix``: the
    name of the swap directory's prefix (default ``.<out name>.``)."""
    stage, out = Path(stage), Path(out)
    os.chmod(stage, 0o777 & ~_umask())  # mkdtemp makes 0700; the result is an ordinary directory
    if not out.exists():
        os.replace(stage, out)
        return
    old = Path(tempfile.mkdtemp(prefix=prefix or f".{out.name}.", suffix=".old", dir=out.parent))
    os.replace(out, old / "dir")
    os.replace(stage, out)
    shutil.rmtree(old, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_open(path) as f:
        f.write(text)


def write_json(path: str | os.PathLike, obj, indent: int = 2) -> None:
    with atomic_open(path) as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False, sort_keys=False)
        f.write("\n")


def first_free(path: str | os.PathLike, tag: str = "") -> Path:
    """The first name of PATH<tag>, PATH<tag>.1, PATH<tag>.2, ... that nothing holds (not even a
    dangling link): where a command sets its own file aside, a file already there (a user's, an
    earlier run's) is never replaced."""
    path = Path(path)
    for n in range(10_000):
        candidate = path.with_name(f"{path.name}{tag}{f'.{n}' if n else ''}")
        if not os.path.lexists(candidate):
            return candidate
    raise UserError(f"10,000 files named {path.name}{tag}.N are kept beside it", path=path,
                    fix="remove those you do not need")
