"""Study configs: one YAML file describes a whole study (data, checkpoints, downstream tasks).

The schema is the pydantic models of gendergap/config_schema.py (`gendergap sweep --schema`
prints them). Loading validates everything before anything runs and reports the first problem
as one line ``file:line: what -- fix`` (exit 2): a key given twice, an unknown key (with the
closest known one), a wrong type or choice, a task naming an unknown checkpoint, task or type,
a cycle in the tasks' `after` lists.

The file is read by corpora/base/strict_yaml.py (PyYAML's composer, not ruamel.yaml): its node
tree gives the line of every key and list item (pydantic's error locations are mapped onto it),
the values resolve by the YAML 1.1 rules every existing config was written for (ruamel's default
YAML 1.2 would read `yes` as a string and `1e3` as a number), and the duplicate-key check names
both lines.

A task type is registered once, with everything it is (gendergap.tasks.register_task: its config
keys, the steps it adds to the study graph, what it reads from the feature store, the checks of its
entry against the rest of the config, ...). Configs can then use it, `--schema` lists it and the
sweep plans it. The built-in types register themselves in their step modules (gendergap/steps/),
which loading a config imports.
"""
from __future__ import annotations

import graphlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from pydantic import BaseModel, Field, create_model

from corpora.base.boundary import check_name, regular_file
from corpora.base.errors import UserError
from corpora.base.reserved import FBANK
from corpora.base.strict_yaml import read_yaml, validate
from gendergap.config_schema import Study, TaskBase, describe  # noqa: F401 (TaskBase: for task modules)
from gendergap.tasks import TASKS, builtin_types
from ssl_pretrain.registry import Registry

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def task_types() -> tuple[str, ...]:
    """Every task type a config may use, in their registrations' order (the built-in ones first)."""
    _builtin_tasks()
    return tuple(TASKS)


def __getattr__(name: str):
    """``TASK_TYPES``: the built-in types, known once the step modules are imported; computed when
    asked, so that importing this module does not import them (and torch)."""
    if name == "TASK_TYPES":
        _builtin_tasks()
        return builtin_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _builtin_tasks() -> None:
    """Import the step modules: each registers its task types."""
    import gendergap.steps  # noqa: F401


@dataclass
class StudyConfig:
    path: Path
    data: dict            # validated values, defaults filled in
    lines: dict           # dotted key -> line, for errors found after validation
    # unpickle the study's checkpoints fully: set from the command line (--trust-checkpoint) by
    # `gendergap sweep` / `gendergap study`, never from the file, which cannot vouch for itself
    trust: bool = False

    @property
    def checkpoints(self) -> dict:
        return self.data["checkpoints"]

    @property
    def tasks(self) -> dict:
        return self.data["tasks"]


def load_config(path: str | os.PathLike) -> StudyConfig:
    """Read and validate a study config; raises UserError naming the file and line."""
    path = Path(path)
    known = ", ".join(p.name for p in sorted(CONFIG_DIR.glob("*.yaml")))
    raw, marks = read_yaml(path, missing_fix=f"give a YAML file (built-in: {known} in {CONFIG_DIR})")
    if not isinstance(raw, dict):
        raise UserError("the config must be a mapping (key: value lines)", path=path, line=1,
                        fix="start from configs/mini.yaml")
    if "trust_checkpoints" in raw:
        raise UserError("trust_checkpoints is not read from a config: a file cannot vouch for itself or for the "
                        "checkpoints it names", path=path, line=marks[("trust_checkpoints",)],
                        fix="remove the key, and pass --trust-checkpoint to `gendergap sweep` or `gendergap study` "
                            "if you trust the study's checkpoint files")
    data = _validate(Study, raw, (), marks, path)
    _check_path_names(data, raw, marks, path)
    tasks = raw.get("tasks") or {}   # a mapping once Study has checked it
    data["tasks"] = {name: _validate_task(name, entry, marks, path) for name, entry in tasks.items()}
    lines = {".".join(k): v for k, v in marks.items() if len(k) == 2 and k[0] in ("checkpoints", "tasks")}
    cfg = StudyConfig(path=path, data=data, lines=lines)
    _cross_checks(cfg, marks)
    return cfg


