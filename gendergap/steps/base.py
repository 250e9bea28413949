"""A study step: one node of the study graph, a small typed object.

A step's dataclass fields say what it computes (its table, checkpoint, layer, seed, output
folder...); ``deps`` names the steps whose outputs it reads; ``run()`` does its work: by default
the CLI leaves' functions its ``calls()`` returns, else the package functions it calls itself.
Its key hashes its kind, its fields and the keys of the steps it reads, so a change upstream
(another corpus, another override) changes every key below it, and an unchanged step is
skipped. The sweep submits the step objects themselves through submitit (they pickle), and
a results row points back to its step through the results store (analysis/store.py).

Graph-level attributes (name, deps, resources, task, checkpoint, pair, outputs) are not part of
the step's fields: they say where it sits in the graph and what it asks a scheduler for, not what
it computes.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ClassVar

from corpora.base.provenance import config_hash
from corpora.feature_request import Layers, Request
from gendergap.runs.leaf import leaf_of
from gendergap.tasks import TASKS, StepKind, register_task  # noqa: F401 (the one task registry)

LIGHT = {"cpus": 1, "mem_gb": 2, "gpus": 0, "time_min": 30}  # data wiring, scoring, the report
GRAPH_FIELDS = ("name", "deps", "resources", "task", "checkpoint", "pair", "outputs", "key")


@dataclass(kw_only=True)
class Step:
    """The part every step shares: where it sits in the graph. Subclasses add typed fields and
    ``run()``; ``KIND`` names the step kind (a subclass serving two task types overrides ``kind``)."""
    KIND: ClassVar[str] = ""
    # rough minutes on the built-in study: the local scheduler starts the step with the longest
    # chain of work behind it first (critical path), so two cores stay busy to the end
    COST_MIN: ClassVar[float] = 0.1
    # its outputs are its own run folders: when its key changes they are removed and it starts afresh
    OWNS_OUTPUTS: ClassVar[bool] = False
    # fields added after steps of this kind were run: left out of the fields (and so of the key)
    # while None, their default, so a study made before them is not redone
    ADDED_FIELDS: ClassVar[tuple] = ()
    # fields renamed after steps of this kind were run: {new name: the name keys were made with},
    # so a clearer name does not redo a study
    KEY_NAMES: ClassVar[dict] = {}
    # engines its job starts in processes of their own (fairseq for ST): a sweep with such a job
    # has its warm server import them once, so those processes start warm too (gendergap/warm.py)
    ENGINE_IMPORTS: ClassVar[tuple] = ()
    name: str
    deps: list[str] = field(default_factory=list)
    resources: dict = field(default_factory=lambda: dict(LIGHT))
    task: str | None = None
    checkpoint: str | None = None
    pair: str | None = None
    outputs: list[str] = field(default_factory=list)
    key: str = ""

    @property
    def kind(self) -> str:
        return self.KIND

    @property
    def cost_min(self) -> float:
        return self.COST_MIN

    @property
    def owns_outputs(self) -> bool:
        return self.OWNS_OUTPUTS

    def fields(self) -> dict:
        """What the step computes: its dataclass fields but the graph's, JSON-able (they make its
        key). The class's own fields come first, then its bases' (ModelStep's device, precision,
        trust), so that `describe()` reads as the step; the key does not depend on the order."""
        names = {f.name for f in dataclasses.fields(self)} - set(GRAPH_FIELDS)
        ordered = dict.fromkeys(n for klass in type(self).__mro__ for n in vars(klass).get("__annotations__", {})
                                if n in names)
        return {n: _plain(getattr(self, n)) for n in ordered
                if not (n in self.ADDED_FIELDS and getattr(self, n) is None)}

    def make_key(self, dep_keys: list[str]) -> str:
        fields = {self.KEY_NAMES.get(k, k): v for k, v in self.fields().items()}
        extra = self.key_extra()
        return config_hash({"kind": self.kind, "fields": fields, "deps": dep_keys,
                            **({"method": extra} if extra else {})})

    def key_extra(self) -> dict:
        """What changes this step's results without changing its fields (a fix to how a model is run):
        part of its key, so that a study made before the fix redoes this step. Empty: keys as before."""
        return {}

    def record(self) -> dict:
        """What the results store keeps of the step that made a run (analysis.store.recording_step)."""
        extra = self.key_extra()
        return {"key": self.key, "kind": self.kind, "name": self.name, "fields": self.fields(),
                **({"method": extra} if extra else {})}

    def as_dict(self) -> dict:
        """Everything about the step: what the sweep writes to its job.json."""
        return {"name": self.name, "kind": self.kind, "task": self.task, "checkpoint": self.checkpoint,
                "pair": self.pair, "deps": list(self.deps), "resources": dict(self.resources),
                "outputs": list(self.outputs), "key": self.key, "fields": self.fields()}

    def describe(self) -> str:
        return f"{type(self).__name__}(" + ", ".join(f"{k}={v!r}" for k, v in self.fields().items()) + ")"

    def run(self) -> None:
        """Run the step: by default its ``calls()``, each a CLI leaf's keyword function."""
        calls = self.calls()
        if not calls:
            raise NotImplementedError(f"{type(self).__name__}.run")
        run_calls(calls, type(self).__name__)

    def calls(self) -> list[tuple[Callable, dict]]:
        """What running the step means as CLI leaves' functions: [(function, its keyword arguments)],
        e.g. (gendergap.runs.asr_frozen, {ckpt: ..., layer: ...}). ``run()`` calls them; `gendergap
        trace` prints them as the command lines that redo exactly this step, each function through the
        leaf it declares (@cli_leaf, gendergap/runs/leaf.py). Empty: the step is no CLI leaf's work."""
        return []

    def check(self, ctx: "CheckContext") -> list["Problem"]:
        """What is wrong with this step's inputs, found WITHOUT running it (tables read, audio
        headers probed: corpora.checks): the sweep runs every step's check before its first job
        and refuses to start while any finds a problem. Inputs another step will write
        (``ctx.pending``) are not checked. The default: nothing to check."""
        return []


