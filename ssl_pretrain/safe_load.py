"""Loading torch checkpoint files without running code from them, and the packed release format.

``torch.load(..., weights_only=False)`` unpickles arbitrary objects: a checkpoint someone hands
you can run a shell command while it loads. Every checkpoint or state file gendergap reads goes
through ``load_torch_file``: ``weights_only=True`` with torch's own allowlist mechanism
(``torch.serialization.safe_globals``) for the few classes genuine checkpoints hold. The list
was read off real files (the pickle opcodes of each, see tests/test_safe_load.py):

- fairseq-hydra-train wav2vec 2.0 checkpoints (this project's pretraining, fairseq 0.12):
  tensors, dicts and lists only (hydra configs are saved as plain containers);
- fairseq-train speech_to_text checkpoints (this project's ST): ``argparse.Namespace`` (``args``);
- fairseq < 0.10 checkpoints (LeBenchmark, the original wav2vec 2.0 releases) also keep their
  config as an ``argparse.Namespace``.

Anything else is refused with one line naming the class and the file; ``--trust-checkpoint``
(on the command line only: a file never trusts itself, so a study config cannot say it) loads it the old
way, knowingly.

Packed releases (``gendergap ckpt pack``) are one ``.safetensors`` file: the encoder's weights
(fp16 by default) and, in the header's metadata, the fairseq config as JSON and the update count.
Reading one runs no code at all.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import re
import zipfile
from pathlib import Path

import torch

from corpora.base.errors import UserError

SAFE_GLOBALS = [argparse.Namespace]
TRUST_FIX = ("if you trust whoever made this file, pass --trust-checkpoint (on `gendergap sweep`/`study` for a "
             "study's checkpoints) to load it with full unpickling")


def load_torch_file(path: str | os.PathLike, *, trust: bool = False, what: str = "checkpoint", mmap: bool = False):
    """``torch.load`` on the CPU without unpickling arbitrary objects (unless ``trust``).

    ``mmap``: map the tensors' bytes instead of reading them (a zip checkpoint; enough to check a
    large file cheaply). A class outside the allowlist, or a file that is not a torch checkpoint,
    is a UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} file not found", path=path, fix=f"give the path of a {what} (.pt)")
    mmap = mmap and zipfile.is_zipfile(path)   # torch maps only its zip format
    try:
        if trust:
            return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        # torch names the class: "Unsupported global: GLOBAL omegaconf.dictconfig.DictConfig was not
        # an allowed global", or "Trying to load unsupported GLOBAL posix.system whose module ..."
        found = re.search(r"unsupported (?:global: )?GLOBAL ([\w.]+)", str(e), flags=re.IGNORECASE)
        if found:
            raise UserError(f"refusing to unpickle {found.group(1)}: a {what} needs no such class, and loading it "
                            "could run code", path=path, fix=TRUST_FIX) from None
        raise UserError(f"cannot read as a torch {what} ({str(e).splitlines()[0][:160]})", path=path,
                        fix=TRUST_FIX if "weights_only" in str(e) else f"give a {what} written by torch.save") from None
    except (RuntimeError, EOFError, ValueError, OSError, zipfile.BadZipFile, KeyError, AttributeError,
            TypeError, ModuleNotFoundError) as e:
        raise UserError(f"cannot read as a torch {what} ({type(e).__name__}: {str(e).splitlines()[0][:120]})",
                        path=path, fix=f"give a {what} written by torch.save (e.g. checkpoints/checkpoint_best.pt)") \
            from None


def check_before_fairseq(paths, *, trust: bool = False) -> None:
    """Read each existing file of ``paths`` with the safe loader before a fairseq subprocess loads
    it: fairseq calls torch.load itself, so a crafted file is refused here, in one line naming it,
    before any process starts. ``trust`` (--trust-checkpoint on the command line) skips the check."""
    if trust:
        return
    for path in paths:
        if Path(path).is_file():
            load_torch_file(path, what="checkpoint fairseq would load", mmap=True)


PICKLE_SUFFIXES = (".bin", ".pt", ".ckpt", ".pth")


def check_model_folder(folder: str | os.PathLike, *, trust: bool = False) -> None:
    """A model folder checked before transformers or SpeechBrain opens it: no custom code (even with
    ``trust``: that flag opts in to unpickling, never to running a folder's .py), no symlinked directory,
    and every pickle it holds read with the allowlist loader -- by suffix, and every shard a weights
    index (``*.index.json``) names, whatever its suffix (transformers unpickles what the index says)."""
    from corpora.base.boundary import folder_files, no_custom_code
    folder = Path(folder)
    no_custom_code(folder)
    files = folder_files(folder)
    for p in sorted(p for p in files if p.suffix == ".safetensors"):
        _check_safetensors_header(p)
    if trust:
        return
    pickles = {p for p in files if p.suffix in PICKLE_SUFFIXES}
    for idx in (p for p in files if p.name.endswith(".index.json")):
        pickles |= {s for s in _index_shards(idx) if s.suffix != ".safetensors"}
    for p in sorted(pickles):
        st = p.stat()
        _check_pickle_once(str(p), st.st_size, st.st_mtime_ns)


def _check_safetensors_header(path: Path) -> None:
    """The header of a safetensors file parses (only the header is read): a truncated or forged one
    is one line naming the file, not safetensors' own error from deep inside transformers."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(path), framework="pt") as f:
            f.keys()
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"not a valid safetensors file ({e})", path=path,
                        fix="copy the model folder again (the file is truncated or was altered)") from None


def _index_shards(index: Path) -> list[Path]:
    """The shard files a transformers weights index names, each resolved inside its folder, regular."""
    from corpora.base.boundary import MAX_CONFIG_BYTES, inside, regular_file
    regular_file(index, "weights index", max_bytes=MAX_CONFIG_BYTES)
    try:
        wmap = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (ValueError, UnicodeDecodeError, AttributeError):
        wmap = None
    if not isinstance(wmap, dict):
        raise UserError("the weights index has no weight_map object", path=index, fix="copy the model folder again")
    shards = [inside(index.parent, s, "weights shard", source=index) for s in sorted(set(map(str, wmap.values())))]
    return [regular_file(s, "weights shard") for s in shards]


@functools.lru_cache(maxsize=256)
def _check_pickle_once(path: str, size: int, mtime_ns: int) -> None:
    """load_torch_file once per file version (a folder is checked by every command that resolves it)."""
    del size, mtime_ns  # part of the cache key only
    load_torch_file(path, what="model file", mmap=True)


def unsafe_classes(path: str | os.PathLike) -> list[str]:
    """The classes a .pt would unpickle beyond torch's safe set and our allowlist, read from its
    pickle opcodes without loading a tensor (cheap enough to check a whole study config first)."""
    path = Path(path)
    if path.suffix == ".safetensors" or not path.is_file():   # safetensors: no pickle in it
        return []
    allowed = {f"{c.__module__}.{c.__qualname__}" for c in SAFE_GLOBALS}
    try:
        found = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception:  # noqa: BLE001 -- not a zip checkpoint: load_torch_file will say so, with the reason
        return []
    return sorted(set(found) - allowed)
