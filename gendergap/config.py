"""Study configs: one YAML file describes a whole study (data, checkpoints, downstream tasks).

The schema lives in SCHEMA below: every key, its type, its default and what it means
(`gendergap sweep --schema` prints it). Loading validates everything before anything runs and
reports the first problem as one line ``file:line: what -- fix`` (exit 2): an unknown key
(with the closest known one), a wrong type, a task naming an unknown checkpoint or task, a
cycle in the tasks' `after` lists.
"""
from __future__ import annotations

import difflib
import graphlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from corpora.base.errors import UserError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
TASK_TYPES = ("asr-e2e", "asr-frozen", "st", "gender-st", "probes")


@dataclass(frozen=True)
class F:
    """One key: its type(s), default (REQUIRED = must be given) and a line of documentation."""
    types: tuple
    default: Any
    doc: str
    choices: tuple | None = None


REQUIRED = object()
STR, INT, NUM, BOOL, LIST, DICT = (str,), (int,), (int, float), (bool,), (list,), (dict,)
RESOURCES = {  # per job, for SLURM (the local executor uses cpus as the torch thread count)
    "cpus": F(INT, 1, "CPU cores (torch threads) per job"),
    "mem_gb": F(NUM, 4, "memory per job, GB (SLURM)"),
    "gpus": F(INT, 0, "GPUs per job (SLURM)"),
    "time_min": F(INT, 60, "time limit per job, minutes (SLURM)"),
}
COMMON_TASK = {
    "type": F(STR, None, "task type (default: the task's name)", TASK_TYPES),
    "checkpoints": F(LIST, None, "checkpoint names to run this task on (default: all)"),
    "after": F(LIST, [], "other tasks that must finish first (extra ordering)"),
    "device": F(STR, "auto", "where the task's models run: auto (the GPU its job asked for with "
                "resources.gpus, else the CPU), cpu, cuda or cuda:N"),
    "precision": F(STR, "fp32", "autocast precision of its forward passes and training (weights stay fp32); "
                   "fp16 needs a GPU, fairseq (st) takes fp32 or fp16", ("fp32", "fp16", "bf16")),
    "resources": RESOURCES,
}
SEEDS = F(LIST, None, "training seeds: train once per seed; the task's rows report mean ± sd over seeds and a CI "
          "pooled over seeds and speakers (default: one run, the study's seed)")
TASK_KEYS = {
    "asr-e2e": {**COMMON_TASK,
                "corpus": F(STR, REQUIRED, "table corpus whose rows train/test the ASR"),
                "splits": F(DICT, {"train": "train", "valid": "valid", "test": "test"}, "split names to use"),
                "hparams": F(STR, None, "SpeechBrain hyperparameter yaml (default: the recipe's)"),
                "overrides": F(LIST, [], "KEY=VALUE hyperparameter overrides"),
                "seeds": SEEDS},
    "asr-frozen": {**COMMON_TASK,
                   "corpus": F(STR, REQUIRED, "table corpus whose rows train/test the ASR"),
                   "splits": F(DICT, {"train": "train", "valid": "valid", "test": "test"}, "split names to use"),
                   "layer": F(STR + INT, "all", "SSL layer feeding the ASR: a number, last, or all (weighted sum)"),
                   "hparams": F(STR, None, "SpeechBrain hyperparameter yaml (default: the recipe's)"),
                   "overrides": F(LIST, [], "KEY=VALUE hyperparameter overrides"),
                   "seeds": SEEDS},
    "st": {**COMMON_TASK,
           "corpus": F(STR, REQUIRED, "table corpus with source speech and tgt_text_<lang> columns"),
           "pairs": F(LIST, REQUIRED, "language pairs, e.g. [fr-en, fr-es]"),
           "splits": F(DICT, {"train": "train", "valid": "valid", "test": "test"}, "split names to use"),
           "layer": F(STR + INT, "last", "SSL layer whose features feed the ST model"),
           "preset": F(STR, "tiny", "ST preset: xs (the study's), tiny, or a preset yaml"),
           "overrides": F(LIST, [], "fairseq-train overrides, key=value"),
           "mustshe": F(STR, None, "MuST-SHE TSV to score the test hypotheses with (gender-st; with seeds, "
                        "the first seed's hypotheses)"),
           "seeds": SEEDS},
    "probes": {**COMMON_TASK,
               "corpus": F(STR, None, "table corpus whose utterances are probed (default: all)"),
               "layers": F(STR, "all", "layers to probe: all, or a comma list"),
               "probes": F(LIST, ["attention", "mean"], "probe types"),
               "control": F(BOOL, True, "also train shuffled-label control probes"),
               "random_init": F(BOOL, True, "probe a random-init twin of the first checkpoint too")},
}
TASK_KEYS["gender-st"] = TASK_KEYS["st"]