def run_calls(calls: list[tuple[Callable, dict]], step: str = "a step") -> None:
    """Call each function with its keyword arguments, once every one is known to be a CLI leaf's:
    a step kind whose function declares no leaf is stopped at its first run (in its tests, in any
    study), rather than later, when `gendergap trace` cannot print the command that redoes it."""
    bare = [f"{f.__module__}.{f.__qualname__}" for f, _ in calls if leaf_of(f) is None]
    if bare:
        raise TypeError(f"{step}.calls() names {', '.join(bare)}, which no CLI leaf declares: put "
                        "@cli_leaf('group leaf') (gendergap/runs/leaf.py) on the function, or override run() "
                        "when the step's work is no CLI leaf's")
    for function, kwargs in calls:
        function(**kwargs)


@dataclass(kw_only=True)
class ModelStep(Step):
    """A step that runs a model: on which device, in what autocast precision, and whether its
    checkpoints may be unpickled fully (the sweep's --trust-checkpoint)."""
    device: str
    precision: str
    trust: bool = False


@dataclass(frozen=True)
class Problem:
    """One thing a step's check found: what is wrong, the fix, and the config key it comes from
    (``tasks.<name>``, ``checkpoints.<name>``, ``corpus.table``, ``pretraining``): the sweep prints
    it as ``config.yaml:LINE: task 'x': what -- fix``. ``key`` None: the task of the step, or of the
    steps reading its output."""
    message: str
    fix: str
    key: str | None = None
    also: tuple = ()   # other tasks the problem concerns (a data step several tasks read)


def problems(findings, key: str | None = None) -> list[Problem]:
    """corpora.checks Findings (or anything with message and fix) as Problems of ``key``; one about
    the table itself is the config's corpus.table's."""
    return [Problem(f.message, f.fix, "corpus.table" if getattr(f, "scope", "") == "table" else key)
            for f in findings]


@dataclass
class CheckContext:
    """What a check pass knows of the graph: the outputs of the steps that have not run yet
    (their files may be missing or stale: checked when they are written, not now)."""
    pending: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # advice that blocks nothing, printed once each

    def is_pending(self, path: str | None) -> bool:
        """``path`` is, or is inside, an output a step not yet done will write."""
        if not path:
            return False
        p = Path(path).resolve()
        return any(p == Path(o).resolve() or Path(o).resolve() in p.parents for o in self.pending)

    def readable(self, path: str | None) -> bool:
        """Check this input now: it exists and no pending step will write it."""
        return bool(path) and not self.is_pending(path) and Path(path).exists()


