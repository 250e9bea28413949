"""ST presets: YAML files naming the data options, the fairseq-train flags and the decoding flags.

    xs    the reference study's model (s2t_transformer_xs, lr 2e-3, 500 epochs, last-10 average)
    tiny  the same recipe shrunk for tests and the built-in study on a 2-core CPU

A preset is ``downstream_st/presets/<name>.yaml`` or any YAML file of the same shape:
``data`` (vocab_type, vocab_size, max_frames, min_frames[, feature_transforms]), ``train`` (fairseq-train flags,
written without the leading ``--``; ``true`` is a bare flag, ``false``/null leaves it out),
``average_last``, ``validate_from_average`` (true: fairseq validates and saves only from the first of
the checkpoints averaged at the end, see validation_start), ``decode`` (fairseq-generate flags) and
``cpu_threads`` (torch threads of the fairseq processes; unset = torch's default). Command-line overrides are
``key=value`` on the train flags (``max-epoch=5``, ``lr=1e-3``; ``_`` and ``-`` are the same)
or on the other sections (``data.vocab_size=300``, ``average_last=5``, ``decode.beam=10``).
Only the fairseq flags of FLAGS (downstream_st/fairseq_flags.py), each with a value of its type,
pass from a preset, an override, a study config or a run dir's st.json (never one that imports
code or loads a file: ``user-dir``, ``restore-file``; never a value that is a path, a flag or
code); ``--trust-checkpoint`` on the command line lets any flag and value through.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Annotated, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field

from corpora.base.errors import UserError
from corpora.base.strict_yaml import read_yaml
from downstream_st.fairseq_flags import (
    FLAG_FIX,
    INT,
    MAX_VALUE_CHARS,
    NAME,
    Kind,
    check_flags,
    choice,
    flag_key,
    flag_problem,
)

PRESET_DIR = Path(__file__).resolve().parent / "presets"
DATA_KEYS = ("vocab_type", "vocab_size", "max_frames", "min_frames")
OPTIONAL_DATA_KEYS = ("feature_transforms",)  # fairseq config.yaml transforms, e.g. [utterance_cmvn]

def preset_names() -> list[str]:
    """The built-in presets (file stems under downstream_st/presets/)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def load_preset(name_or_path: str | os.PathLike) -> dict:
    """The preset as a dict (a fresh copy), checked for the sections the pipeline reads."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PRESET_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise UserError(f"no ST preset {str(name_or_path)!r}", path=path,
                        fix=f"use one of {', '.join(preset_names())} or a YAML file of the same shape")
    cfg, _ = read_yaml(path, "copy downstream_st/presets/tiny.yaml and edit it", what="ST preset")
    if not isinstance(cfg, dict):
        raise UserError("the ST preset is not a mapping of sections", path=path,
                        fix="copy downstream_st/presets/tiny.yaml and edit it")
    for section in ("data", "train", "decode"):
        if not isinstance(cfg.get(section), dict):
            raise UserError(f"preset has no {section!r} section", path=path,
                            fix="copy downstream_st/presets/tiny.yaml and edit it")
    missing = [k for k in DATA_KEYS if k not in cfg["data"]]
    if missing:
        raise UserError(f"preset's data section lacks {', '.join(missing)}", path=path,
                        fix=f"give data.{missing[0]} (see downstream_st/presets/xs.yaml)")
    cfg.setdefault("average_last", 10)
    cfg.setdefault("validate_from_average", False)
    cfg["_source"] = str(path)
    return copy.deepcopy(cfg)


def _value(text: str, lists: bool = False):
    """YAML scalar typing for override values: 5 -> int, 1e-3 -> float, true -> bool; a list stays
    its text (a fairseq flag's "[8]"), unless ``lists`` (data.feature_transforms=[utterance_cmvn])."""
    for kind in (int, float):  # YAML 1.1 reads 1e-3 as a string
        try:
            return kind(text)
        except ValueError:
            pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return text if isinstance(value, dict) or isinstance(value, list) and not lists else value


# The values of the preset's other keys: the data options (the vocabulary's type names its files,
# spm_<type><size>.model; transforms are fairseq registry names) and gendergap's own numbers.
DATA_TYPES = {"vocab_type": choice("unigram", "bpe", "char", "word"), "vocab_size": INT, "max_frames": INT,
              "min_frames": INT, "feature_transforms": Kind("a list of registered names such as [utterance_cmvn]",
                                                            lambda v: isinstance(v, list) and all(map(NAME.ok, v)))}
OWN_TYPES = {"average_last": INT, "cpu_threads": INT,
             "validate_from_average": Kind("true or false", lambda v: v in (True, False, 0, 1))}
TYPE_FIX = "give a value of that type (see downstream_st/presets/xs.yaml)"   # whatever the source: not a flag


def _typed_problem(name: str, kind: Kind, value) -> str | None:
    if value is None or value == "" and name == "cpu_threads" or kind.ok(value) and len(str(value)) <= MAX_VALUE_CHARS:
        return None
    return f"{name} takes {kind.says}, not {str(value)[:60]!r}"


def override_problem(item: str, trust: bool = False) -> str | None:
    """Why a `key=value` override may not be applied (None: it may): a fairseq flag off FLAGS or a
    value not of its type (flag_problem; ``trust``: --trust-checkpoint lets those through), a data
    option or gendergap's own key with a value not of its type. The study config's schema asks this
    of each `overrides:` entry."""
    key, _, raw = str(item).partition("=")
    section, dot, sub = key.strip().partition(".")
    if dot and section == "data":
        kind = DATA_TYPES.get(sub.strip())   # an unknown data option is named by apply_overrides
        return _typed_problem(f"data.{sub.strip()}", kind, _value(raw.strip(), lists=True)) if kind else None
    own = OWN_TYPES.get(key.strip().replace("-", "_"))
    if own and not dot:
        return _typed_problem(key.strip().replace("-", "_"), own, _value(raw.strip()))
    if trust:
        return None
    if dot and section in ("decode", "train"):
        return flag_problem(section, sub, _value(raw.strip()))
    return flag_problem("train", key, _value(raw.strip()))


def check_preset(cfg: dict, trust: bool = False) -> None:
    """The preset's own values, refused in one line naming its file: a preset file is handed like a
    config (its fairseq flags: check_flags, unless ``trust``; its data options and numbers: typed)."""
    for section in ("train", "decode"):
        check_flags(section, cfg[section], source=cfg.get("_source"), trust=trust)
    for where, types in ((cfg["data"], DATA_TYPES), (cfg, OWN_TYPES)):
        for name, kind in types.items():
            why = _typed_problem(name, kind, where.get(name))
            if why:
                raise UserError(f"preset's {why}", path=cfg.get("_source"), fix=TYPE_FIX)


class StoredPreset(BaseModel):
    """The preset as a run dir's st.json keeps it (a handed file): the values decoding reads are typed."""
    model_config = ConfigDict(extra="allow")
    train: dict                       # fairseq's training flags: decoding on another device rewrites them
    decode: dict = {}
    device: str = "cpu"
    precision: str = "fp32"
    cpu_threads: Optional[Annotated[int, Field(strict=True, ge=1, le=4096)]] = None
    average_last: Annotated[int, Field(strict=True, ge=1, le=10_000)] = 10


class StoredRun(BaseModel):
    """A run dir's st.json, as `st train` writes it; checked before anything is decoded."""
    model_config = ConfigDict(extra="allow")
    status: str
    src_lang: str = ""
    tgt_lang: str = ""
    feature_dim: Annotated[int, Field(strict=True, ge=1, le=1_000_000)]
    preset: StoredPreset
    # the sha256 of each file decoding loads (downstream_st.train.model_files); absent before it was recorded
    weights: Optional[dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]]] = None


