"""A run directory: its yaml copy, character vocabulary and run record (run.json).

Both recipes keep everything a run needs in one directory: ``hparams.yaml`` (copied on the
first run), ``vocab.txt`` (built from the training text), ``run.json`` (checkpoint, CSVs,
overrides, normalisation), ``save/`` (SpeechBrain checkpoints), ``train_log.txt``.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import yaml
from hyperpyyaml import load_hyperpyyaml

from corpora.base.errors import UserError
from downstream_asr.data import read_csv
from downstream_asr.decode import merge
from downstream_asr.text import TextNorm, build_vocab, load_vocab, save_vocab


class _PlainLoader(yaml.SafeLoader):
    """Reads a HyperPyYAML file as plain YAML (tags ignored) to look at plain keys."""


_PlainLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def load_hparams(hparams_file, overrides: dict):
    """The recipe's objects (HyperPyYAML) with ``overrides``; a failure is a UserError."""
    with open(hparams_file, encoding="utf-8") as f:
        try:
            hparams = load_hyperpyyaml(f, overrides)
        except (KeyError, ValueError, TypeError) as e:
            raise UserError(f"cannot build the recipe from the hyperparameters ({type(e).__name__}: {e})",
                            path=hparams_file, fix="check the yaml and the KEY=VALUE overrides") from None
    ratio = hparams.get("lr_final_ratio", 1.0)
    if not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise UserError(f"lr_final_ratio must be a number in (0, 1], not {ratio!r}", path=hparams_file,
                        fix="e.g. lr_final_ratio=0.05 (decay to 5 %), or 1.0 for a constant learning rate")
    return hparams


def prepare_run(ssl: dict, train_csv, out_dir, hparams_file=None, overrides: dict | None = None,
                data_root: str | None = None, *, kind: str, default_hparams: Path,
                extra: dict | None = None) -> tuple[dict, "object", "object"]:
    """Create or re-open a run directory: copy the yaml, build or check the vocabulary.

    Re-running with the same directory resumes; a different training text (a different
    vocabulary) is refused rather than silently mixed with the old checkpoints.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hp_copy = out_dir / "hparams.yaml"
    if not hp_copy.exists():
        src = Path(hparams_file or default_hparams)
        if not src.is_file():
            raise UserError("no such hyperparameter file", path=src, fix="give a yaml like " + str(default_hparams))
        shutil.copyfile(src, hp_copy)
    elif hparams_file and Path(hparams_file).read_bytes() != hp_copy.read_bytes():
        raise UserError("the run directory was started with other hyperparameters", path=hp_copy,
                        fix="use a new --out, or drop --hparams to resume with the saved ones")
    with open(hp_copy, encoding="utf-8") as f:
        raw = yaml.load(f, Loader=_PlainLoader)
    norm = TextNorm.from_dict(merge(raw.get("text_norm") or {}, (overrides or {}).get("text_norm") or {}))
    train = read_csv(train_csv, norm, training=True, data_root=data_root)
    vocab = build_vocab(train["text"])
    vocab_path = out_dir / "vocab.txt"
    if vocab_path.exists():
        saved = load_vocab(vocab_path)
        if saved.lab2ind != vocab.lab2ind:
            raise UserError("the training text gives another character vocabulary than the run directory's",
                            path=vocab_path, fix="use a new --out for a new training set")
    else:
        save_vocab(vocab, vocab_path)
    previous = json.loads((out_dir / "run.json").read_text()) if (out_dir / "run.json").exists() else {}
    before = (previous.get("ssl") or {}).get("sha256")
    if before not in (None, ssl["sha256"]) and any((out_dir / "save").glob("CKPT*")):
        raise UserError("the run directory was trained from another SSL checkpoint "
                        f"({previous['ssl']['path']} has other contents)", path=out_dir / "run.json",
                        fix="use a new --out for the new checkpoint")
    run = {"kind": kind, "ssl": ssl, "train_csv": str(Path(train_csv).resolve()),
           "data_root": data_root, "overrides": overrides or {}, "text_norm": norm.as_dict(),
           "text_norm_name": norm.name, "vocab_size": len(vocab), "progress": True,
           "started": previous.get("started", time.time()), **(extra or {})}
    return run, vocab, train


class _PlainLoader(yaml.SafeLoader):
    """Reads a HyperPyYAML file as plain YAML (tags ignored) to look at plain keys."""


_PlainLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