def _plain(value):
    """Paths as strings, tuples as lists, a feature Request as its dict: the form a key hashes and
    job.json stores."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Request):
        return _plain(value.plain())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


# --- task types: a config schema and a planner each --------------------------------------------

Planner = Callable[["Graph", str, dict], None]   # (graph, task name, validated task config) -> adds steps
# (graph, checkpoint, task config) -> what the task reads from the feature store: a
# corpora.feature_request.Request (or a dict of its fields: corpus, splits, layers, probe_seed), or a
# list of them (rows of several corpora); FeaturesStep, gendergap/steps/models.py
FeatureRequest = Callable[["Graph", str, dict], "Request | dict | list"]
# A task type is registered once, with all it is (schema, planner, feature request, config check, and per
# step kind its cost estimate, stage order and report title): gendergap.tasks.register_task (re-exported
# here for step modules). Besides its step class and its package function, that is all a new downstream
# task needs (docs/architecture.md).


# --- the graph being built --------------------------------------------------------------------

@dataclass
class Graph:
    """What every planner needs: the config, the output folder and the steps so far. Also ``d``
    (the config's values), ``seed``, ``trust`` (--trust-checkpoint), ``bootstrap`` (the report's
    resamples), and the study's shared files: ``db`` (results), ``registry`` (checkpoints) and
    ``store`` (frozen features)."""
    cfg: object                                   # gendergap.config.StudyConfig
    out: Path
    steps: list[Step] = field(default_factory=list)
    table: str = ""                               # the utterance table every task reads
    table_deps: list[str] = field(default_factory=list)   # the step writing it, if the study does
    features: dict = field(default_factory=dict)  # (checkpoint, precision) -> its FeaturesStep
    row_results: dict = field(default_factory=dict)  # (task, pair) -> its rows' result files (steps/conditions)

    def __post_init__(self):
        d = self.d = self.cfg.data
        # trust: the command line's --trust-checkpoint (StudyConfig.trust), never a key of the file
        self.seed, self.trust, self.bootstrap = (d["seed"], bool(getattr(self.cfg, "trust", False)),
                                                 d["report"]["bootstrap"])
        self.db, self.registry, self.store = (str(self.out / n) for n in ("results.db", "checkpoints.json", "features"))

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        return step

    def path(self, value: str | None, base: Path | None = None) -> str | None:
        """Config paths are relative to the config file (or to ``base`` when given)."""
        return config_path(self.cfg, value, base)

    def checkpoints_of(self, t: dict) -> list[str]:
        """The checkpoints a task runs on: its own list, else every checkpoint of the study."""
        return list(t["checkpoints"] or self.cfg.checkpoints)

    def is_baseline(self, ck: str) -> bool:
        return bool(self.cfg.checkpoints[ck]["baseline"])

    def seeds_of(self, t: dict, ck: str) -> list[int] | None:
        """The training seeds a task runs on a checkpoint: the reference row (FBANK) takes the task's
        ``reference_seeds`` where given (it has no pretraining run to replicate), every other row ``seeds``."""
        if self.is_baseline(ck) and t.get("reference_seeds"):
            return t["reference_seeds"]
        return t["seeds"]

    def layer(self, ck: str, layer) -> str:
        """The layer a task reads; filterbanks have one output (0), so any layer but `all` means it."""
        return str(layer) if not self.is_baseline(ck) or Layers.parse(layer).every else "0"

    def split_request(self, ck: str, t: dict) -> Request:
        """A feature request for a task reading its splits of its corpus at its `layer` (frozen
        ASR, ST)."""
        return Request(t["corpus"], sorted(set(t["splits"].values())), self.layer(ck, t["layer"]))

    def features_of(self, ck: str, t: dict) -> str:
        """The name of the step extracting ``ck``'s features for task ``t``."""
        return self.features[(ck, t["precision"])].name


def config_path(cfg, value: str | None, base: Path | None = None) -> str | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else ((base or cfg.path.parent) / p).resolve())


def task_runtime(t: dict) -> dict:
    """The device and precision fields of a model task's steps (ssl_pretrain.device.job_device)."""
    from ssl_pretrain.device import job_device

    return {"device": job_device(t["device"], t["resources"]["gpus"]), "precision": t["precision"]}