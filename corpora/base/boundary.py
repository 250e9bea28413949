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
- a **number** from a handed file or flag: ``finite`` (no NaN, no infinity, within bounds); ``whole``
  for a count, ``rate`` for a sample rate (``MIN_RATE``..``MAX_RATE``), ``dim`` for a feature
  dimension (1..``MAX_DIM``);
- a **string printed** from a handed file: ``printable`` escapes control and bidi characters, so a
  name cannot clear the screen or forge a line of output;
- a **handed JSON file** (registries, run.json, st.json, selection reports, profiles, store
  entries, model configs): ``read_json`` -- a regular file within a size bound, UTF-8, standard
  JSON (no NaN or Infinity), at most ``MAX_DEPTH`` levels deep, no key given twice, of a declared
  shape (a Python type or a pydantic model); ``parse_json`` for JSON text from a stream or a DB;
- a **handed line file or table** (vocabularies, label lists, hypotheses, corpus TSVs):
  ``corpora.base.textfile.read_lines`` / ``read_delimited`` (built on ``regular_file``);
- a **lock file**: ``locked`` opens it without truncating and never through a symlink (a planted
  link would otherwise be emptied), then holds an exclusive ``flock``;
- a **model folder**: ``no_custom_code`` refuses a config naming code the folder ships (``auto_map``),
  ``folder_files`` lists its files and refuses a symlinked directory in it, and every transformers
  loader takes ``**HF_LOCAL`` (never remote code, never the network, so no prompt can read stdin).

Every error is a UserError: one line naming the file, what is wrong and what to do.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import stat
import unicodedata
from pathlib import Path
from typing import Any, Iterator

from corpora.base.errors import _HIDDEN, UserError, printable  # noqa: F401 (printable: part of this layer)

MAX_NAME = 128


def _bad_char(ch: str) -> bool:
    return unicodedata.category(ch) in _HIDDEN


def check_label(text, what: str = "name", *, path=None, line: int | None = None, fix: str | None = None) -> str:
    """``text`` if it is one printable line (no control or bidi character): a label that heads table
    rows and log lines but never becomes a path (``check_name`` for one that does)."""
    s = str(text)
    bad = next((c for c in s if _bad_char(c)), None)
    if bad is not None:
        raise UserError(f"{what} '{printable(s)[:80]}' holds a control character '{printable(bad)}' (control or bidi "
                        "characters are refused)", path=path, line=line, fix=fix or "use printable characters")
    return s


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
    if problem is None:
        check_label(s, what, path=path, line=line, fix="use letters, digits, '-', '_' and '.' (e.g. F-tiny)")
    if problem:
        raise UserError(f"{what} '{printable(s)[:80]}' {problem}: it becomes a file or folder name", path=path,
                        line=line, fix="use letters, digits, '-', '_' and '.' (e.g. F-tiny)")
    return s


def special_kind(mode: int) -> str | None:
    """None for a regular file; else what the mode is, in words (the one special-file test)."""
    if stat.S_ISREG(mode):
        return None
    return ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a special file")


def regular_file(path, what: str = "file", *, max_bytes: int | None = None, fix: str | None = None) -> Path:
    """``path`` if it is a regular file (symlinks followed) of at most ``max_bytes``; a FIFO, device,
    socket or directory is refused before anything opens it."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise UserError(f"cannot read the {what} ({e.strerror})", path=p, fix="check the path") from None
    kind = special_kind(st.st_mode)
    if kind is not None:
        kind = kind if kind == "a directory" else f"not a regular file ({kind})"
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


def _kernel_interface(path: Path) -> bool:
    """Under /proc, /sys or /dev (but /dev/shm, a plain tmpfs): files that are kernel interfaces,
    where a temporary file cannot be created and renamed (the write would fail half-way, ENOENT)."""
    real = os.path.realpath(path)
    inside_ = [d for d in ("/proc", "/sys", "/dev") if real == d or real.startswith(d + "/")]
    return bool(inside_) and not (real == "/dev/shm" or real.startswith("/dev/shm/"))


def output_file(path, what: str = "output") -> Path:
    """``path`` if a file may be written there: absent, or an existing regular file (replaced
    atomically); a FIFO or device (``/dev/full``) is refused rather than silently replaced, and so is
    a path under /proc or /sys."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise UserError(e.strerror or f"cannot use the {what}", path=p,
                        fix=f"give another path for the {what}") from None
    kind = None if st is None else special_kind(st.st_mode)
    if kind == "a directory":
        raise UserError(f"the {what}: this is a directory, not a file name", path=p,
                        fix="give a file path inside it, e.g. DIR/result.json")
    if kind is not None:
        raise UserError(f"the {what} exists and is not a regular file", path=p,
                        fix="give a new file path (it is written to a temporary file, then renamed)")
    if _kernel_interface(p):
        raise UserError(f"the {what} is under a kernel file system (/proc, /sys, /dev)", path=p,
                        fix=f"give a path on a disk for the {what}")
    return p