def apply_overrides(cfg: dict, overrides, trust: bool = False) -> dict:
    """A copy of ``cfg`` with ``key=value`` overrides applied (see the module docstring), then the
    whole checked (check_preset); a fairseq flag off FLAGS, or a value not of its flag's type, is
    refused unless ``trust`` (--trust-checkpoint)."""
    cfg = copy.deepcopy(cfg)
    for item in overrides or ():
        key, sep, raw = str(item).partition("=")
        if not sep or not key.strip():
            raise UserError(f"override {item!r} is not key=value",
                            fix="write e.g. max-epoch=5, lr=1e-3, data.vocab_size=300 or decode.beam=10")
        key, value = key.strip(), _value(raw.strip())
        section, dot, sub = key.partition(".")
        why = override_problem(item, trust)
        if why:
            flag = section != "data" and key.replace("-", "_") not in OWN_TYPES
            raise UserError(f"override {item!r}: {why}", fix=FLAG_FIX if flag else TYPE_FIX)
        if dot and section in ("data", "decode", "train"):
            if section == "data":
                if sub not in DATA_KEYS + OPTIONAL_DATA_KEYS:
                    raise UserError(f"unknown data option {sub!r} in override {item!r}",
                                    fix=f"data options: {', '.join(DATA_KEYS + OPTIONAL_DATA_KEYS)}")
                cfg["data"][sub] = _value(raw.strip(), lists=True)
            else:
                cfg[section][flag_key(sub)] = value
        elif key.replace("-", "_") == "average_last":
            cfg["average_last"] = int(value)
        elif key.replace("-", "_") == "cpu_threads":
            cfg["cpu_threads"] = int(value) if value not in (None, "") else None
        elif key.replace("-", "_") == "validate_from_average":
            cfg["validate_from_average"] = bool(value)
        else:
            cfg["train"][flag_key(key)] = value
    check_preset(cfg, trust)
    return cfg


