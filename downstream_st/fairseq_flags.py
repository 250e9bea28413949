"""The fairseq flags gendergap passes from a preset, an override, a study config or a run dir's
st.json: FLAGS, one table of each flag's value type and of the tools (fairseq-train, -generate) it
goes to, and the command-line words built from them.

A name off the table never passes: the flags that import code (``--user-dir``), load a file as a
checkpoint (``--restore-file``, ``--finetune-from-model``, ``--load-pretrained-*-from``, ``--path``),
write elsewhere or are gendergap's own are left out. A value must be of its flag's type: a number,
a switch, one of a flag's choices, a registered name (arch, criterion, optimizer ...) or a flat
list of numbers. No flag here takes a path, so no value may be one; and a value never holds
Python (fairseq eval()s ``--adam-betas``) nor a flag (fairseq's options.get_parser pre-parses
``--user-dir`` over the whole argv and imports it). ``--trust-checkpoint`` on the command line lets
any name and value through; even then ``as_flags`` writes each flag and its value as ONE word,
``--flag=value``, so no value ever becomes a word of its own.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import NamedTuple

from corpora.base.errors import UserError
from ssl_pretrain.fairseq_values import INTEGER, NUMBER, number_list

MAX_VALUE_CHARS = 200     # the longest value any flag here needs is a short list of numbers


class Kind(NamedTuple):
    """A flag's value type: what the error line calls it, and whether a value is one."""
    says: str
    ok: Callable[[object], bool]   # False and None (the flag left out) never reach it


def _number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            or isinstance(v, str) and re.fullmatch(NUMBER, v) is not None)


def _integer(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) or isinstance(v, str) and re.fullmatch(INTEGER, v) is not None


def _numbers(item, one):
    # a number, a YAML list of them, or the text of a flat list ("(0.9, 0.98)", "[8]"): fairseq reads
    # these with ast.literal_eval (update-freq, lr) or eval (adam-betas, hence no more than this)
    return lambda v: (one(v) or isinstance(v, (list, tuple)) and bool(v) and all(one(x) for x in v)
                      or isinstance(v, str) and number_list(v, item))


def choice(*names: str) -> Kind:
    return Kind(f"one of {'|'.join(names)}", lambda v: v in names)


INT = Kind("an integer", _integer)
FLOAT = Kind("a number", _number)
SWITCH = Kind("true or false (a bare switch)", lambda v: v is True)
# a name fairseq looks up in its registries (arch, criterion, optimizer, lr-scheduler, a metric)
NAME = Kind("a registered name (letters, digits, _ and -)",
            lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,79}", v) is not None)
