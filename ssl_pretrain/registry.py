"""The checkpoint registry: named SSL models with their pretraining data make-up (Table 3).

A JSON file (default runs/checkpoints.json), rewritten atomically on every change. Each entry:
name, path, kind (fairseq | packed | hf), hours, male_pct, female_pct, unknown_pct, updates, added,
the `manifest build` dir it was pretrained on when given (a study's Table 1 describes it), and
the model's facts (family, parameters, layers, hidden_size, front_end, sample_rate).
Entries are checked before they are added (ssl_pretrain.checkpoints.register_checkpoint): a
fairseq file must be a wav2vec 2.0 *pretraining* checkpoint (a fine-tuned CTC model is
refused), a folder must be a transformers model of a supported family (ssl_pretrain.families).
This module only keeps the JSON.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from corpora.base import boundary
from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from corpora.base.registry_file import read_registry
from corpora.base.units import count_label

DEFAULT_PATH = Path("runs") / "checkpoints.json"


def check_name(name: str, where: str | os.PathLike | None = None, line: int | None = None) -> str:
    """A checkpoint name heads table rows and log lines and becomes file and folder names (feature
    store entries, fine-tuning runs): the boundary's one name check."""
    return boundary.check_name(name, "checkpoint name", path=where, line=line)


class Registry:
    """Named checkpoints in one JSON file."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path) if path is not None else Path(os.environ.get("GENDERGAP_CHECKPOINTS", DEFAULT_PATH))

    def entries(self) -> list[dict]:
        """The entries, each ``path`` and ``manifest`` absolute (one stored relative to the registry's folder, as
        for checkpoints inside it, resolves there: a copied study uses its own copies)."""
        base = self.path.resolve().parent
        return [dict(e, **{k: str(base / e[k]) for k in ("path", "manifest") if e.get(k) and not os.path.isabs(e[k])})
                for e in self._stored()]

    def _stored(self) -> list[dict]:
        if not os.path.lexists(self.path):
            return []
        return read_registry(self.path, "repair the file or move it away and re-add the checkpoints")

    def get(self, name: str) -> dict:
        for e in self.entries():
            if e["name"] == name:
                return e
        known = ", ".join(e["name"] for e in self.entries()) or "none yet"
        raise UserError(f"no checkpoint named {name!r} in the registry (known: {known})", path=self.path,
                        fix="give a path, or register it with `gendergap ckpt add NAME PATH ...`")

    def add(self, name: str, path: str | os.PathLike, *, kind: str, updates: int | None = None,
            hours: float | None = None, male_pct: float | None = None, female_pct: float | None = None,
            unknown_pct: float | None = None, replace: bool = False, note: str = "",
            model: dict | None = None, manifest: str | os.PathLike | None = None) -> dict:
        """Add (or with ``replace`` update) an entry for an already checked checkpoint; returns it."""
        check_name(name)
        pcts = [p for p in (male_pct, female_pct, unknown_pct) if p is not None]
        if any(p < 0 or p > 100 for p in pcts):
            raise UserError(f"percentages must lie in 0..100 (got {pcts})", fix="pass --male-pct etc. as percentages")
        if len(pcts) == 3 and abs(sum(pcts) - 100) > 1.0:
            raise UserError(f"male + female + unknown = {sum(pcts):.1f}%, not 100%",
                            fix="give the shares of the pretraining hours in percent (Table 3 of the study)")
        path = Path(path).resolve()
        if not path.exists():
            raise UserError("checkpoint path not found", path=path,
                            fix="give a fairseq .pt file or a transformers folder")
        entries = self._stored()
        if any(e["name"] == name for e in entries) and not replace:
            raise UserError(f"a checkpoint named {name!r} is already registered", path=self.path,
                            fix="pick another name or pass --replace")
        base = self.path.resolve().parent
        def stored(p: Path) -> str:   # relocatable: a file inside the registry's folder is kept relative
            return os.path.relpath(p, base) if p.is_relative_to(base) else str(p)
        entry = {"name": name, "path": stored(path), "kind": kind, "hours": hours, "male_pct": male_pct,
                 "female_pct": female_pct, "unknown_pct": unknown_pct,
                 "updates": updates, **(model or {}),
                 **({"manifest": stored(Path(manifest).resolve())} if manifest else {}),
                 "added": time.strftime("%Y-%m-%dT%H:%M:%S"), "note": note}
        entries = [e for e in entries if e["name"] != name] + [entry]
        write_json(self.path, {"checkpoints": entries})
        return dict(entry, path=str(path))

    def table(self) -> str:
        """Table 3 of the reference study: model, family, parameters, # updates, # hours, M %, F %, U %."""
        def fmt(v, kind):
            if v is None:
                return "-"
            if kind == "updates":
                return f"{v / 1000:g}K" if v >= 1000 else str(v)
            if kind == "hours":
                return f"{v:,.0f}" if v >= 100 else f"{v:g}"
            return f"{v:g}"
        rows = [("Model", "family", "params", "# updates", "# hours", "M,%", "F,%", "U,%", "kind")]
        for e in self.entries():
            rows.append((boundary.printable(e["name"]), boundary.printable(e.get("family") or "-"),
                         count_label(e.get("parameters")),
                         fmt(e.get("updates"), "updates"), fmt(e.get("hours"), "hours"),
                         fmt(e.get("male_pct"), "pct"), fmt(e.get("female_pct"), "pct"),
                         fmt(e.get("unknown_pct"), "pct"), e["kind"]))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
                 for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines) + "\n"


def run_checkpoint(path: str | os.PathLike) -> tuple[Path, str]:
    """The checkpoint a path means, and in words which one it is.

    A file or a transformers folder (config.json) is itself. A pretraining run folder (``pretrain
    run --out``, or its ``checkpoints/``) means fairseq's ``checkpoint_best.pt``, else its
    ``checkpoint_last.pt``: a run without a valid split (``dataset.disable_validation``) has no
    best, only a last. Anything else is a UserError."""
    path = Path(path)
    if path.is_file() or (path / "config.json").is_file():
        return path, f"{path}"
    for folder in (path / "checkpoints", path):
        for name, why in (("checkpoint_best.pt", "the best by validation loss"),
                          ("checkpoint_last.pt", "the last: the run has no checkpoint_best.pt (no valid split)")):
            if (folder / name).is_file():
                return folder / name, f"{folder / name} ({why})"
    if not path.exists():
        raise UserError("checkpoint path not found", path=path, fix="give a fairseq .pt file or a transformers folder")
    raise UserError("no checkpoint here: neither a .pt file, a transformers folder (config.json) nor a pretraining "
                    "run (checkpoints/checkpoint_best.pt or checkpoint_last.pt)", path=path,
                    fix="give the checkpoint file, or the --out folder of `gendergap pretrain run`")
