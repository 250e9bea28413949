"""What a command wrote into an output folder that may already exist: it replaces or removes that, nothing else.

A command writing into a folder the user names (``gendergap report --out``, ``gendergap corpus synth
--out``) keeps a record there, ``RECORD``: a hidden JSON file, written atomically, naming the command and
the paths (relative, ``/``-separated) of the files it wrote::

    {"command": "gendergap report", "files": ["report.md", "table4_asr.md", ...]}

``claim`` reads it before anything is written. A folder that is absent or empty is the command's; one
with a record of the command is too, and only the files the record lists may be replaced or removed;
a non-empty folder without one (a user's folder, or another command's) is refused in one line, never
cleaned. The record is read like any handed file (corpora.base.boundary): a damaged or planted one
counts as none, so it can make the command refuse, never delete a path outside the record's folder.

Temp files: ``own_temp_name`` tells the names corpora.base.atomic gives the temp files of the
command's own outputs (``.<name>.<random>.tmp`` beside ``<name>``) from anything else that ends in .tmp.
"""
from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path
from typing import Callable, Iterable

from corpora.base.atomic import write_json
from corpora.base.boundary import check_name, read_state_json
from corpora.base.errors import UserError

RECORD = ".gendergap-outputs.json"
# corpora.base.atomic's temp name for NAME: tempfile.mkstemp(prefix=".NAME.", suffix=".tmp"), whose random
# part is letters, digits and '_' (never a dot, so the name is what lies between the first dot and it)
_TEMP = re.compile(r"\.(.+)\.[A-Za-z0-9_]+\.tmp")


def own_temp_name(name: str, owned: Callable[[str], bool]) -> bool:
    """True when ``name`` is the temp file of an atomic write of a file ``owned`` says is the command's."""
    m = _TEMP.fullmatch(name)
    return bool(m) and owned(m.group(1))


def _relative(path: str) -> str:
    """``path`` if it is a relative path of plain names (each checked like a file name), else UserError."""
    parts = path.split("/")
    for part in parts:
        check_name(part, "recorded output")
    return path


def read_record(folder: str | os.PathLike, command: str) -> frozenset[str] | None:
    """The files ``command``'s record in ``folder`` lists; None when there is no record of ``command``
    (absent, damaged, another command's, or listing a path that is not a plain relative one)."""
    data = read_state_json(Path(folder) / RECORD, "output record")
    if not data or data.get("command") != command or not isinstance(data.get("files"), list):
        return None
    try:
        return frozenset(_relative(f) for f in data["files"] if isinstance(f, str))
    except UserError:
        return None


def write_record(folder: str | os.PathLike, command: str, files: Iterable[str]) -> None:
    """Record (atomically) that ``command`` wrote ``files`` (paths relative to ``folder``) there."""
    write_json(Path(folder) / RECORD, {"command": command, "files": sorted(set(files))})


def _entries(folder: Path) -> list[str]:
    """What the folder holds, but the record's own temp files (a kill while it was written)."""
    return sorted(n for n in os.listdir(folder) if not own_temp_name(n, lambda t: t == RECORD))


def claim(folder: str | os.PathLike, command: str, *, fix: str,
          legacy: Callable[[Path, list[str]], frozenset[str] | None] | None = None) -> frozenset[str]:
    """The files ``command`` wrote into ``folder`` before (empty for a new or empty folder); a
    non-empty folder without a record of ``command`` is refused (UserError, ``fix`` says what to do)
    unless ``legacy(folder, entries)`` recognises it as written by an earlier version that kept no
    record, and returns the files that version wrote there."""
    folder = Path(folder)
    if not folder.is_dir():
        return frozenset()
    recorded = read_record(folder, command)
    if recorded is not None:
        return recorded
    entries = _entries(folder)
    if not entries:
        return frozenset()
    if RECORD in entries:
        raise UserError(f"the output folder's record ({RECORD}) is not one `{command}` wrote (damaged, or "
                        "another command's); the command cannot tell its own files there", path=folder, fix=fix)
    if legacy is not None and (found := legacy(folder, entries)) is not None:
        return found
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    raise UserError(f"the output folder is not empty ({shown}) and holds no record of an earlier "
                    f"`{command}` ({RECORD}); {command} replaces only files it wrote itself",
                    path=folder, fix=fix)


def foreign(folder: str | os.PathLike, paths: Iterable[str], owned: frozenset[str]) -> str | None:
    """The first of ``paths`` (relative to ``folder``) that exists there and is not in ``owned``:
    a file of the user's that writing ``paths`` would replace."""
    folder = Path(folder)
    return next((p for p in sorted(paths) if p not in owned and os.path.lexists(folder / p)), None)


def remove_own_temps(folder: str | os.PathLike, files: Iterable[str]) -> None:
    """Remove the temp files a killed run left beside ``files`` (paths relative to ``folder``, the
    command's own outputs): ``.<name>.<random>.tmp`` of those names only, each a file, not a folder."""
    by_dir: dict[str, set[str]] = {}
    for f in files:
        parent, _, name = f.rpartition("/")
        by_dir.setdefault(parent, set()).add(name)
    for parent, names in by_dir.items():
        root, d = Path(folder).resolve(), (Path(folder) / parent).resolve()
        if not d.is_dir() or (d != root and root not in d.parents):   # a link out of the folder: not followed
            continue
        for entry in os.scandir(d):
            if own_temp_name(entry.name, names.__contains__) and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