FLOATS = Kind("a number or a list of numbers such as (0.9, 0.98)", _numbers(NUMBER, _number))
INTS = Kind("an integer or a list of integers such as [8]", _numbers(INTEGER, _integer))
# conv-kernel-sizes: s2t_transformer splits it on "," and int()s each part (no brackets)
INT_CSV = Kind("integers joined by commas such as 5,5",
               lambda v: _integer(v) or isinstance(v, str) and re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", v) is not None)

BOTH, TRAIN, DECODE = ("train", "decode"), ("train",), ("decode",)

# flag (without --) -> (value type, the sections it may come from); fairseq 0.12's own types
# (options.get_training_parser / get_generation_parser with s2t_transformer, fairseq/dataclass/configs.py)
FLAGS: dict[str, tuple[Kind, tuple[str, ...]]] = {
    # both tools
    "cpu": (SWITCH, BOTH), "seed": (INT, BOTH), "fp16": (SWITCH, BOTH), "memory-efficient-fp16": (SWITCH, BOTH),
    "fp16-init-scale": (INT, BOTH), "fp16-scale-window": (INT, BOTH), "amp": (SWITCH, BOTH),
    "num-workers": (INT, BOTH), "max-tokens": (INT, BOTH), "batch-size": (INT, BOTH),
    "required-batch-size-multiple": (INT, BOTH), "skip-invalid-size-inputs-valid-test": (SWITCH, BOTH),
    "max-source-positions": (INT, BOTH), "max-target-positions": (INT, BOTH), "log-interval": (INT, BOTH),
    "log-format": (choice("json", "none", "simple", "tqdm"), BOTH), "distributed-world-size": (INT, BOTH),
    "ddp-backend": (choice("c10d", "fully_sharded", "legacy_ddp", "no_c10d", "pytorch_ddp", "slowmo"), BOTH),
    "find-unused-parameters": (SWITCH, BOTH), "empty-cache-freq": (INT, BOTH), "data-buffer-size": (INT, BOTH),
    # fairseq-train: what is trained, and how
    "arch": (NAME, TRAIN), "criterion": (NAME, TRAIN), "optimizer": (NAME, TRAIN), "lr-scheduler": (NAME, TRAIN),
    "lr": (FLOATS, TRAIN), "warmup-updates": (INT, TRAIN), "warmup-init-lr": (FLOAT, TRAIN), "min-lr": (FLOAT, TRAIN),
    "clip-norm": (FLOAT, TRAIN), "weight-decay": (FLOAT, TRAIN), "adam-betas": (FLOATS, TRAIN),
    "adam-eps": (FLOAT, TRAIN), "max-update": (INT, TRAIN), "max-epoch": (INT, TRAIN), "update-freq": (INTS, TRAIN),
    "stop-time-hours": (FLOAT, TRAIN), "stop-min-lr": (FLOAT, TRAIN), "patience": (INT, TRAIN),
    "label-smoothing": (FLOAT, TRAIN), "report-accuracy": (SWITCH, TRAIN), "ctc-weight": (FLOAT, TRAIN),
    "ignore-prefix-size": (INT, TRAIN), "sentence-avg": (SWITCH, TRAIN), "curriculum": (INT, TRAIN),
    # fairseq-train: checkpoints and validation
    "save-interval": (INT, TRAIN), "save-interval-updates": (INT, TRAIN), "keep-interval-updates": (INT, TRAIN),
    "keep-last-epochs": (INT, TRAIN), "keep-best-checkpoints": (INT, TRAIN), "no-epoch-checkpoints": (SWITCH, TRAIN),
    "no-last-checkpoints": (SWITCH, TRAIN), "no-save-optimizer-state": (SWITCH, TRAIN),
    "best-checkpoint-metric": (NAME, TRAIN), "maximize-best-checkpoint-metric": (SWITCH, TRAIN),
    "validate-interval": (INT, TRAIN), "validate-interval-updates": (INT, TRAIN),
    "validate-after-updates": (INT, TRAIN), "disable-validation": (SWITCH, TRAIN),
    "max-tokens-valid": (INT, TRAIN), "batch-size-valid": (INT, TRAIN),
    # fairseq-train: the s2t_transformer's shape
    "encoder-layers": (INT, TRAIN), "decoder-layers": (INT, TRAIN), "encoder-embed-dim": (INT, TRAIN),
    "decoder-embed-dim": (INT, TRAIN), "encoder-ffn-embed-dim": (INT, TRAIN), "decoder-ffn-embed-dim": (INT, TRAIN),
    "encoder-attention-heads": (INT, TRAIN), "decoder-attention-heads": (INT, TRAIN),
    "encoder-normalize-before": (SWITCH, TRAIN), "decoder-normalize-before": (SWITCH, TRAIN),
    "conv-kernel-sizes": (INT_CSV, TRAIN), "conv-channels": (INT, TRAIN), "dropout": (FLOAT, TRAIN),
    "attention-dropout": (FLOAT, TRAIN), "activation-dropout": (FLOAT, TRAIN),
    "activation-fn": (choice("relu", "gelu", "gelu_fast", "gelu_accurate", "tanh", "linear"), TRAIN),
    "share-decoder-input-output-embed": (SWITCH, TRAIN), "no-scale-embedding": (SWITCH, TRAIN),
    "layernorm-embedding": (SWITCH, TRAIN), "encoder-freezing-updates": (INT, TRAIN),
    "share-all-embeddings": (SWITCH, TRAIN),
    # fairseq-generate: the search
    "beam": (INT, DECODE), "nbest": (INT, DECODE), "max-len-a": (FLOAT, DECODE), "max-len-b": (INT, DECODE),
    "min-len": (INT, DECODE), "lenpen": (FLOAT, DECODE), "unkpen": (FLOAT, DECODE),
    "no-repeat-ngram-size": (INT, DECODE), "sampling": (SWITCH, DECODE), "sampling-topk": (INT, DECODE),
    "sampling-topp": (FLOAT, DECODE), "temperature": (FLOAT, DECODE), "prefix-size": (INT, DECODE),
    "no-early-stop": (SWITCH, DECODE), "unnormalized": (SWITCH, DECODE), "match-source-len": (SWITCH, DECODE),
    "scoring": (choice("sacrebleu", "bleu", "chrf", "wer", "meteor", "bert_score"), DECODE), "quiet": (SWITCH, DECODE),
}

FLAG_FIX = ("drop it, or give the value type the flag's entry in FLAGS (downstream_st/fairseq_flags.py) names; "
            "only for a source you trust, add --trust-checkpoint on the command line")


def flag_key(key) -> str:
    """A preset's or override's flag name as fairseq spells it: no leading --, ``_`` -> ``-``."""
    return str(key).strip().lstrip("-").replace("_", "-")


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def flag_problem(section: str, key, value=None) -> str | None:
    """Why fairseq flag ``key`` of ``section`` (train or decode) set to ``value`` may not come from a
    preset, an override, a study config or a run dir (None: it may). False and None leave a flag out
    (only its name is checked)."""
    flag = flag_key(key)
    tool = "fairseq-train" if section == "train" else "fairseq-generate"
    kind, sections = FLAGS.get(flag, (None, ()))
    if section not in sections:
        return (f"{tool} flag --{flag} is not one gendergap passes from a preset, config or run dir (a flag that "
                "imports code or loads a file never is)")
    if value is None or value is False:
        return None
    if len(str(value)) > MAX_VALUE_CHARS or not kind.ok(value):
        return f"{tool} flag --{flag} takes {kind.says}, not {_shown(value)} (a value is never a path or a flag)"
    return None


def check_flags(section: str, flags: dict, *, source=None, trust: bool = False) -> None:
    """Refuse (UserError naming ``source``) a flag of ``flags`` whose name or value flag_problem
    refuses, unless ``trust`` (--trust-checkpoint)."""
    for key, value in ({} if trust else flags).items():
        why = flag_problem(section, key, value)
        if why:
            raise UserError(why, path=source, fix=FLAG_FIX)


def as_flags(options: dict) -> list[str]:
    """fairseq command-line words from a ``{flag: value}`` section: ``--flag=value``, one word per
    flag (true: the bare ``--flag``; false or None: left out). Joined, a value is only ever its
    flag's value, whatever it holds (``--lr=--user-dir=PKG`` is --lr's, and argparse refuses it)."""
    out: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        text = "" if value is True else str(value)
        if "\0" in text:   # a NUL cannot be passed in an argv word at all (trusted values included)
            raise UserError(f"the value of --{flag_key(key)} holds a NUL character", fix="remove it")
        out.append(f"--{flag_key(key)}" + (f"={text}" if value is not True else ""))
    return out
