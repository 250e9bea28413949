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
import os
import pickle
import re
import struct
import zipfile
from pathlib import Path

import torch

from corpora.base.boundary import HF_CONFIGS, MAX_CONFIG_BYTES, folder_files, listed_file, no_custom_code, read_json
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
        first = (str(e).splitlines() or [""])[0]   # an exception may have no message
        raise UserError(f"cannot read as a torch {what} ({first[:160]})", path=path,
                        fix=TRUST_FIX if "weights_only" in str(e) else f"give a {what} written by torch.save") from None
    # IndexError, struct.error: torch's weights-only unpickler on bytes that are no pickle (a text file named .pt)
    except (RuntimeError, EOFError, ValueError, OSError, zipfile.BadZipFile, KeyError, AttributeError,
            TypeError, ModuleNotFoundError, IndexError, struct.error) as e:
        first = (str(e).splitlines() or [""])[0]
        raise UserError(f"cannot read as a torch {what} ({type(e).__name__}: {first[:120]})",
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
            state = load_torch_file(path, what="checkpoint fairseq would load", mmap=True)
            # what fairseq's load_checkpoint_to_cpu reads before anything else: another shape is a KeyError
            # deep in fairseq's upgrade code, reported from its log
            if not (isinstance(state, dict) and isinstance(state.get("model"), dict)
                    and ("cfg" in state or "args" in state) and ("optimizer_history" in state or "best_loss" in state)):
                raise UserError("is not a fairseq checkpoint (a mapping with model, cfg or args, and "
                                "optimizer_history)",
                                path=path, fix="give the checkpoint fairseq wrote: restore the run directory, or train "
                                               "the run again")


PICKLE_SUFFIXES = (".bin", ".pt", ".ckpt", ".pth")


def check_model_folder(folder: str | os.PathLike, *, trust: bool = False) -> None:
    """A model folder checked before transformers or SpeechBrain opens it: no custom code (even with
    ``trust``: that flag opts in to unpickling, never to running a folder's .py), no symlinked directory,
    and every pickle it holds read with the allowlist loader -- by suffix, and every shard a weights
    index (``*.index.json``) names, whatever its suffix (transformers unpickles what the index says)."""
    folder = Path(folder)
    for name in HF_CONFIGS:   # read the one bounded way first: a 100k-deep or huge file is one line, not a
        if os.path.lexists(folder / name):   # RecursionError from a plain json.loads further on
            read_json(folder / name, name, max_bytes=MAX_CONFIG_BYTES, fix="copy the model folder again")
    no_custom_code(folder)
    files = folder_files(folder)
    # every shard an index names, resolved inside the folder (a shard elsewhere, missing or a FIFO is one
    # line) and checked like the folder's own files, with or without --trust-checkpoint
    shards = {s for idx in files if idx.name.endswith(".index.json") for s in index_shards(idx)}
    for p in sorted(p for p in {*files, *shards} if p.suffix == ".safetensors"):
        _check_safetensors_header(p)
    if trust:
        return
    pickles = {p for p in files if p.suffix in PICKLE_SUFFIXES} | {s for s in shards if s.suffix != ".safetensors"}
    for p in sorted(pickles):
        st = p.stat()
        _check_pickle_once(str(p), st.st_size, st.st_mtime_ns)


def _check_safetensors_header(path: Path) -> None:
    """The header of a safetensors file parses (only the header is read): a truncated or forged one
    is one line naming the file, not safetensors' own error from deep inside transformers."""
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = list(f.keys())
    except (SafetensorError, OSError, ValueError) as e:
        raise UserError(f"not a valid safetensors file ({e})", path=path,
                        fix="copy the model folder again (the file is truncated or was altered)") from None
    if not keys:   # transformers would load nothing from it and leave every weight at random init
        raise UserError("the safetensors file holds no tensors", path=path,
                        fix="copy the model folder again (the weights file was emptied)")


def index_shards(index: Path) -> list[Path]:
    """The shard files a transformers weights index (``*.index.json``) names in its ``weight_map``,
    each resolved inside the index's folder and a regular file, sorted."""
    fix = "copy the model folder again"
    wmap = read_json(index, "weights index", shape=dict, max_bytes=MAX_CONFIG_BYTES, fix=fix).get("weight_map")
    if not isinstance(wmap, dict) or not wmap or not all(isinstance(v, str) for v in wmap.values()):
        raise UserError("the weights index has no weight_map object of weight name -> shard file", path=index, fix=fix)
    return sorted({listed_file(index.parent, s, "weights shard", source=index) for s in wmap.values()})


def check_finite_weights(paths, *, trust: bool = False) -> None:
    """Every floating-point tensor of the weight files ``paths`` (safetensors or torch pickles) is
    finite: a NaN or an infinity loads silently and turns every feature after it into NaN."""
    for p in paths:
        st = Path(p).stat()
        _finite_once(str(p), st.st_size, st.st_mtime_ns, trust)


@functools.lru_cache(maxsize=64)
def _finite_once(path: str, size: int, mtime_ns: int, trust: bool) -> None:
    del size, mtime_ns  # part of the cache key only
    if path.endswith(".safetensors"):
        from safetensors import safe_open
        with safe_open(path, framework="pt") as f:   # one tensor in memory at a time
            tensors = ((k, f.get_tensor(k)) for k in f.keys())
            _first_non_finite(tensors, path)
        return
    state = load_torch_file(path, trust=trust, what="model file", mmap=True)
    _first_non_finite(((k, v) for k, v in (state.items() if isinstance(state, dict) else ())), path)


def _first_non_finite(tensors, path: str) -> None:
    for key, t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
            kind = "NaN" if bool(torch.isnan(t).any()) else "infinite"
            raise UserError(f"the weight '{key}' holds {kind} values", path=path,
                            fix="copy the model folder again (a NaN or infinite weight makes every feature NaN)")


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
