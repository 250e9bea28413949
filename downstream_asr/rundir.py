"""A run directory: its hyper-parameters as plain data, character vocabulary and run record (run.json).

Both recipes keep everything a run needs in one directory: ``run.json`` (the recipe, its
hyper-parameter overrides, the SSL checkpoint, normalisation, paths), ``vocab.txt`` (built from
the training text), ``save/`` (SpeechBrain checkpoints), ``train_log.txt``.

A run directory is data someone may hand you, so nothing in it is evaluated:

- **Hyper-parameters.** HyperPyYAML builds objects (``!new:``, ``!apply:``, ``!name:``): a yaml
  from a run directory or a study config could run anything while it loads. So the objects are
  only ever built from the recipe's template shipped with the installed package
  (``downstream_asr/hparams/<recipe>.yaml``); what a run changes is plain data, KEY: VALUE
  overrides recorded in run.json (from ``KEY=VALUE`` arguments and from a ``--hparams`` file read
  as safe YAML, corpora.base.strict_yaml), each key one the template gives a plain value.
  Run directories written before this rule kept a copy of the template as ``hparams.yaml``:
  one identical to the package's template decodes as before; any other is refused, never run.
- **Checkpoints** in ``save/`` load through the project's allowlist loader
  (downstream_asr.common.SafeCheckpointer), unless ``--trust-checkpoint``.
- **Paths** are relative to the run directory (``ssl_hf/...``, ``../../features``), so a copied
  or moved run decodes its own model; inputs outside it are also recorded by absolute path and
  the SSL checkpoint by content hash (``ssl.sha256``); they are looked for in both places
  (``locate``), or refused in one line.
"""
from __future__ import annotations

import json
import logging
import os
import time
from functools import lru_cache
from pathlib import Path

from hyperpyyaml import load_hyperpyyaml

from corpora.base.boundary import read_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_sha256  # cached per (path, size, mtime)
from corpora.base.strict_yaml import read_hyperpyyaml_keys, read_yaml
from downstream_asr.data import read_csv
from downstream_asr.decode import merge
from downstream_asr.text import TextNorm, build_vocab, load_vocab, save_vocab

log = logging.getLogger(__name__)

HPARAMS_DIR = Path(__file__).parent / "hparams"
TEMPLATES = {"finetune": "finetune_ctc.yaml", "frozen": "frozen_ctc.yaml"}
# filled in by the recipe (finetune.build_brain, frozen._build), never overridden
FIXED = {"finetune": ("ssl_folder", "output_folder", "ssl_dim", "n_chars"),
         "frozen": ("output_folder", "n_layers", "feat_dim", "n_chars")}


# plain values that take one of a few words (the others are checked where they are used)
CHOICES = {"ssl_layers": ("last", "all"), "select_by": ("CER", "WER", "loss")}


def template_path(kind: str) -> Path:
    if kind not in TEMPLATES:
        raise UserError(f"unknown ASR recipe {kind!r}", fix=f"one of {', '.join(TEMPLATES)} (run.json's `kind`)")
    return HPARAMS_DIR / TEMPLATES[kind]


@lru_cache(maxsize=None)
def plain_values(kind: str) -> dict:
    """The template's keys that hold plain values (numbers, strings, lists, the text_norm mapping):
    the only ones a run may override. Objects (tagged values) and the recipe's fixed keys are not."""
    raw = read_hyperpyyaml_keys(template_path(kind), "recipe template")
    return {k: v for k, v in raw.items() if _plain(v) and not k.startswith("__") and k not in FIXED[kind]}


def _plain(value) -> bool:
    """No tagged value anywhere inside (``modules: {model: !ref <model>}`` is an object's)."""
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is not None


