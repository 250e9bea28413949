"""The trust boundary: every check on what crosses it, in one place.

Trusted: the installed package (templates, presets, hyper-parameter files) and command-line flags.
Untrusted: everything a user is handed or copies in -- checkpoints, model folders, run directories,
study configs, tables, hypotheses, results DBs, caches, third-party files. They are data only: no
file ever trusts itself, and only ``--trust-checkpoint`` opts in to unpickling.

What crosses, and the one function that checks it:

- a **name that becomes a path** (checkpoint, model, task, study, corpus, subset): ``check_name``;
- a **path read from a handed file** (a run dir's vocabulary, a data config's files): ``inside``
  resolves it within the folder the file came from, and ``regular_file`` refuses FIFOs, devices and
  directories (a FIFO read blocks for ever), and files over a size bound;
- an **output** the user names: ``output_file`` refuses special files (``/dev/full``, a FIFO) that
  a rename would silently replace or a write would block on; ``output_dir`` anything but a folder;
- a **number** from a handed file or flag: ``finite`` (no NaN, no infinity, within bounds);
- a **string printed** from a handed file: ``printable`` escapes control and bidi characters, so a
  name cannot clear the screen or forge a line of output;
- a **model folder**: ``no_custom_code`` refuses a config naming code the folder ships (``auto_map``),
  ``folder_files`` lists its files and refuses a symlinked directory in it, and every transformers
  loader takes ``**HF_LOCAL`` (never remote code, never the network, so no prompt can read stdin).

Every error is a UserError: one line naming the file, what is wrong and what to do.
"""
from __future__ import annotations

import json
import math
import os
import stat
import unicodedata
from pathlib import Path

from corpora.base.errors import _HIDDEN, UserError, printable  # noqa: F401 (printable: part of this layer)

MAX_NAME = 128


def _bad_char(ch: str) -> bool:
    return unicodedata.category(ch) in _HIDDEN


def check_name(name, what: str = "name", *, path=None, line: int | None = None) -> str:
    """``name`` if it can become one path component: not empty, at most 128 characters, no ``/`` or
    ``\\``, not ``.`` or ``..``, no control or bidi characters. Else a UserError naming ``what``."""
    s = name if isinstance(name, str) else str(name)
    problem = None
    if not s.strip():
        problem = "is empty"
    elif len(s) > MAX_NAME:
        problem = f"is {len(s)} characters long (at most {MAX_NAME})"
    elif "/" in s or "\\" in s:
        problem = "contains a path separator"
    elif s in (".", ".."):
        problem = "is a relative directory"
    elif any(_bad_char(c) for c in s):
        bad = next(c for c in s if _bad_char(c))
        problem = f"holds a control character '{printable(bad)}' (control or bidi characters are refused)"
    if problem:
        raise UserError(f"{what} '{printable(s)[:80]}' {problem}: it becomes a file or folder name", path=path,
                        line=line, fix="use letters, digits, '-', '_' and '.' (e.g. F-tiny)")
    return s


def regular_file(path, what: str = "file", *, max_bytes: int | None = None, fix: str | None = None) -> Path:
    """``path`` if it is a regular file (symlinks followed) of at most ``max_bytes``; a FIFO, device,
    socket or directory is refused before anything opens it."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise UserError(f"cannot read the {what} ({e.strerror})", path=p, fix="check the path") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, device or socket)"
        raise UserError(f"the {what} is {kind}", path=p, fix=fix or f"give a regular {what}")
    if max_bytes is not None and st.st_size > max_bytes:
        raise UserError(f"the {what} is {st.st_size:,} bytes (at most {max_bytes:,} expected)", path=p,
                        fix=f"check that this is the {what} meant")
    return p


def inside(base, relpath, what: str = "file", *, source=None) -> Path:
    """``relpath`` (read from a handed file ``source``) resolved within the folder ``base``: an
    absolute path, ``..`` or a symlink that leads out of ``base`` is refused."""
    root = Path(base).resolve()
    rel = str(relpath)
    if not rel or "\x00" in rel:
        raise UserError(f"the {what} path '{printable(rel)}' is empty or holds a NUL", path=source,
                        fix="restore the file as it was written")
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        raise UserError(f"the {what} path '{printable(rel)[:80]}' leads outside {root}", path=source,
                        fix=f"a handed file may only name files inside its own folder; copy the {what} there")
    return target


def output_file(path, what: str = "output") -> Path:
    """``path`` if a file may be written there: absent, or an existing regular file (replaced
    atomically); a FIFO or device (``/dev/full``) is refused rather than silently replaced."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return p
    except OSError as e:
        raise UserError(e.strerror or f"cannot use the {what}", path=p, fix=f"give another path for the {what}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"the {what}: this is a directory, not a file name", path=p,
                        fix="give a file path inside it, e.g. DIR/result.json")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"the {what} exists and is not a regular file", path=p,
                        fix="give a new file path (it is written to a temporary file, then renamed)")
    return p


