"""Decode a test set with a trained ST model (fairseq-generate, beam search) into ``id<TAB>text``.

Detokenisation happens in one place only: fairseq-generate turns the hypothesis pieces back
into text with the sentencepiece model named in the data's config.yaml (its ``D-`` lines).
Adding ``--post-process``/``--remove-bpe`` on top would decode twice and glue words together,
so those flags are refused, and ``write_hypotheses`` refuses any text that still holds the
sentencepiece marker "▁" (a piece-level output that was never detokenised).
"""
from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

import pandas as pd

from corpora.base.atomic import atomic_open
from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from downstream_st.data import target_column, write_eval_dir
from downstream_st.fairseq_flags import as_flags, check_flags
from downstream_st.train import _flag, check_model_files, run_fairseq

log = logging.getLogger(__name__)

SP_MARKER = "\u2581"  # "▁", sentencepiece's word-boundary piece prefix
FORBIDDEN_DECODE_FLAGS = ("post-process", "remove-bpe", "bpe", "tokenizer")
_LINE = re.compile(r"^D-(\d+)\t([^\t]*)\t?(.*)$")


def build_generate_command(eval_dir: str | os.PathLike, split: str, checkpoint: str | os.PathLike,
                           results_dir: str | os.PathLike, decode_flags: dict, *, source=None,
                           trust: bool = False) -> list[str]:
    """The fairseq-generate command (as ``python -m fairseq_cli.generate``); a flag off FLAGS
    (downstream_st/fairseq_flags.py: st.json and overrides are untrusted) or a value not of its type
    is refused, naming ``source``, unless ``trust``. Each flag and its value are one word (as_flags)."""
    bad = [k for k in decode_flags if k.lstrip("-").replace("_", "-") in FORBIDDEN_DECODE_FLAGS]
    if bad:
        raise UserError(f"decoding flag --{bad[0]} would detokenise a second time (words glued together)",
                        fix="leave detokenisation to the model's config.yaml (sentencepiece); drop that option")
    check_flags("decode", decode_flags, source=source, trust=trust)
    return [sys.executable, "-m", "fairseq_cli.generate", str(Path(eval_dir).resolve()),
            "--task", "speech_to_text", "--config-yaml", "config.yaml", "--gen-subset", split,
            "--path", str(Path(checkpoint).resolve()), "--results-path", str(Path(results_dir).resolve()),
            "--required-batch-size-multiple", "1", *as_flags(decode_flags)]


def batching(decode_flags: dict) -> dict:
    """The batching fairseq-generate is run with (the flags after preset, st.json and overrides;
    None: no such limit): recorded beside the hypotheses. The hypotheses do not depend on it (the
    fairseq processes run ssl_pretrain.fairseq_batch_invariance; tests/test_batch_invariance_st.py),
    the time and memory of the decode do."""
    def number(name):
        value = _flag(decode_flags, name)
        return None if value in (None, False) else int(value)
    # build_generate_command always passes required-batch-size-multiple 1 (no padding of batches)
    return {"batch_size": number("batch-size"), "max_tokens": number("max-tokens"), "required_batch_size_multiple": 1}


def parse_generate_output(path: str | os.PathLike, ids: list[str]) -> dict[str, str]:
    """{utterance id: detokenised hypothesis} from fairseq-generate's ``D-<index>`` lines (the
    index is the row of the split's TSV), in the order of ``ids``."""
    path = Path(path)
    hyps: dict[str, str] = {}
    for line in read_lines(path, "fairseq-generate output"):
        m = _LINE.match(line)
        if m:
            hyps[ids[int(m.group(1))]] = m.group(3).strip()
    missing = [i for i in ids if i not in hyps]
    if missing:
        raise UserError(f"fairseq-generate produced no hypothesis for {len(missing)} utterance(s), e.g. "
                        f"{missing[0]!r}", path=path,
                        fix="utterances longer than the model's max source positions are skipped: "
                            "raise decode.max-source-positions")
    return {i: hyps[i] for i in ids}  # in the test table's order


def write_hypotheses(hyps: dict[str, str], out: str | os.PathLike) -> Path:
    """Write ``id<TAB>text`` lines atomically; refuse text that is not detokenised or not one line."""
    out = Path(out)
    for uid, text in hyps.items():
        if SP_MARKER in text:
            raise UserError(f"hypothesis of {uid!r} still contains the sentencepiece marker '▁' ({text[:60]!r}): "
                            "it was never detokenised", path=out,
                            fix="decode the pieces with the model's sentencepiece model (no --post-process on "
                                "top of config.yaml's bpe_tokenizer)")
        if "\t" in text or "\n" in text:
            raise UserError(f"hypothesis of {uid!r} contains a tab or newline", path=out,
                            fix="hypotheses are one line each")
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(out) as f:
        # two fields a line: a tab or newline in the output becomes a space (scorers refuse a third field)
        f.writelines(f"{uid}\t{text.replace(chr(9), ' ').replace(chr(10), ' ')}\n" for uid, text in hyps.items())
    return out


def write_references(df: pd.DataFrame, tgt_lang: str, out: str | os.PathLike) -> Path:
    """``id<TAB>reference`` from the table's ``tgt_text_<lang>`` column (for scoring)."""
    column = target_column(tgt_lang)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(out) as f:
        f.writelines(f"{uid}\t{text}\n" for uid, text in zip(df["id"].astype(str), df[column].astype(str)))
    return out


def decode_st(model_dir: str | os.PathLike, meta: dict, test: pd.DataFrame, out: str | os.PathLike,
              beam: int | None = None, decode_flags: dict | None = None, split: str = "test",
              trust: bool = False) -> dict:
    """Beam-search ``test`` (rows with ``feature_path``/``n_frames``) with the averaged model of
    ``model_dir`` (its files checked against st.json's record first: check_model_files); writes ``out``
    (``id<TAB>text``) and returns {hyps, work_dir, command, beam, batching}."""
    check_model_files(model_dir, meta, trust)
    out = Path(out).resolve()
    work = out.with_name(out.name + ".work")
    eval_dir = write_eval_dir(Path(model_dir) / "data", work / "data", split, test, meta["tgt_lang"])
    flags = dict(meta["preset"].get("decode", {}))
    flags.update(decode_flags or {})
    if beam is not None:
        flags["beam"] = int(beam)
    results = work / "generate"
    cmd = build_generate_command(eval_dir, split, meta["checkpoint"], results, flags,
                                 source=Path(model_dir) / "st.json", trust=trust)
    log.info("decoding %d utterance(s) with beam %s (log: %s)", len(test), flags.get("beam"), work / "generate.log")
    run_fairseq(cmd, work / "generate.log", threads=meta["preset"].get("cpu_threads"), gpu=meta["preset"].get("gpu"),
                trust=trust)
    hyps = parse_generate_output(results / f"generate-{split}.txt", test["id"].astype(str).tolist())
    write_hypotheses(hyps, out)
    return {"hyps": str(out), "work_dir": str(work), "command": cmd, "beam": flags.get("beam"),
            "batching": batching(flags)}