def _check_path_names(data: dict, raw: dict, marks: dict, path: Path) -> None:
    """Every name the study turns into a file or folder name (its own, its checkpoints', tasks',
    selections' and pretraining sets') is one path component: `../../x` or `a/b` would write result
    files outside --out, and a tab or bidi character would forge printed lines (boundary.check_name)."""
    check_name(data["name"], "study name", path=path, line=marks.get(("name",)))
    for section in ("checkpoints", "tasks", "selections"):
        for name in raw.get(section) or {}:
            check_name(name, f"{section[:-1]} name", path=path, line=marks.get((section, name)))
    for name in data["pretraining"]["sets"]:
        check_name(name, "pretraining set name", path=path, line=marks.get(("pretraining", "sets", name)))


def _validate(model: type[BaseModel], raw, at: tuple, marks: dict, path: Path) -> dict:
    return validate(model, raw, at, marks, path, hint=" (see `gendergap sweep --schema`)",
                    subjects={"tasks": "task", "checkpoints": "checkpoint"})


def _validate_task(name: str, entry: dict | None, marks: dict, path: Path) -> dict:
    entry = dict(entry or {})
    type_ = entry.get("type") or name
    _builtin_tasks()
    if not isinstance(type_, str) or type_ not in TASKS:
        raise UserError(f"task '{name}' has no known type", path=path, line=marks[("tasks", name)],
                        fix=f"name it, or set `type:` to, one of {', '.join(TASKS)}")
    return _validate(TASKS[type_].schema, {**entry, "type": type_}, ("tasks", name), marks, path)


# --- checks across entries ----------------------------------------------------------------------

def _cross_checks(cfg: StudyConfig, marks: dict) -> None:
    d, path = cfg.data, cfg.path
    if bool(d["corpus"]["synth"]) == bool(d["corpus"]["table"]):
        raise UserError("corpus needs exactly one of `synth` (the built-in corpus) or `table`", path=path,
                        line=marks.get(("corpus",), 1),
                        fix="e.g. `corpus: {synth: mini}` or `corpus: {table: data/utts.tsv}`")
    if not cfg.checkpoints and not all(TASKS[t["type"]].own_models for t in cfg.tasks.values()):
        raise UserError("the config lists no checkpoints", path=path, fix="add a `checkpoints:` section")
    _check_checkpoints(cfg)
    for name, t in cfg.tasks.items():
        _check_task_names(cfg, name, t)
        check = TASKS[t["type"]].check   # what the type itself checks (asr: a model to fine-tune, its hparams)
        if check is not None:
            check(cfg, name, t)
    order = graphlib.TopologicalSorter({n: set(t["after"]) for n, t in cfg.tasks.items()})
    try:
        order.prepare()
    except graphlib.CycleError as e:
        cycle = " -> ".join(e.args[1])
        raise UserError(f"the tasks' `after` lists form a cycle: {cycle}", path=path,
                        line=cfg.lines[f"tasks.{e.args[1][0]}"], fix="remove one of these `after` entries") from None


def _check_checkpoints(cfg: StudyConfig) -> None:
    sets = cfg.data["pretraining"]["sets"]
    for name, c in cfg.checkpoints.items():
        line = cfg.lines[f"checkpoints.{name}"]
        if c["registered"]:
            _take_registered(cfg, name, c, line)
        if (name == FBANK) != (c["baseline"] == "fbank"):
            raise UserError("the filterbank baseline is the checkpoint named FBANK, and only it", path=cfg.path,
                            line=line, fix="write `FBANK: {baseline: fbank}`")
        for key in ("pretrain", "pretrained_on"):
            if c[key] and c[key] not in sets:
                raise UserError(f"checkpoint '{name}' names pretraining set '{c[key]}', which pretraining.sets does "
                                "not define", path=cfg.path, line=line,
                                fix=f"use one of: {', '.join(sets) or '(none defined)'}")