def output_dir(path, what: str = "output directory") -> Path:
    """``path`` if a folder may be written there: absent or a directory (a FIFO or device given as
    ``--out`` would otherwise fail half-way through, or be written through)."""
    p = Path(path)
    if (p.exists() or p.is_symlink()) and not p.is_dir():
        raise UserError(f"the {what} exists and is not a directory", path=p, fix="give a new or existing folder")
    return p


def finite(value, what: str, *, lo: float | None = None, hi: float | None = None, path=None,
           line: int | None = None) -> float:
    """``value`` as a float if it is a finite number within [lo, hi]; NaN and infinities are refused
    (NaN compares false with every bound, so an unchecked one passes any filter)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{what} '{printable(value)}' is not a number", path=path, line=line,
                        fix=f"give a number for {what}") from None
    bounds = f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}]"
    if not math.isfinite(x) or (lo is not None and x < lo) or (hi is not None and x > hi):
        raise UserError(f"{what} {value!r} is outside {bounds}", path=path, line=line,
                        fix=f"give a finite {what} in {bounds}")
    return x


def is_special(path) -> bool:
    """True for an existing FIFO, device or socket (reading one can block for ever)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


# every transformers from_pretrained: remote code off explicitly (a None lets transformers ask on the
# terminal, and a yes runs the folder's .py), and local files only (gendergap never downloads)
HF_LOCAL = {"trust_remote_code": False, "local_files_only": True}
# the JSON files through which transformers' Auto* classes find custom code (their "auto_map")
HF_CONFIGS = ("config.json", "preprocessor_config.json", "processor_config.json", "feature_extractor_config.json",
              "tokenizer_config.json", "generation_config.json")
MAX_CONFIG_BYTES = 16 << 20


def no_custom_code(folder) -> None:
    """Refuse a transformers folder whose configs name code it ships (``auto_map``, ``custom_pipelines``):
    gendergap runs only architectures the installed transformers has, so such a folder is one line."""
    for name in HF_CONFIGS:
        p = Path(folder) / name
        if not os.path.lexists(p):
            continue
        regular_file(p, name, max_bytes=MAX_CONFIG_BYTES)
        try:
            cfg = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{name} is not valid JSON ({str(e)[:100]})", path=p,
                            fix="copy the model folder again") from None
        # top level, or one level down (a processor_config.json nests its feature extractor's config)
        levels = [cfg, *cfg.values()] if isinstance(cfg, dict) else []
        found = [k for d in levels if isinstance(d, dict) for k in ("auto_map", "custom_pipelines") if k in d]
        if found:
            raise UserError(f"{name} names custom code ({found[0]}): loading it would run Python files from the folder",
                            path=p, fix="gendergap never runs a model folder's code: use a model whose architecture "
                                        "transformers ships (its config without auto_map)")


def folder_files(folder) -> list[Path]:
    """Every file under a handed folder, sorted; a symlinked directory inside it is refused (a walk that
    does not enter it would leave its files unchecked, and the loader that does would read them), and
    so is a special file."""
    out = []
    for root, dirs, files in os.walk(folder, followlinks=False):
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                raise UserError("the folder holds a symlinked directory", path=Path(root) / d,
                                fix="copy the files in place of the link (cp -rL)")
        out += [Path(root) / f for f in files]
    for f in out:
        if is_special(f):   # a FIFO named like a vocabulary would block whichever library opens it
            raise UserError("the folder holds a FIFO, device or socket", path=f, fix="give a regular file there")
    return sorted(out)