CHECKPOINT = {
    "baseline": F(STR, None, "a reference row without pretraining: `fbank` (80-d log-mel filterbanks stacked to "
                  "20 ms; the checkpoint must be named FBANK). Runs the frozen-feature tasks, not asr-e2e",
                  ("fbank",)),
    "shipped": F(STR, None, "a checkpoint shipped with gendergap (tiny-female, tiny-male, tiny-balanced)"),
    "path": F(STR, None, "a fairseq .pt or a transformers folder"),
    "pretrain": F(STR, None, "pretrain it in this study on this pretraining set (see pretraining.sets)"),
    "pretrained_on": F(STR, None, "the pretraining set it was made from (Table 3's hours and gender shares)"),
    "preset": F(STR, "tiny", "pretraining preset when `pretrain` is set"),
    "updates": F(INT, 1000, "pretraining updates when `pretrain` is set"),
    "continue_updates": F(INT, 0, "then continue the accepted checkpoint by this many updates (a warm start: "
                          "fresh optimizer and schedule); the shipped checkpoints: 1000, then 5000"),
    "note": F(STR, None, "free text for the registry"),
    "hours": F(NUM, None, "Table 3: pretraining hours of an imported checkpoint"),
    "male_pct": F(NUM, None, "Table 3: % male speech in its pretraining data"),
    "female_pct": F(NUM, None, "Table 3: % female speech in its pretraining data"),
    "unknown_pct": F(NUM, None, "Table 3: % speech of unknown gender in its pretraining data"),
}

SCHEMA = {
    "name": F(STR, "study", "name of the study (shown in logs and the report)"),
    "seed": F(INT, 0, "seed for corpus generation, selections, training and bootstrap"),
    "trust_checkpoints": F(BOOL, False, "unpickle the study's .pt checkpoints fully (torch.load weights_only=False, "
                           "what --trust-checkpoint does per command); only for files from a source you trust"),
    "corpus": {
        "synth": F(STR, None, "generate the built-in synthetic corpus of this size", ("tiny", "mini", "small")),
        "table": F(STR, None, "or: an utterance table from `gendergap corpus index`"),
    },
    "pretraining": {
        "corpus": F(STR, None, "table corpus the pretraining manifests draw from (default: all)"),
        "split": F(STR, "pretrain", "table split feeding the pretraining manifests"),
        "hours": F(NUM, None, "hours per manifest (default: all the table allows)"),
        "sets": F(DICT, {}, "manifest name -> gender filter (F, M, balanced, p=SHARE)"),
    },
    "checkpoints": ("map", CHECKPOINT),
    "tasks": ("map", None),   # task name -> TASK_KEYS[type]
    "report": {
        "bootstrap": F(INT, 1000, "speaker-level bootstrap resamples for the CIs"),
        "subset": F(STR, "test", "evaluation subset the report tabulates"),
    },
    "executor": {
        "name": F(STR, "local", "local (submitit's local executor) or slurm", ("local", "slurm")),
        "parallel": F(INT, 2, "jobs running at once (local executor)"),
        "partition": F(STR, None, "SLURM partition"),
        "account": F(STR, None, "SLURM account"),
        "array_parallelism": F(INT, None, "SLURM: most elements of one job array running at once "
                               "(sbatch --array=0-N%P; default: submitit's 256)"),
    },
}


def _where(node) -> int:
    return node.start_mark.line + 1