def check_overrides(overrides: dict, kind: str, path: Path | None = None, marks: dict | None = None) -> dict:
    """``overrides`` if every key is one of the template's plain values (nested mappings only
    where the template has one); else a UserError naming the key (and its line in ``path``)."""
    import difflib
    known = plain_values(kind)

    def refuse(at: tuple, what: str, choices) -> UserError:
        close = difflib.get_close_matches(str(at[-1]), list(choices), n=1)
        return UserError(f"hyper-parameter '{'.'.join(map(str, at))}' {what}", path=path,
                         line=(marks or {}).get(at), fix=(f"did you mean '{close[0]}'? " if close else "")
                         + f"the {TEMPLATES[kind]} keys with plain values: {', '.join(sorted(choices))}")

    def walk(given: dict, template: dict, at: tuple) -> None:
        for key, value in given.items():
            here = at + (key,)
            if key not in template:
                what = ("is filled in by the recipe" if not at and key in FIXED[kind] else
                        "is not a plain value of the recipe (objects are built from the package's template only)"
                        if not at and key in _all_keys(kind) else "is not a key of the recipe")
                raise refuse(here, what, template)
            if isinstance(template[key], dict):
                if not isinstance(value, dict):
                    raise UserError(f"hyper-parameter '{'.'.join(here)}' is a mapping in the recipe, got {value!r}",
                                    path=path, line=(marks or {}).get(here),
                                    fix=f"e.g. {key}.{next(iter(template[key]))}=...")
                walk(value, template[key], here)
    walk(overrides, known, ())
    for key, allowed in CHOICES.items():   # one of a few words: refused here, so a sweep's dry run finds it
        if key in known and key in overrides and overrides[key] not in allowed:
            raise UserError(f"hyper-parameter '{key}' is {overrides[key]!r}", path=path,
                            line=(marks or {}).get((key,)), fix=f"use one of: {', '.join(allowed)}")
    try:  # plain JSON values only (a recursive or odd value from a YAML file cannot reach SpeechBrain)
        json.dumps(overrides)
    except (TypeError, ValueError) as e:
        raise UserError(f"hyper-parameter overrides are not plain values ({e})", path=path,
                        fix="numbers, strings, true/false, lists and mappings") from None
    return overrides


@lru_cache(maxsize=None)
def _all_keys(kind: str) -> frozenset:
    return frozenset(read_hyperpyyaml_keys(template_path(kind), "recipe template"))


def read_hparams_file(path, kind: str) -> dict:
    """A ``--hparams`` (or a study config's ``hparams:``) file: safe YAML of KEY: VALUE overrides,
    checked against the recipe's template. Never HyperPyYAML: a tag is refused at its line."""
    path = Path(path)
    fix = f"a YAML file of KEY: VALUE hyper-parameter overrides, e.g. `lr: 1.0e-3` (keys of {TEMPLATES[kind]})"
    raw, marks = read_yaml(path, missing_fix=fix, what="hyper-parameter file")
    if not isinstance(raw, dict):
        raise UserError("a hyper-parameter file is a mapping of KEY: VALUE overrides", path=path, line=1, fix=fix)
    return check_overrides(raw, kind, path, marks)


def hparams_record(kind: str) -> dict:
    """What run.json keeps of the template a run was built from (its name and content hash)."""
    path = template_path(kind)
    return {"template": path.name, "sha256": file_sha256(path)}


def run_template(out_dir: Path, run: dict) -> Path:
    """The package template a run directory's model is rebuilt from. A run directory written
    before templates were the rule carries its own ``hparams.yaml``: it is used only when it is
    byte for byte the package's template (never evaluated otherwise: it could run code)."""
    kind = run.get("kind")
    path = template_path(kind)
    recorded = run.get("hparams")
    if isinstance(recorded, dict):
        if recorded.get("template") != path.name:
            raise UserError(f"this run directory was made from the template {recorded.get('template')!r}, not the "
                            f"{kind} recipe's {path.name}", path=out_dir / "run.json",
                            fix="use a new --out for another recipe; decode a run with the recipe that made it")
        if recorded.get("sha256") != file_sha256(path):
            log.warning("%s: the package's %s changed since this run was trained; its model is rebuilt from the "
                        "installed one", out_dir, path.name)
        return path
    own = out_dir / "hparams.yaml"
    if own.is_file() and own.read_bytes() != path.read_bytes():
        raise UserError("this run directory's hparams.yaml differs from the package's template, and gendergap does "
                        "not evaluate a run directory's own HyperPyYAML (it can run code)", path=own,
                        fix="train the run again with this version of gendergap (changes as KEY=VALUE overrides or "
                            "a --hparams file of plain values)")
    return path


