"""The packed release format of a wav2vec 2.0 pretraining checkpoint (`gendergap ckpt pack`): one
.safetensors file holding the weights and, as header metadata, the fairseq config and update count.
Reading one runs no code (no pickle), so the shipped checkpoints and anyone's releases load safely."""
from __future__ import annotations

import json
import os
from pathlib import Path

from corpora.base.atomic import atomic_path
from corpora.base.boundary import parse_json
from corpora.base.errors import UserError
from ssl_pretrain.architecture import hf_config

PACKED_FORMAT = "gendergap-packed-wav2vec2/1"


def pack_checkpoint(ref, out: str | os.PathLike, half: bool = True, updates: int | None = None) -> Path:
    """A small release copy of a pretraining checkpoint: one .safetensors file holding the
    weights (fp16 by default) and, as header metadata, the fairseq config and update count
    (save_packed). Optimizer state and training counters are dropped
    (they are most of a .pt); the converter, feature extraction and ``contrastive_accuracy``
    read the result, and reading it runs no code."""
    out = Path(out)
    if out.suffix != ".safetensors":
        raise UserError(f"a packed checkpoint is a .safetensors file, not {out.suffix or 'a file without suffix'}",
                        path=out, fix=f"e.g. --out {out.with_suffix('.safetensors').name}")
    return save_packed(ref.fairseq_state(), out, half=half, updates=updates)


def save_packed(state: dict, out: str | os.PathLike, half: bool = True, updates: int | None = None) -> Path:
    """A fairseq wav2vec 2.0 checkpoint dict as one .safetensors file (weights + config metadata).
    ``updates`` replaces the checkpoint's own update count (e.g. the total of a warm-started run)."""
    from safetensors.torch import save_file

    out = Path(out)
    weights = {k: (v.half() if half and v.is_floating_point() else v).contiguous() for k, v in state["model"].items()}
    history = state.get("optimizer_history") or [{}]
    meta = {"format": PACKED_FORMAT, "fairseq_cfg": json.dumps(state["cfg"]),
            "num_updates": str(updates if updates is not None else history[-1].get("num_updates"))}
    with atomic_path(out) as tmp:   # beside the target, then renamed: never half a release
        save_file(weights, str(tmp), metadata=meta)
    return out


def is_packed(path: str | os.PathLike) -> bool:
    return Path(path).suffix == ".safetensors"


def load_packed(path: str | os.PathLike) -> dict:
    """A packed release back as the fairseq checkpoint dict the rest of gendergap reads."""
    from safetensors import SafetensorError, safe_open
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != PACKED_FORMAT:
                raise UserError(f"not a gendergap packed checkpoint (format {meta.get('format')!r})", path=path,
                                fix="give a file written by `gendergap ckpt pack`, a fairseq .pt or a transformers "
                                "folder")
            weights = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as e:
        raise UserError(f"cannot read as safetensors ({e})", path=path,
                        fix="give a file written by `gendergap ckpt pack`") from None
    return {"cfg": _packed_cfg(meta, path), "model": weights, "args": None,
            "optimizer_history": [{"num_updates": _packed_updates(meta, path)}]}


def _packed_cfg(meta: dict, path: Path) -> dict:
    """The header's fairseq config, checked to be what `ckpt pack` writes: JSON with a ``model``
    section whose shapes build a transformers Wav2Vec2Config (so an edited header fails here, in one
    line, not as a KeyError in whatever command first builds the model)."""
    fix = "the release's metadata was edited or damaged: re-pack it (gendergap ckpt pack) or download it again"
    if "fairseq_cfg" not in meta:
        raise UserError("packed checkpoint has no fairseq_cfg metadata", path=path, fix=fix)
    cfg = parse_json(meta["fairseq_cfg"], "fairseq_cfg metadata of the packed checkpoint", path=path, fix=fix)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("model"), dict):
        raise UserError("packed checkpoint's fairseq_cfg metadata has no `model` section", path=path, fix=fix)
    try:
        hf_config(cfg["model"])
    except (KeyError, ValueError, TypeError, AttributeError, SyntaxError) as e:
        raise UserError(f"packed checkpoint's fairseq_cfg.model is not a wav2vec 2.0 config ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:100] if str(e) else ''})", path=path, fix=fix) from None
    return cfg


def _packed_updates(meta: dict, path: Path) -> int | None:
    updates = meta.get("num_updates")
    if updates in (None, "", "None"):
        return None
    try:
        return int(updates)
    except ValueError:
        raise UserError(f"packed checkpoint's num_updates metadata {updates[:40]!r} is not a number", path=path,
                        fix="re-pack it (gendergap ckpt pack) or download it again") from None