def _unknown(key, known, path, node, section):
    close = difflib.get_close_matches(str(key), list(known), n=1)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(sorted(known))}"
    raise UserError(f"unknown key '{key}' in {section or 'the config'}", path=path, line=_where(node),
                    fix=hint + " (see `gendergap sweep --schema`)")


def _check_value(spec: F, value, node, path, dotted):
    if value is None and spec.default is not REQUIRED:
        return spec.default
    ok = isinstance(value, spec.types) and not (isinstance(value, bool) and bool not in spec.types)
    if not ok:
        want = " or ".join(t.__name__ for t in spec.types)
        raise UserError(f"'{dotted}' must be {want}, got {type(value).__name__} {value!r}", path=path,
                        line=_where(node), fix=spec.doc)
    if spec.choices and value not in spec.choices:
        raise UserError(f"'{dotted}' is {value!r}", path=path, line=_where(node),
                        fix=f"use one of: {', '.join(map(str, spec.choices))}")
    return value


def _section(spec: dict, node, path, dotted: str) -> dict:
    """Validate a YAML mapping node against a spec dict; returns plain values with defaults."""
    if node is not None and not isinstance(node, yaml.MappingNode):
        raise UserError(f"'{dotted}' must be a mapping (key: value lines)", path=path, line=_where(node))
    given = {}
    for knode, vnode in (node.value if node is not None else []):
        if knode.value not in spec:
            _unknown(knode.value, spec, path, knode, f"'{dotted}'" if dotted else "")
        given[knode.value] = vnode
    out = {}
    for key, sub in spec.items():
        name = f"{dotted}.{key}" if dotted else key
        vnode = given.get(key)
        if isinstance(sub, dict):
            out[key] = _section(sub, vnode, path, name)
        elif isinstance(sub, tuple) and sub and sub[0] == "map":
            out[key] = vnode
        else:
            if vnode is None and sub.default is REQUIRED:
                where = _where(node) if node is not None else None
                raise UserError(f"'{name}' is required", path=path, line=where, fix=sub.doc)
            value = yaml.safe_load(yaml.serialize(vnode)) if vnode is not None else None
            out[key] = _check_value(sub, value, vnode, path, name)
    return out


@dataclass
class StudyConfig:
    path: Path
    data: dict            # validated values, defaults filled in
    lines: dict           # dotted key -> line, for errors found after validation

    @property
    def checkpoints(self) -> dict:
        return self.data["checkpoints"]

    @property
    def tasks(self) -> dict:
        return self.data["tasks"]