def load_hparams(template: Path, overrides: dict):
    """The recipe's objects, built by HyperPyYAML from the PACKAGE's ``template`` with ``overrides``
    (plain values, checked by check_overrides); a failure is a UserError."""
    with open(template, encoding="utf-8") as f:
        try:
            hparams = load_hyperpyyaml(f, overrides)
        except (KeyError, ValueError, TypeError) as e:
            raise UserError(f"cannot build the recipe from the hyperparameters ({type(e).__name__}: {e})",
                            path=template, fix="check the KEY=VALUE overrides") from None
    ratio = hparams.get("lr_final_ratio", 1.0)
    if not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise UserError(f"lr_final_ratio must be a number in (0, 1], not {ratio!r}",
                        fix="e.g. lr_final_ratio=0.05 (decay to 5 %), or 1.0 for a constant learning rate")
    return hparams


def build_hparams(out_dir: Path, run: dict, fixed: dict, trust: bool = False):
    """A run directory's objects: its recipe's package template, run.json's overrides (checked
    again: run.json is data someone may have edited), the recipe's ``fixed`` values; its
    checkpointer loads SpeechBrain checkpoints safely unless ``trust``."""
    template = run_template(out_dir, run)
    overrides = check_overrides(dict(run.get("overrides") or {}), run["kind"], out_dir / "run.json")
    hparams = load_hparams(template, merge(overrides, fixed))
    hparams["checkpointer"].trust = trust
    return hparams


# --------------------------------------------------------------------------- relocatable paths

def relative(out_dir, path) -> str:
    """``path`` as run.json records it: relative to the run directory (``..`` where it is outside)."""
    return os.path.relpath(Path(path).resolve(), Path(out_dir).resolve())


def outside(out_dir, path) -> str | None:
    """``path``'s absolute form when it lies outside the run directory (where to look if the run
    is moved without it); None inside (it moves with the run)."""
    path, out_dir = Path(path).resolve(), Path(out_dir).resolve()
    return None if path == out_dir or out_dir in path.parents else str(path)


def locate(out_dir, recorded: str | None, original: str | None = None) -> Path | None:
    """Where a recorded input is now: relative to the run directory (it moved with it), else the
    original absolute path (an input outside that stayed put); None when neither exists."""
    for candidate in (recorded, original):
        if candidate:
            p = Path(candidate)
            p = p if p.is_absolute() else Path(out_dir) / p
            if p.exists():
                return p
    return None


def prepare_run(ssl: dict, train_csv, out_dir, hparams_file=None, overrides: dict | None = None,
                data_root: str | None = None, *, kind: str,
                extra: dict | None = None) -> tuple[dict, "object", "object"]:
    """Create or re-open a run directory: check the overrides, build or check the vocabulary.

    ``overrides``: plain KEY: VALUE values (a ``hparams_file`` of them first, ``overrides`` win).
    Re-running with the same directory resumes; a different training text (a different
    vocabulary) is refused rather than silently mixed with the old checkpoints.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    from_file = read_hparams_file(hparams_file, kind) if hparams_file else {}
    overrides = check_overrides(merge(from_file, overrides or {}), kind)
    previous = read_json(out_dir / "run.json", "run.json", shape=dict) if os.path.lexists(out_dir / "run.json") else {}
    if previous:
        run_template(out_dir, {**previous, "kind": kind})   # an older run with its own hparams.yaml: refused
    norm = TextNorm.from_dict(merge(plain_values(kind).get("text_norm") or {}, overrides.get("text_norm") or {}))
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
    before = (previous.get("ssl") or {}).get("sha256")
    if before not in (None, ssl["sha256"]) and any((out_dir / "save").glob("CKPT*")):
        raise UserError("the run directory was trained from another SSL checkpoint "
                        f"({previous['ssl']['path']} has other contents)", path=out_dir / "run.json",
                        fix="use a new --out for the new checkpoint")
    inputs = {"train_csv": str(Path(train_csv).resolve())}
    if hparams_file:
        inputs["hparams_file"] = {"path": str(Path(hparams_file).resolve()), "sha256": file_sha256(Path(hparams_file))}
    if ssl.get("kind") != "fbank":   # found again after a move (ssl.path: where it was; ssl.sha256: what)
        inputs["ssl_relpath"] = relative(out_dir, ssl["path"])
    run = {"kind": kind, "hparams": hparams_record(kind), "ssl": ssl, **inputs,
           "data_root": data_root, "overrides": overrides, "text_norm": norm.as_dict(),
           "text_norm_name": norm.name, "vocab_size": len(vocab), "progress": True,
           "started": previous.get("started", time.time()), **(extra or {})}
    return run, vocab, train
