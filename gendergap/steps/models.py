"""Model steps: pretraining, the study's checkpoint registry, and frozen-feature extraction."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from corpora.base.errors import UserError
from corpora.feature_request import Request
from gendergap.steps.base import LIGHT, TASKS, CheckContext, Graph, ModelStep, Problem, Step
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.device import FAIRSEQ_SUBNORMALS, job_device
from ssl_pretrain.feature_cover import extract_requests
from ssl_pretrain.model_choice import ModelChoice
from ssl_pretrain.registry import run_checkpoint
from ssl_pretrain.safe_load import unsafe_classes
from ssl_pretrain.study_checkpoints import SHIPPED, pretrain_tiny, register_study_checkpoints


@dataclass(kw_only=True)
class PretrainStep(Step):
    """Pretrain a tiny wav2vec 2.0 on a manifest until it learns (ssl_pretrain.study_checkpoints)."""
    KIND = "pretrain"
    COST_MIN = 10
    manifest: str
    out: str
    seed: int
    updates: int
    preset: str = "tiny"
    continue_updates: int = 0

    def key_extra(self) -> dict:
        # fairseq's processes flush subnormal floats to zero (ssl_pretrain.device): the last bits moved
        return {"subnormals": FAIRSEQ_SUBNORMALS}

    def run(self) -> None:
        pretrain_tiny(self.manifest, self.out, self.seed, self.updates, self.preset, self.continue_updates)


@dataclass(kw_only=True)
class CheckpointsStep(Step):
    """Register every checkpoint of the study in one registry (paths, or pretraining outputs)."""
    KIND = "checkpoints"
    registry: str
    entries: list
    trust: bool = False

    def run(self) -> None:
        register_study_checkpoints(self.registry, self.entries, trust=self.trust)

    def check(self, ctx: CheckContext) -> list[Problem]:
        """Each checkpoint path exists, and passes what the run checks of it (CheckpointRef.check_before_run):
        a file is a .pt or packed .safetensors (`/etc/passwd` is neither) that unpickles nothing a genuine
        checkpoint does not (unless the sweep's --trust-checkpoint) and holds a wav2vec 2.0 pretraining config;
        a transformers folder is of a supported family, needs no custom code, and its weights are finite and
        fit its config.json (another family's weights under it are refused): a crafted file or folder is
        refused before any job runs, as the run would refuse it."""
        found = []
        for e in self.entries:
            if not e.get("path") or ctx.is_pending(e["path"]):
                continue
            key = f"checkpoints.{e['name']}"
            if not Path(e["path"]).exists():
                found.append(Problem(f"{e['path']} does not exist", "fix its `path:`", key))
                continue
            try:
                path, _ = run_checkpoint(e["path"])   # a run folder: its best, else its last checkpoint
            except UserError as err:
                found.append(Problem(f"{e['path']}: {err.message}", "fix its `path:`", key))
                continue
            unsafe = [] if self.trust or Path(path).is_dir() else unsafe_classes(path)
            if unsafe:   # said before loading: which classes, and the flag that allows them
                found.append(Problem(
                    f"{e['path']} would unpickle {', '.join(unsafe)}, which no genuine "
                    "checkpoint needs (and which could run code)",
                    "if you trust whoever made this file, pass --trust-checkpoint to `gendergap sweep` (or "
                    "`gendergap study`) to load it with full unpickling", key))
                continue
            try:
                CheckpointRef.resolve(path, trust=self.trust).check_before_run()
            except UserError as err:
                where = f"{err.path}: " if err.path and Path(err.path) != Path(path) else f"{e['path']}: "
                found.append(Problem(where + err.message, err.fix or "fix its `path:`", key))
        return found


@dataclass(kw_only=True)
class FeaturesStep(ModelStep):
    """Extract, once, what a checkpoint's frozen-feature tasks read from the feature store.

    Each request (a corpora.feature_request.Request) is a task's rows (corpus + splits; probes: the
    rows probe_splits draws with ``probe_seed``) at its layers; ssl_pretrain.feature_cover extracts
    them into as few store entries as cover them. The key hashes each request as its plain dict."""
    KIND = "features"
    COST_MIN = 0.6
    table: str
    ckpt: str
    registry: str
    store: str
    requests: list

    def __post_init__(self):
        self.requests = [Request.of(r) for r in self.requests]   # a task type's dicts, or a record read back

    def run(self) -> None:
        model = ModelChoice.resolve(self.ckpt, self.registry, trust=self.trust, device=self.device,
                                    precision=self.precision)
        extract_requests(model, self.table, self.store, self.requests)


def plan_checkpoints(g: Graph) -> None:
    """Pretraining steps for the checkpoints the study trains, then one step registering them all."""
    entries, deps = [], []
    for name, c in g.cfg.checkpoints.items():
        if c["baseline"]:
            continue  # FBANK: no model, nothing to register (CheckpointRef resolves the name itself)
        used = c["pretrain"] or c["pretrained_on"]
        entry = {"name": name, "path": None, "pretrain_dir": None, "note": c["note"],
                 "table3": {k: c[k] for k in ("hours", "male_pct", "female_pct", "unknown_pct") if c[k] is not None},
                 "make_up": str(g.out / "manifests" / used / "selection_report.json") if used else None}
        if c["manifest"] and not used:
            entry["make_up"] = str(Path(g.path(c["manifest"])) / "selection_report.json")
        if used:
            deps.append(f"manifest:{used}")
        if c["pretrain"]:
            run = str(g.out / "ssl" / name)
            step = g.add(PretrainStep(name=f"pretrain:{name}", manifest=str(g.out / "manifests" / c["pretrain"]),
                                      out=run, seed=g.seed if c["seed"] is None else c["seed"], updates=c["updates"],
                                      preset=c["preset"],
                                      continue_updates=c["continue_updates"], deps=[f"manifest:{c['pretrain']}"],
                                      resources={**LIGHT, "time_min": 120}, checkpoint=name, outputs=[run]))
            entry["pretrain_dir"], entry["note"] = run, entry["note"] or "pretrained by this study"
            deps.append(step.name)
        elif c["shipped"]:
            entry["path"] = str(SHIPPED / f"{c['shipped']}.safetensors")
            entry["note"] = entry["note"] or f"shipped with gendergap; see {SHIPPED / 'PROVENANCE.md'}"
        else:
            entry["path"] = g.path(c["path"])
        entries.append(entry)
    g.add(CheckpointsStep(name="checkpoints", registry=g.registry, entries=entries, trust=g.trust,
                          deps=sorted(set(deps)), outputs=[g.registry]))


def plan_features(g: Graph) -> None:
    """One extraction step per checkpoint (and precision) for everything its frozen-feature tasks
    read: each task's rows and layers is a request (its type's registered feature request; probes: the
    probe rows only), and the step extracts each utterance once into as few store entries as
    cover them."""
    groups: dict[tuple, list[dict]] = {}
    for t in g.cfg.tasks.values():
        if TASKS[t["type"]].features is not None:
            for ck in g.checkpoints_of(t):
                groups.setdefault((ck, t["precision"]), []).append(t)
    for (ck, precision), tasks in groups.items():
        requests = []
        for t in tasks:   # a task reading rows of two corpora makes two requests
            request = TASKS[t["type"]].features(g, ck, t)
            requests += request if isinstance(request, list) else [request]
        gpus = max(t["resources"]["gpus"] for t in tasks)
        res = max((t["resources"] for t in tasks), key=lambda r: (r["gpus"], r["cpus"]))
        name = f"features:{ck}" + ("" if precision == "fp32" else f":{precision}")
        g.features[(ck, precision)] = g.add(FeaturesStep(
            name=name, table=g.table, ckpt=ck, registry=g.registry, store=g.store, requests=requests,
            device=job_device("auto", gpus), precision=precision, trust=g.trust,
            deps=["checkpoints"] + g.table_deps, resources=dict(res), checkpoint=ck, outputs=[g.store]))
