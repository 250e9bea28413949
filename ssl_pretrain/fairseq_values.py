"""The literal values that reach a fairseq process from an untrusted source (a preset, an override, a
study config, a run dir): numbers and flat lists of numbers, matched by pattern and never evaluated.

fairseq runs some option strings as Python: ``eval(cfg.adam_betas)`` (optim/adam.py; adamax, lamb,
adafactor alike), ``eval(cfg.conv_feature_layers)`` (models/wav2vec/wav2vec2.py), so an
``adam_betas`` of ``__import__('os').system(...)`` runs a command. Such a value must be one of
these literals. The ST flag table (downstream_st/fairseq_flags.py) and pretraining's hydra
overrides (ssl_pretrain/run.py) both read values with them.
"""
from __future__ import annotations

import re

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
INTEGER = r"[-+]?\d+"
# the option names fairseq eval()s (a hydra key's last part)
EVAL_KEYS = ("adam_betas", "adamax_betas", "lamb_betas", "adafactor_eps", "conv_feature_layers",
             "conv_aggregator_layers")


def _items(item: str) -> str:
    return rf"\s*{item}(?:\s*,\s*{item})*\s*,?\s*"


def number_list(text: str, item: str = NUMBER, bare: bool = True) -> bool:
    """``text`` is a flat list of ``item`` numbers: ``(0.9, 0.98)``, ``[8]``, or (``bare``) ``5,5``, ``8``."""
    s = _items(item)
    return bool(re.fullmatch(rf"\({s}\)|\[{s}\]" + (f"|{s}" if bare else ""), text))


def layer_list(text: str) -> bool:
    """``text`` is a list of integer tuples, the written-out form of conv_feature_layers:
    ``[(512,10,5),(512,3,2)]`` (fairseq's ``[(512,3,2)] * 4`` is refused: write it out)."""
    one = rf"\(\s*{INTEGER}(?:\s*,\s*{INTEGER})*\s*,?\s*\)"
    return bool(re.fullmatch(rf"\[{_items(one)}\]", text))


def hydra_value_problem(key: str, value) -> str | None:
    """Why a hydra override's (or preset's) ``value`` for ``key`` may not come from an untrusted
    source (None: it may). A ``{`` makes a value a dict, which sets keys the key check never saw
    (``common={user_dir: PKG}`` imports PKG), and ``${...}`` is an interpolation (``oc.create``
    builds such a dict too); a key fairseq eval()s takes a number literal only."""
    text = str(value)
    if any(c in text for c in "{}$"):
        return ("holds {, } or $: a hydra dict or interpolation in a value sets or reads keys the key check "
                "never sees (common={user_dir: PKG} imports PKG)")
    if key.lstrip("+~").split(".")[-1] in EVAL_KEYS:
        inner = text[1:-1] if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" else text
        if not (number_list(inner) or layer_list(inner)):
            return ("is run as Python by fairseq (eval): write numbers only, e.g. (0.9,0.98) or "
                    "[(512,10,5),(512,3,2)]")
    return None