def output_dir(path, what: str = "output directory") -> Path:
    """``path`` if a folder may be written there: absent or a directory (a FIFO or device given as
    ``--out`` would otherwise fail half-way through, or be written through)."""
    p = Path(path)
    if (p.exists() or p.is_symlink()) and not p.is_dir():
        raise UserError(f"the {what} exists and is not a directory", path=p, fix="give a new or existing folder")
    if _kernel_interface(p):
        raise UserError(f"the {what} is under a kernel file system (/proc, /sys, /dev)", path=p,
                        fix=f"give a folder on a disk for the {what}")
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


def whole(value, what: str, *, lo: int, hi: int, path=None, line: int | None = None, fix: str | None = None) -> int:
    """``value`` as an int if it is a whole number within [lo, hi] (a count, a dimension, a sample
    rate): ``1e3`` is a whole number; ``2.5``, NaN, an infinity and ``true`` are not. A string is read
    as a number (a command-line value, a cell of a text file)."""
    fix = fix or f"give a whole number in [{lo}, {hi}] for {what}"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UserError(f"{what} {printable(repr(value))[:60]} is not a whole number", path=path, line=line, fix=fix)
    try:
        x = float(value)
    except OverflowError:   # an int past a float's range (10**400): out of bounds like any other
        x = math.inf
    except ValueError:
        raise UserError(f"{what} '{printable(value)[:60]}' is not a number", path=path, line=line, fix=fix) from None
    if not (math.isfinite(x) and lo <= x <= hi and x == int(x)):   # NaN fails every comparison
        raise UserError(f"{what} {printable(value)[:60]} is not a whole number in [{lo}, {hi}]", path=path, line=line,
                        fix=fix)
    return int(x)


# Bounds of the numbers a handed file gives that size an allocation: a sample rate (samples per
# second of every audio read) and a feature dimension (floats per frame). Declared once, here.
MIN_RATE, MAX_RATE = 1000, 384_000     # Hz: telephone speech to studio audio; 1e20 or 0 is no recording
MAX_DIM = 65_536                       # floats per frame: the largest SSL models have 1,280-2,048


def rate(value, what: str = "sample rate", *, path=None, line: int | None = None, fix: str | None = None) -> int:
    """A sample rate in Hz read from a handed file (a table cell, a Kaldi command, an export's record):
    a whole number in [MIN_RATE, MAX_RATE]."""
    return whole(value, what, lo=MIN_RATE, hi=MAX_RATE, path=path, line=line, fix=fix)


def dim(value, what: str = "feature dimension", *, path=None, line: int | None = None, fix: str | None = None) -> int:
    """A feature dimension read from a handed file (a feature index, an export's record): a whole
    number in [1, MAX_DIM]."""
    return whole(value, what, lo=1, hi=MAX_DIM, path=path, line=line, fix=fix)


def is_special(path) -> bool:
    """True for an existing FIFO, device or socket (reading one can block for ever)."""
    try:
        kind = special_kind(os.stat(path).st_mode)
    except OSError:
        return False
    return kind not in (None, "a directory")


MAX_DEPTH = 64                  # levels of nesting in a handed JSON document (the project's own: <= 6)
MAX_JSON_BYTES = 64 << 20       # a registry or results file of a large study is a few MB


def _duplicate_free(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"the key '{printable(dup)[:60]}' is given twice in one object")
    return dict(pairs)


def _no_constant(name: str):
    raise ValueError(f"{name} is not standard JSON (a number must be finite)")


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON, iteratively (a recursive walk is what a deep file attacks)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack += [(v, d + 1) for v in (node.values() if isinstance(node, dict) else node)]
    return deepest