def on_device(cfg: dict, device: str, precision: str) -> dict:
    """A copy of ``cfg`` whose fairseq flags run on ``device`` (``cpu`` or ``cuda:N``) in ``precision``.

    On a GPU ``--cpu`` is dropped and ``cuda:N`` becomes ``CUDA_VISIBLE_DEVICES=N`` for the fairseq
    processes (``gpu`` in the returned dict). fp16 is fairseq's ``--fp16``: fp16 weights and
    activations with an fp32 master copy in the optimizer and dynamic loss scaling, for training
    only: fairseq-generate's ``--fp16`` halves the model but feeds it the data's fp32 features
    ("Input type (float) and bias type (c10::Half) should be the same"; `st decode` of an fp16
    run failed so on an H100), so decoding runs in fp32 on the GPU. bf16 is refused: fairseq 0.12's
    ``--bf16`` switches on TPU mode (``--tpu``), which needs torch_xla.
    """
    if precision == "bf16":
        raise UserError("fairseq (0.12) cannot train or decode in bf16 off a TPU: its --bf16 implies --tpu",
                        fix="use --precision fp16 on a GPU, or fp32")
    cfg = copy.deepcopy(cfg)
    gpu = device.startswith("cuda")
    for section in ("train", "decode"):
        cfg[section]["cpu"] = not gpu
    cfg["train"]["fp16"] = precision == "fp16"
    cfg["decode"].pop("fp16", None)   # see above: generate in fp32 (a preset's own fp16: true too)
    cfg["gpu"] = (device.partition(":")[2] or "0") if gpu else None
    cfg["device"], cfg["precision"] = device, precision
    return cfg


def recipe_update_freq(cfg: dict) -> int:
    """The preset's update_freq: how many GPUs' batches its one GPU accumulates (1 if unset)."""
    value = cfg["train"].get("update-freq", 1)
    if isinstance(value, (list, tuple)):
        value = value[0]
    if isinstance(value, str):
        value = value.strip("[] ").split(",")[0]
    return int(value)


def on_gpus(cfg: dict, gpus: int) -> dict:
    """A copy of ``cfg`` that keeps the preset's effective batch on ``gpus`` GPUs.

    A preset's max-tokens x update-freq is written for ONE GPU (xs: 40,000 frames x 8, fairseq's
    mTEDx recipe "simulates 8 GPUs with 1 GPU"). fairseq-train runs one rank per visible GPU, each
    with max-tokens, so on G GPUs update-freq = recipe update-freq / G (xs: 8 GPUs -> 1, 2 -> 4).
    G must divide it: otherwise the batch (and with it lr and warm-up) would no longer be the
    recipe's. ``distributed-world-size`` is set to G, and ``gpu`` (CUDA_VISIBLE_DEVICES, set by
    `on_device`) widens from one index N to N..N+G-1. ``gpus`` 1 returns the preset unchanged.
    """
    if gpus < 1:
        raise UserError(f"need at least 1 GPU (got --gpus {gpus})", fix="pass --gpus N with N >= 1")
    cfg = copy.deepcopy(cfg)
    if gpus == 1:
        return cfg
    if not cfg.get("gpu"):
        raise UserError(f"--gpus {gpus} needs a CUDA device", fix="pass --device cuda (or drop --gpus)")
    freq = recipe_update_freq(cfg)
    if freq % gpus:
        whole = [g for g in range(1, freq + 1) if freq % g == 0]
        raise UserError(f"the preset accumulates {freq} batches per update (update-freq {freq}); {gpus} GPUs "
                        f"cannot share that evenly", path=cfg.get("_source"),
                        fix=f"use {', '.join(map(str, whole))} GPUs, or set update-freq=K yourself to change the batch")
    cfg["train"]["update-freq"] = freq // gpus
    cfg["train"]["distributed-world-size"] = gpus
    first = int(str(cfg["gpu"]).split(",")[0])
    cfg["gpu"] = ",".join(str(first + i) for i in range(gpus))
    cfg["gpus"] = gpus
    return cfg


def validation_start(cfg: dict) -> int | None:
    """With ``validate_from_average``: the update from which fairseq validates and saves (its
    ``--validate-after-updates``), the first of the ``average_last`` interval checkpoints the model
    is averaged from; None when the preset does not train to a fixed ``max-update`` saving every
    ``save-interval-updates``. fairseq validates at every save, and those validation losses are only
    logged: the averaged model is the same (each update is seeded by its number), end-of-epoch saves
    keep a killed run resumable, and the validations before the window cost ~12 % of a tiny job."""
    train = cfg["train"]
    every, last = train.get("save-interval-updates"), train.get("max-update")
    if not cfg.get("validate_from_average") or not every or not last:
        return None
    return max(0, int(last) - (int(cfg.get("average_last", 10)) - 1) * int(every))