def _take_registered(cfg: StudyConfig, name: str, c: dict, line: int) -> None:
    """A checkpoint named by its entry in the study's registry (`gendergap ckpt add`) becomes a path
    checkpoint with the entry's file, Table 3 facts and manifest; a fact the config gives wins. The
    registry is a handed file: read as data (a JSON of entries), its paths resolved where it lies."""
    if not cfg.data["registry"]:
        raise UserError(f"checkpoint '{name}' is `registered: {c['registered']}`, but the config names no registry",
                        path=cfg.path, line=line, fix="add `registry: path/to/checkpoints.json` (the file `gendergap "
                        "ckpt add --registry` wrote), or give the checkpoint's `path:`")
    registry = Path(cfg.data["registry"]).expanduser()
    registry = registry if registry.is_absolute() else (cfg.path.parent / registry).resolve()
    regular_file(registry, "study's checkpoint registry",
                 fix=f"register the checkpoints there with `gendergap ckpt --registry {registry} add NAME PATH`, "
                     f"or fix `registry:` in {cfg.path}")
    entry = Registry(registry).get(c["registered"])
    c["path"] = entry["path"]
    for key in ("hours", "male_pct", "female_pct", "unknown_pct", "manifest", "note"):
        if c.get(key) is None and entry.get(key) is not None:
            c[key] = entry[key]


def _check_task_names(cfg: StudyConfig, name: str, t: dict) -> None:
    """The checkpoints, selection and tasks a task names exist."""
    line = cfg.lines[f"tasks.{name}"]
    for ck in t["checkpoints"] or []:
        if ck not in cfg.checkpoints:
            raise UserError(f"task '{name}' refers to unknown checkpoint '{ck}'", path=cfg.path, line=line,
                            fix=f"use one of: {', '.join(cfg.checkpoints)}")
    selection = t.get("selection")
    if selection is not None:
        selections = cfg.data["selections"]
        if selection not in selections:
            raise UserError(f"task '{name}' trains on unknown selection '{selection}'", path=cfg.path, line=line,
                            fix=f"define it under `selections:` (defined: {', '.join(selections) or 'none'})")
        if selections[selection]["corpus"] != t["corpus"]:
            raise UserError(f"task '{name}' (corpus '{t['corpus']}') trains on selection '{selection}', which draws "
                            f"from corpus '{selections[selection]['corpus']}'", path=cfg.path, line=line,
                            fix="a task tests on its corpus's test split: select from that same corpus")
    for other in t["after"]:
        if other not in cfg.tasks:
            raise UserError(f"task '{name}' runs after unknown task '{other}'", path=cfg.path, line=line,
                            fix=f"use one of: {', '.join(cfg.tasks)}")


# --- the schema, for people and for tools -------------------------------------------------------

def schema_text() -> str:
    """The schema as an indented list of keys with types, defaults, choices and descriptions,
    generated from the pydantic models, every registered task type included (`gendergap sweep
    --schema`)."""
    _builtin_tasks()
    return describe({name: t.schema for name, t in TASKS.items()})


def schema_json() -> dict:
    """The JSON schema of a study config (pydantic's), each task one of the registered types."""
    _builtin_tasks()
    models = tuple(dict.fromkeys(t.schema for t in TASKS.values()))
    task = Union[models] if len(models) > 1 else models[0]  # noqa: UP007 -- a union built at run time
    full = create_model("StudyConfig", __base__=Study,
                        tasks=(dict[str, task], Field({}, description=Study.model_fields["tasks"].description)))
    return full.model_json_schema()
