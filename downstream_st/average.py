"""Average the last N epoch checkpoints of a fairseq run (the study averages the last 10).

fairseq's own ``scripts/average_checkpoints.py`` is not part of the installed package
(``fairseq-fixed`` ships ``fairseq`` and ``fairseq_cli`` only), so this is the same
operation written out: the element-wise mean of every floating-point tensor of the model
state, computed in float64 and cast back; integer tensors (counters, buffers) must agree and
are kept. The averaged file keeps the newest checkpoint's config, so fairseq-generate loads
it like any other checkpoint; the optimizer state, meaningless for a mean, is dropped.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import torch

from corpora.base.atomic import atomic_path
from corpora.base.errors import UserError
from ssl_pretrain.safe_load import load_torch_file

log = logging.getLogger(__name__)

EPOCH_FILE = re.compile(r"^checkpoint(\d+)\.pt$")
UPDATE_FILE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")


def epoch_checkpoints(save_dir: str | os.PathLike) -> list[Path]:
    """``checkpoint<E>.pt`` (end of epoch E) and ``checkpoint_<E>_<U>.pt`` files, oldest first."""
    found = []
    for p in Path(save_dir).glob("checkpoint*.pt"):
        m = EPOCH_FILE.match(p.name)
        if m:
            found.append(((int(m.group(1)), 1 << 62), p))  # end of epoch E comes after its mid-epoch saves
            continue
        m = UPDATE_FILE.match(p.name)
        if m:
            found.append(((int(m.group(1)), int(m.group(2))), p))
    return [p for _, p in sorted(found)]


def last_checkpoints(save_dir: str | os.PathLike, n: int) -> list[Path]:
    """The newest ``n`` numbered checkpoints (fewer if fewer exist). A run stopped by its time
    budget before its first numbered save has only checkpoint_last.pt: that one is used."""
    paths = epoch_checkpoints(save_dir)
    if not paths and (Path(save_dir) / "checkpoint_last.pt").is_file():
        log.warning("no numbered checkpoints in %s: using checkpoint_last.pt alone", save_dir)
        return [Path(save_dir) / "checkpoint_last.pt"]
    if not paths:
        raise UserError("no numbered checkpoints (checkpoint<E>.pt) to average", path=save_dir,
                        fix="train at least one epoch, keeping epoch checkpoints (keep-last-epochs)")
    if len(paths) < n:
        log.warning("averaging %d checkpoint(s): fewer than the %d asked for", len(paths), n)
    return paths[-n:]


def _load(path: Path) -> dict:
    # our own fairseq-train checkpoints: tensors, containers and an argparse.Namespace, all on
    # the safe loader's allowlist -- never a full unpickle
    return load_torch_file(path, what="ST checkpoint")


def average_checkpoints(paths: list[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Write the mean of ``paths``' model weights to ``out`` (atomically); returns ``out``."""
    if not paths:
        raise UserError("nothing to average", fix="give at least one checkpoint")
    paths = [Path(p) for p in paths]
    sums: dict[str, torch.Tensor] = {}
    first: dict[str, torch.Tensor] = {}
    newest = None
    for path in paths:
        state = _load(path)
        model = state["model"]
        if sums and set(model) != set(sums):
            raise UserError("checkpoints hold different parameters (not the same model)", path=path,
                            fix="average checkpoints of one training run")
        for key, value in model.items():
            if value.is_floating_point():
                sums[key] = sums[key] + value.double() if key in sums else value.double().clone()
            else:
                if key in first and not torch.equal(first[key], value):
                    raise UserError(f"integer tensor {key!r} differs between checkpoints", path=path,
                                    fix="average checkpoints of one training run")
                first.setdefault(key, value)
                sums[key] = value
        newest = state
    averaged = {}
    for key, value in newest["model"].items():
        averaged[key] = (sums[key] / len(paths)).to(value.dtype) if value.is_floating_point() else value
    newest["model"] = averaged
    newest["last_optimizer_state"] = None
    newest.setdefault("extra_state", {})["averaged_from"] = [str(p) for p in paths]
    with atomic_path(out) as tmp:
        torch.save(newest, tmp)
    log.info("averaged %d checkpoint(s) -> %s", len(paths), out)
    return out
