"""Hypothesis and reference files, and the shared run-directory bookkeeping of both recipes.

Outputs of a decode (``<out>/<name>.hyp.tsv`` and ``<out>/<name>.ref.tsv``) are UTF-8
``id<TAB>text`` lines in the test CSV's order; the references are the test transcripts after
the SAME normalisation as the training targets (downstream_asr/text.py), so scoring with
``normalization="none"`` compares like with like. ``<out>/<name>.json`` records where they
came from: model, checkpoint, normalisation, characters outside the vocabulary.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import yaml

from corpora.base.atomic import write_json, write_text
from corpora.base.boundary import read_json
from corpora.base.errors import UserError
from downstream_asr.text import TextNorm, load_vocab
from downstream_asr.weights import check_before_loading, check_loaded

log = logging.getLogger(__name__)


def run_options(run: dict, run_opts: dict | None = None) -> tuple[dict, dict]:
    """SpeechBrain's run options for a run directory's model (its recorded device and precision, which
    ``run_opts`` overrides: `asr decode --device/--precision`), and the runtime a decode's result
    records: the run's own when nothing is overridden, else what the decode really ran on."""
    rt = run["runtime"]
    opts = {"device": rt["device"], "precision": rt["precision"], "eval_precision": rt["precision"], **(run_opts or {})}
    if (opts["device"], opts["precision"]) == (rt["device"], rt["precision"]):
        return opts, rt
    from ssl_pretrain.device import runtime_info
    return opts, runtime_info(opts["device"], opts["precision"])


def parse_overrides(items: list[str] | None) -> dict:
    """``["lr_head=5e-4", "text_norm.lowercase=false"]`` -> nested dict (values parsed as YAML)."""
    out: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"override {item!r} is not KEY=VALUE", fix="e.g. lr_head=5e-4 or text_norm.lowercase=false")
        try:
            parsed = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as e:
            raise UserError(f"override {item!r}: value is not valid YAML ({e})", fix="quote strings") from None
        if isinstance(parsed, str):
            try:  # YAML 1.1 reads "5e-4" (no dot) as a string
                parsed = float(parsed)
            except ValueError:
                pass
        node = out
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = parsed
    return out


def merge(base: dict, extra: dict) -> dict:
    """Nested dict merge (``extra`` wins)."""
    out = dict(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def write_transcripts(ids: list[str], hyps: dict[str, str], refs: list[str], out_dir: str | os.PathLike,
                      name: str = "test", info: dict | None = None) -> dict:
    """Write ``<name>.hyp.tsv``, ``<name>.ref.tsv`` and ``<name>.json``; return their paths."""
    out_dir = Path(out_dir)
    missing = [i for i in ids if i not in hyps]
    if missing:  # a bug, not user input: every id of the test set was decoded
        raise RuntimeError(f"{len(missing)} utterance(s) were not decoded, e.g. {missing[0]}")
    for uid in ids:
        if "\t" in uid or "\n" in uid:
            raise UserError(f"utterance id {uid!r} contains a tab or newline", fix="use ids without whitespace")
    hyp_path, ref_path = out_dir / f"{name}.hyp.tsv", out_dir / f"{name}.ref.tsv"
    # one line per utterance, two fields: a model's tab or newline becomes a space (scorers refuse a third field)
    write_text(hyp_path, "".join(f"{i}\t{hyps[i].replace(chr(9), ' ').replace(chr(10), ' ')}\n" for i in ids))
    write_text(ref_path, "".join(f"{i}\t{r}\n" for i, r in zip(ids, refs)))
    meta = {"hyps": str(hyp_path), "refs": str(ref_path), "n_utts": len(ids), **(info or {})}
    write_json(out_dir / f"{name}.json", meta)
    return meta


def read_run(out_dir: str | os.PathLike) -> dict:
    """The run record (``run.json``) of a trained model directory."""
    p = Path(out_dir) / "run.json"
    if not p.is_file():
        raise UserError("not a trained ASR model directory (no run.json)", path=out_dir,
                        fix="give the --out directory of `gendergap asr finetune` or `asr frozen`")
    fix = "give the --out directory of `gendergap asr finetune` or `asr frozen`, as it wrote it"
    run = read_json(p, "run.json", shape=dict, fix=fix)
    if run.get("kind") not in ("finetune", "frozen"):
        raise UserError("run.json names no ASR recipe (`kind`: finetune or frozen)", path=p, fix=fix)
    return run


def open_for_decoding(out_dir: str | os.PathLike, test_csv, data_root: str | None = None):
    """What both decoders start from: the run record, its vocabulary, and the test CSV normalised
    the way the training text was. Characters the vocabulary lacks are counted and logged (they
    become <unk> and never appear in hypotheses). Returns (run, vocab, test, oov)."""
    from downstream_asr.data import oov_report, read_csv

    out_dir = Path(out_dir)
    run = read_run(out_dir)
    vocab = load_vocab(out_dir / "vocab.txt")
    test = read_csv(test_csv, TextNorm.from_dict(run["text_norm"]), training=False, data_root=data_root)
    oov = oov_report(test, vocab)
    if oov["n_unknown"]:
        log.warning("%s: %d character(s) in %d utterance(s) are not in the training vocabulary (%s): "
                    "they count as <unk> in the loss and never appear in hypotheses", test_csv, oov["n_unknown"],
                    oov["utts_with_unknown"], "".join(oov["unknown_chars"]))
    return run, vocab, test, oov


def recover_best(brain, out_dir: str | os.PathLike, command: str, run: dict) -> dict:
    """Load the best checkpoint into ``brain`` for decoding, once it is the one the run's training
    recorded (run.json ``weights``: downstream_asr/weights.py; a run without the record only with
    --trust-checkpoint); a run that never saved one, or whose files differ, is a UserError."""
    ckpt = brain.decoding_checkpoint()
    if ckpt is None:
        raise UserError("no checkpoint in the model directory", path=Path(out_dir) / "save",
                        fix=f"train first ({command}), at least one step")
    entry = check_before_loading(out_dir, run, ckpt, trust=bool(brain.checkpointer.trust))
    info = brain.recover_for_decoding(ckpt)
    if entry is not None:
        check_loaded(entry, ckpt, brain.checkpointer.recoverables)
    return info