def parse_json(text: str | bytes, what: str = "JSON", *, path=None, line: int | None = None, shape=None,
               fix: str | None = None) -> Any:
    """JSON text from a handed source, parsed the one way: standard JSON only (NaN and Infinity
    refused), no key given twice, at most ``MAX_DEPTH`` levels, then checked against ``shape``."""
    fix = fix or f"restore the {what} as gendergap wrote it"
    try:
        data = json.loads(text, object_pairs_hook=_duplicate_free, parse_constant=_no_constant)
    except json.JSONDecodeError as e:   # ``line``: where the text starts in a file (None: not in a file's lines)
        raise UserError(f"the {what} is not valid JSON ({e.msg})", path=path,
                        line=None if line is None else line + e.lineno - 1, fix=fix) from None
    except (ValueError, UnicodeDecodeError) as e:
        raise UserError(f"the {what} is not valid JSON ({str(e)[:120]})", path=path, line=line, fix=fix) from None
    except RecursionError:
        raise UserError(f"the {what} nests more than {MAX_DEPTH} levels", path=path, line=line, fix=fix) from None
    if _depth(data) > MAX_DEPTH:
        raise UserError(f"the {what} nests more than {MAX_DEPTH} levels", path=path, line=line, fix=fix)
    return data if shape is None else checked(data, shape, what, path=path, line=line, fix=fix)


_JSON_KIND = {dict: "a JSON object", list: "a JSON array", str: "a string", int: "an integer", float: "a number",
              bool: "true/false", type(None): "null"}


def checked(data: Any, shape, what: str, *, path=None, line: int | None = None, fix: str | None = None) -> Any:
    """``data`` if it has ``shape``: a Python type (``dict``, ``list``) or a pydantic model (then the
    validated model is returned); else one line naming the first field that is wrong."""
    model = hasattr(shape, "model_validate")
    if model and not isinstance(data, dict):
        return checked(data, dict, what, path=path, line=line, fix=fix)   # the same words as for a type
    if not model:
        if not isinstance(data, shape):
            raise UserError(f"the {what} is {_JSON_KIND.get(type(data), type(data).__name__)}, not "
                            f"{_JSON_KIND.get(shape, shape.__name__)}", path=path, line=line,
                            fix=fix or f"restore the {what} as gendergap wrote it")
        return data
    from pydantic import ValidationError
    try:
        return shape.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "(top level)"
        got = printable(repr(err.get("input")))[:60]
        raise UserError(f"the {what}'s '{printable(where)}' is wrong: {err['msg']} (got {got})", path=path, line=line,
                        fix=fix or f"restore the {what} as gendergap wrote it") from None


def read_json(path, what: str = "file", *, shape=None, max_bytes: int = MAX_JSON_BYTES, fix: str | None = None) -> Any:
    """A handed JSON file, read the one way (see ``parse_json``): a regular file of at most
    ``max_bytes``, UTF-8, checked against ``shape``."""
    p = regular_file(path, what, max_bytes=max_bytes, fix=fix)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"the {what} is not UTF-8 text", path=p, fix=fix or f"restore the {what}") from None
    except OSError as e:
        raise UserError(f"cannot read the {what} ({e.strerror})", path=p, fix=fix or "check the path") from None
    return parse_json(text, what, path=p, line=1, shape=shape, fix=fix)


def read_state_json(path, what: str = "state file", *, shape=dict, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON file gendergap wrote to remember work done (a job's done.json, a cache's record), read
    like any handed file; None when it is absent or fails any check -- the work is then redone,
    which is always safe, so a damaged or planted record costs time, never a wrong result."""
    if not os.path.lexists(path):
        return None
    try:
        return read_json(path, what, shape=shape, max_bytes=max_bytes)
    except UserError:
        return None


def listed_file(base, relpath, what: str = "file", *, source=None, max_bytes: int | None = None) -> Path:
    """A file named inside a handed file: resolved within ``base`` (``inside``) and a regular file
    of at most ``max_bytes`` (``regular_file``)."""
    return regular_file(inside(base, relpath, what, source=source), what, max_bytes=max_bytes)


@contextlib.contextmanager
def locked(path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on the lock file ``path`` (created if absent). Opened without
    truncation and never through a symlink, so a link planted under the lock's name is refused,
    not emptied. Yields False when ``blocking`` is off and another process holds it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        what = ("is a symlink (a lock file is never opened through one)" if os.path.islink(path)
                else f"cannot be opened ({e.strerror})")
        raise UserError(f"the lock file {what}", path=path, fix="remove it; gendergap creates it again") from None
    try:
        if special_kind(os.fstat(fd).st_mode) is not None:
            raise UserError("the lock file is not a regular file", path=path,
                            fix="remove it; gendergap creates it again")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


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
        cfg = read_json(p, name, max_bytes=MAX_CONFIG_BYTES, fix="copy the model folder again")
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
