"""A run's trained weights, recorded by content: a result belongs to the model that made it.

A run directory's ``save/`` is only files: another run's ``model.ckpt`` copied over, or a CKPT
folder copied in from another run with a better validation score (decoding picks the best), would
be decoded as this run's model, its WER filed under this run's checkpoint. So at the end of
training (``common.fit_by_length``) run.json records the checkpoint decoding will pick and the
sha256 of each of its files::

    "weights": {"checkpoint": "CKPT+2024-...", "sha256": {"CKPT.yaml": ..., "head.ckpt": ..., ...}}

and every command that loads a run's weights (`asr decode`, `asr transcribe` and `asr export` of
a run directory, the sweep's decode after training: all through ``decode.recover_best``) checks:

- the checkpoint it would pick is the recorded one (before anything is loaded);
- each file it loaded, and the CKPT.yaml whose scores it reports, has the recorded content (after
  the allowlist loader read them, which runs no code either way, and before any hypothesis);
- a run without the record (trained before gendergap kept it, or whose training did not finish)
  is refused, unless ``--trust-checkpoint``: then it decodes with a warning. A mismatch is
  refused even then: the record says these are another model's weights.

Any of them is one line and exit 2. The record guards against mix-ups, not against a forger who
rewrites run.json too: what a file holds is still read only by the allowlist loader.
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from corpora.base.atomic import write_json
from corpora.base.boundary import read_json
from corpora.base.errors import UserError, printable
from corpora.base.provenance import file_sha256

log = logging.getLogger(__name__)

KEY = "weights"   # run.json's key
# SpeechBrain's names (speechbrain.utils.checkpoints METAFNAME, PARAMFILE_EXT), imported where used:
# this module is imported by the light decode.py, a checkpoint is only ever read with SpeechBrain loaded
_NAME = re.compile(r"CKPT[A-Za-z0-9+:._-]{0,200}")   # SpeechBrain's CKPT+<time> folder names
_FILE = re.compile(r"[A-Za-z0-9_.+-]{1,200}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
FIX = ("restore this run directory's own save/ folder (the checkpoint its training recorded in run.json), "
       "or train the run again in a new --out")


def describe(ckpt_dir: Path) -> dict:
    """The record of one checkpoint folder: its name and the sha256 of its parameter and meta files."""
    from speechbrain.utils.checkpoints import METAFNAME, PARAMFILE_EXT
    files = sorted(p for p in Path(ckpt_dir).iterdir()
                   if p.is_file() and (p.suffix == PARAMFILE_EXT or p.name == METAFNAME))
    return {"checkpoint": Path(ckpt_dir).name, "sha256": {p.name: file_sha256(p) for p in files}}


def record(out_dir: str | os.PathLike, ckpt) -> None:
    """Record ``ckpt`` (the checkpoint decoding will pick; None: the run saved none) in run.json."""
    path = Path(out_dir) / "run.json"
    run = read_json(path, "run.json", shape=dict)
    if ckpt is None:
        run.pop(KEY, None)
    else:
        run[KEY] = describe(Path(ckpt.path))
    write_json(path, run)


def _recorded(out_dir: Path, run: dict) -> dict | None:
    entry = run.get(KEY)
    if entry is None:
        return None
    ok = (isinstance(entry, dict) and isinstance(entry.get("checkpoint"), str) and _NAME.fullmatch(entry["checkpoint"])
          and isinstance(entry.get("sha256"), dict) and entry["sha256"]
          and all(isinstance(k, str) and _FILE.fullmatch(k) and isinstance(v, str) and _SHA256.fullmatch(v)
                  for k, v in entry["sha256"].items()))
    if not ok:
        raise UserError(f"run.json's `{KEY}` is not a record of a checkpoint (its folder name and the sha256 of "
                        "its files)", path=out_dir / "run.json", fix=FIX)
    return entry


def check_before_loading(out_dir: str | os.PathLike, run: dict, ckpt, trust: bool) -> dict | None:
    """The run's record, once ``ckpt`` (the checkpoint decoding picked) is the recorded one; None for
    a run without a record that ``trust`` lets decode. Else a UserError."""
    out_dir = Path(out_dir)
    entry = _recorded(out_dir, run)
    if entry is None:
        if not trust:
            raise UserError("this run directory has no record of its trained weights (run.json's sha256 of the "
                            "checkpoint its training ended with: trained by an older gendergap, or its training "
                            "did not finish), so nothing says save/ holds this run's own model",
                            path=out_dir / "run.json",
                            fix="run its training command again with the same budget (it trains no further and "
                                "records them), or pass --trust-checkpoint if you trust this save/ folder")
        log.warning("%s: no record of this run's trained weights; decoding %s as --trust-checkpoint says",
                    out_dir, Path(ckpt.path).name)
        return None
    if Path(ckpt.path).name != entry["checkpoint"]:
        raise UserError(f"decoding would pick the checkpoint {printable(Path(ckpt.path).name)}, not the one this "
                        f"run's training ended with ({entry['checkpoint']}): it is another model's",
                        path=ckpt.path, fix=FIX)
    return entry


def check_loaded(entry: dict, ckpt, loaded_names) -> None:
    """Each file of ``ckpt`` loaded for ``loaded_names`` (the checkpointer's recoverables), and its
    meta file, has the content ``entry`` recorded; else a UserError naming the file."""
    from speechbrain.utils.checkpoints import METAFNAME
    files = [Path(ckpt.paramfiles[n]) for n in loaded_names if n in ckpt.paramfiles] + [Path(ckpt.path) / METAFNAME]
    for f in files:
        want = entry["sha256"].get(f.name)
        if want is None or file_sha256(f) != want:
            raise UserError("is not the file this run's training wrote (its sha256 differs from run.json's record): "
                            "these are another model's weights", path=f, fix=FIX)