def load_config(path: str | os.PathLike) -> StudyConfig:
    """Read and validate a study config; raises UserError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        known = ", ".join(p.name for p in sorted(CONFIG_DIR.glob("*.yaml")))
        raise UserError("no such config file", path=path, fix=f"give a YAML file (built-in: {known} in {CONFIG_DIR})")
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise UserError(f"not valid YAML: {getattr(e, 'problem', e)}", path=path,
                        line=mark.line + 1 if mark else None, fix="fix the YAML syntax") from None
    except UnicodeDecodeError:
        raise UserError("not UTF-8 text", path=path, fix="save the config as UTF-8") from None
    if root is None:
        raise UserError("the config is empty", path=path, fix="start from configs/mini.yaml")
    _refuse_duplicate_keys(root, path)
    data = _section(SCHEMA, root, path, "")
    lines: dict[str, int] = {}
    data["checkpoints"] = _checkpoints(data["checkpoints"], path, lines)
    data["tasks"] = _tasks(data["tasks"], path, lines)
    cfg = StudyConfig(path=path, data=data, lines=lines)
    _cross_checks(cfg, root)
    return cfg


def _refuse_duplicate_keys(node, path) -> None:
    """YAML keeps the last of two equal keys without a word; a study config refuses them, naming
    the second one's line (two `asr-frozen:` tasks would silently become one)."""
    if isinstance(node, yaml.MappingNode):
        seen: dict = {}
        for knode, vnode in node.value:
            key = knode.value if isinstance(knode, yaml.ScalarNode) else None
            if key is not None and key in seen:
                raise UserError(f"key '{key}' appears twice in one mapping (first on line {seen[key]})",
                                path=path, line=_where(knode), fix="remove or rename one of them")
            seen[key] = _where(knode)
            _refuse_duplicate_keys(vnode, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _refuse_duplicate_keys(item, path)


def _named_map(node, path, what: str):
    if node is None:
        return []
    if not isinstance(node, yaml.MappingNode):
        raise UserError(f"'{what}' must be a mapping of names", path=path, line=_where(node))
    return [(k.value, k, v) for k, v in node.value]


def _checkpoints(node, path, lines) -> dict:
    out = {}
    for name, knode, vnode in _named_map(node, path, "checkpoints"):
        entry = _section(CHECKPOINT, vnode, path, f"checkpoints.{name}")
        sources = [k for k in ("shipped", "path", "pretrain", "baseline") if entry[k]]
        if len(sources) != 1:
            raise UserError(f"checkpoint '{name}' needs exactly one of shipped, path, pretrain, baseline (has "
                            f"{', '.join(sources) or 'none'})", path=path, line=_where(knode))
        if (name == "FBANK") != (entry["baseline"] == "fbank"):
            raise UserError("the filterbank baseline is the checkpoint named FBANK, and only it", path=path,
                            line=_where(knode), fix="write `FBANK: {baseline: fbank}`")
        lines[f"checkpoints.{name}"] = _where(knode)
        out[name] = entry
    return out


def _tasks(node, path, lines) -> dict:
    out = {}
    for name, knode, vnode in _named_map(node, path, "tasks"):
        type_ = name
        if isinstance(vnode, yaml.MappingNode):
            for k, v in vnode.value:
                if k.value == "type":
                    type_ = v.value
        if type_ not in TASK_KEYS:
            raise UserError(f"task '{name}' has no known type", path=path, line=_where(knode),
                            fix=f"name it, or set `type:` to, one of {', '.join(TASK_TYPES)}")
        entry = _section(TASK_KEYS[type_], vnode, path, f"tasks.{name}")
        entry["type"] = type_
        lines[f"tasks.{name}"] = _where(knode)
        out[name] = entry
    return out


def _cross_checks(cfg: StudyConfig, root) -> None:
    d, path = cfg.data, cfg.path
    if bool(d["corpus"]["synth"]) == bool(d["corpus"]["table"]):
        raise UserError("corpus needs exactly one of `synth` (the built-in corpus) or `table`", path=path,
                        line=_where(root), fix="e.g. `corpus: {synth: mini}` or `corpus: {table: data/utts.tsv}`")
    if not cfg.checkpoints:
        raise UserError("the config lists no checkpoints", path=path, fix="add a `checkpoints:` section")
    sets = d["pretraining"]["sets"]
    for name, c in cfg.checkpoints.items():
        for key in ("pretrain", "pretrained_on"):
            if c[key] and c[key] not in sets:
                raise UserError(f"checkpoint '{name}' names pretraining set '{c[key]}', which "
                                "pretraining.sets does not define", path=path, line=cfg.lines[f"checkpoints.{name}"],
                                fix=f"use one of: {', '.join(sets) or '(none defined)'}")
    for name, t in cfg.tasks.items():
        line = cfg.lines[f"tasks.{name}"]
        for ck in t["checkpoints"] or []:
            if ck not in cfg.checkpoints:
                raise UserError(f"task '{name}' refers to unknown checkpoint '{ck}'", path=path, line=line,
                                fix=f"use one of: {', '.join(cfg.checkpoints)}")
            if t["type"] == "asr-e2e" and cfg.checkpoints[ck]["baseline"]:
                raise UserError(f"task '{name}' fine-tunes '{ck}', a baseline without a model", path=path, line=line,
                                fix="list only pretrained checkpoints for asr-e2e (FBANK runs the frozen tasks)")
        seeds = t.get("seeds")
        if seeds is not None and (not seeds or not all(isinstance(x, int) and not isinstance(x, bool) for x in seeds)
                                  or len(set(seeds)) != len(seeds)):
            raise UserError(f"task '{name}': seeds must be a list of distinct integers, got {seeds!r}", path=path,
                            line=line, fix="e.g. `seeds: [1, 2, 3]`")
        for other in t["after"]:
            if other not in cfg.tasks:
                raise UserError(f"task '{name}' runs after unknown task '{other}'", path=path, line=line,
                                fix=f"use one of: {', '.join(cfg.tasks)}")
        if t["type"] in ("st", "gender-st"):
            for pair in t["pairs"]:
                if not (isinstance(pair, str) and len(pair.split("-")) == 2 and all(pair.split("-"))):
                    raise UserError(f"task '{name}': language pair {pair!r} is not SRC-TGT", path=path, line=line,
                                    fix="write pairs like fr-en")
        device = str(t["device"]).lower()
        if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
            raise UserError(f"task '{name}': device {t['device']!r}", path=path, line=line,
                            fix="use auto, cpu, cuda or cuda:N")
        gpus = t["resources"]["gpus"]
        if device.startswith("cuda") and gpus < 1:
            raise UserError(f"task '{name}' runs on {device} but asks for no GPU (resources.gpus: {gpus})",
                            path=path, line=line, fix="set resources.gpus: 1, or device: cpu")
        on_cpu = device == "cpu" or (device == "auto" and gpus < 1)
        if t["precision"] == "fp16" and on_cpu:
            raise UserError(f"task '{name}': precision fp16 needs a GPU, and this task runs on the CPU",
                            path=path, line=line, fix="use precision: bf16 on a CPU, or give it resources.gpus: 1")
        if t["precision"] == "bf16" and t["type"] in ("st", "gender-st"):
            raise UserError(f"task '{name}': fairseq cannot train in bf16 off a TPU (its --bf16 implies --tpu)",
                            path=path, line=line, fix="use precision: fp16 on a GPU, or fp32")
        for o in t.get("overrides", []):
            if not (isinstance(o, str) and "=" in o):
                raise UserError(f"task '{name}': override {o!r} is not KEY=VALUE", path=path, line=line)
    throttle = d["executor"]["array_parallelism"]
    if throttle is not None and throttle < 1:
        executor = next((v for k, v in root.value if k.value == "executor"), root)
        raise UserError(f"'executor.array_parallelism' is {throttle}", path=path, line=_where(executor),
                        fix="give the most array elements to run at once (1 or more), or leave it out")
    order = graphlib.TopologicalSorter({n: set(t["after"]) for n, t in cfg.tasks.items()})
    try:
        order.prepare()
    except graphlib.CycleError as e:
        cycle = " -> ".join(e.args[1])
        raise UserError(f"the tasks' `after` lists form a cycle: {cycle}", path=path,
                        line=cfg.lines[f"tasks.{e.args[1][0]}"], fix="remove one of these `after` entries") from None


def schema_text() -> str:
    """The schema as an indented list of keys with types, defaults and docs (for --schema)."""
    lines = []

    def walk(spec: dict, indent: int):
        for key, sub in spec.items():
            pad = "  " * indent
            if isinstance(sub, dict):
                lines.append(f"{pad}{key}:")
                walk(sub, indent + 1)
            elif isinstance(sub, tuple) and sub and sub[0] == "map":
                lines.append(f"{pad}{key}:        # name -> entry")
                if key == "checkpoints":
                    walk(CHECKPOINT, indent + 2)
                else:
                    for t in TASK_TYPES:
                        lines.append(f"{pad}  <name> (type {t}):")
                        walk({k: v for k, v in TASK_KEYS[t].items() if k != "resources"}, indent + 2)
                    lines.append(f"{pad}  every task also takes resources:")
                    walk(RESOURCES, indent + 2)
            else:
                default = "required" if sub.default is REQUIRED else f"default {sub.default!r}"
                choices = f" ({'|'.join(sub.choices)})" if sub.choices else ""
                lines.append(f"{pad}{key}: {'/'.join(t.__name__ for t in sub.types)}, {default}{choices} -- {sub.doc}")

    walk(SCHEMA, 0)
    return "\n".join(lines)
