"""Expand a study config into jobs: checkpoints x tasks x language pairs, with dependencies.

Each job is a JSON-able dict: name, kind, task, checkpoint, pair, deps (job names), steps
(see gendergap/jobs.py), resources, outputs, and a key. The key hashes the steps and the keys
of the jobs it depends on, so a change upstream (another corpus, another override) changes
every key below it and those jobs run again; an unchanged job is skipped.

The graph: corpus -> pretraining manifests -> (pretraining) -> checkpoints -> per task:
ASR data -> asr-e2e; features (one job per checkpoint: every layer and row its frozen-feature
tasks read, into the shared feature store) -> asr-frozen / st -> MuST-SHE scoring / probes;
all -> report.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from corpora.base.provenance import config_hash
from gendergap.config import StudyConfig
from gendergap.jobs import SHIPPED

DEFAULT_SPLITS = {"train": "train", "valid": "valid", "test": "test"}
LIGHT = {"cpus": 1, "mem_gb": 2, "gpus": 0, "time_min": 30}  # data wiring, scoring, the report


def _job(name, kind, steps, deps=(), resources=None, task=None, checkpoint=None, pair=None, outputs=()):
    return {"name": name, "kind": kind, "task": task, "checkpoint": checkpoint, "pair": pair, "deps": list(deps),
            "steps": steps, "resources": dict(resources or LIGHT), "outputs": [str(o) for o in outputs]}


def _path(cfg: StudyConfig, value: str | None, base: Path | None = None) -> str | None:
    """Config paths are relative to the config file (or to ``base`` when given)."""
    if value is None:
        return None
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else ((base or cfg.path.parent) / p).resolve())


@dataclass
class _Plan:
    """What every part of the plan needs: the config, the output paths and the jobs so far."""
    cfg: StudyConfig
    out: Path
    jobs: list = field(default_factory=list)
    table: str = ""
    table_deps: list = field(default_factory=list)
    features: dict = field(default_factory=dict)

    @property
    def d(self) -> dict:
        return self.cfg.data

    @property
    def db(self) -> str:
        return str(self.out / "results.db")

    @property
    def registry(self) -> str:
        return str(self.out / "checkpoints.json")

    @property
    def store(self) -> str:
        return str(self.out / "features")

    @property
    def trust(self) -> bool:
        return bool(self.d["trust_checkpoints"])


def plan_jobs(cfg: StudyConfig, out: str | Path, only: list[str] | None = None) -> list[dict]:
    """The study's jobs in dependency order (``only``: these tasks, plus what they need)."""
    plan = _Plan(cfg, Path(out).resolve())
    _corpus_jobs(plan)
    _checkpoint_jobs(plan)
    plan.features = _feature_jobs(cfg, plan.table, plan.registry, plan.store, plan.table_deps, plan.trust)
    plan.jobs += plan.features.values()
    task_jobs: dict[str, list[str]] = {}
    for tname, t in cfg.tasks.items():
        n_before = len(plan.jobs)
        TASK_PLANNERS[t["type"]](plan, tname, t)
        # what later tasks and the report wait for: each row's final job (a seed's own job is pooled first)
        task_jobs[tname] = [j["name"] for j in plan.jobs[n_before:]
                            if j["task"] == tname and not re.search(r":seed\d+$", j["name"])]
    _order_after(plan, task_jobs)
    report = ["-q", "report", "--db", plan.db, "--out", str(plan.out / "report"), "--registry", plan.registry,
              "--subset", plan.d["report"]["subset"]]
    plan.jobs.append(_job("report", "report", [{"cli": report}],
                          deps=sorted({n for names in task_jobs.values() for n in names} | {"checkpoints"}),
                          outputs=[plan.out / "report"]))
    jobs = _only(plan.jobs, only, cfg) if only else plan.jobs
    return _with_keys(jobs)


def _corpus_jobs(plan: _Plan) -> None:
    """The utterance table (generated, or the user's) and the pretraining manifests in use."""
    d, out, seed = plan.d, plan.out, plan.d["seed"]
    if d["corpus"]["synth"]:
        table = out / "corpus" / "utterances.tsv"
        plan.jobs.append(_job("corpus", "corpus", [{"cli": ["-q", "corpus", "synth", "--out", str(out / "corpus"),
                                                           "--size", d["corpus"]["synth"], "--seed", str(seed)]}],
                              outputs=[table]))
        plan.table_deps = ["corpus"]
    else:
        table = Path(_path(plan.cfg, d["corpus"]["table"]))
    plan.table = str(table)
    pre = d["pretraining"]
    used_sets = {c["pretrain"] or c["pretrained_on"] for c in plan.cfg.checkpoints.values()} - {None}
    for name in [s for s in pre["sets"] if s in used_sets]:
        mdir = out / "manifests" / name
        plan.jobs.append(_job(f"manifest:{name}", "manifest", [{"call": "build_pretraining_manifest", "kwargs": {
            "table": plan.table, "out": str(mdir), "gender": str(pre["sets"][name]), "split": pre["split"],
            "corpus": pre["corpus"], "hours": pre["hours"], "seed": seed}}], deps=plan.table_deps, outputs=[mdir]))


def _checkpoint_jobs(plan: _Plan) -> None:
    """Pretraining jobs for the checkpoints the study trains, then one job registering them all."""
    entries, ckpt_deps = [], []
    for name, c in plan.cfg.checkpoints.items():
        if c["baseline"]:
            continue  # FBANK: no model, nothing to register (CheckpointRef resolves the name itself)
        used = c["pretrain"] or c["pretrained_on"]
        entry = {"name": name, "path": None, "pretrain_dir": None, "note": c["note"],
                 "table3": {k: c[k] for k in ("hours", "male_pct", "female_pct", "unknown_pct") if c[k] is not None},
                 "make_up": str(plan.out / "manifests" / used / "selection_report.json") if used else None}
        if used:
            ckpt_deps.append(f"manifest:{used}")
        if c["pretrain"]:
            run = plan.out / "ssl" / name
            plan.jobs.append(_job(f"pretrain:{name}", "pretrain", [{"call": "pretrain_tiny", "kwargs": {
                "manifest": str(plan.out / "manifests" / c["pretrain"]), "out": str(run), "seed": plan.d["seed"],
                "updates": c["updates"], "preset": c["preset"],
                **({"continue_updates": c["continue_updates"]} if c["continue_updates"] else {})}}],
                deps=[f"manifest:{c['pretrain']}"],
                resources={**LIGHT, "time_min": 120}, checkpoint=name, outputs=[run]))
            entry["pretrain_dir"], entry["note"] = str(run), entry["note"] or "pretrained by this study"
            ckpt_deps.append(f"pretrain:{name}")
        elif c["shipped"]:
            entry["path"] = str(SHIPPED / f"{c['shipped']}.safetensors")
            entry["note"] = entry["note"] or f"shipped with gendergap; see {SHIPPED / 'PROVENANCE.md'}"
        else:
            entry["path"] = _path(plan.cfg, c["path"])
        entries.append(entry)
    plan.jobs.append(_job("checkpoints", "checkpoints", [{"call": "register_checkpoints", "kwargs": {
        "registry": plan.registry, "entries": entries, **({"trust": True} if plan.trust else {})}}],
        deps=sorted(set(ckpt_deps)), outputs=[plan.registry]))


def _asr_data_job(plan: _Plan, t: dict) -> tuple[Path, str]:
    """The SpeechBrain CSVs of a task's rows; tasks on the same rows share one export."""
    tag = t["corpus"] + ("" if t["splits"] == DEFAULT_SPLITS else "." + config_hash(t["splits"])[:8])
    data_dir, data_job = plan.out / "data" / tag, f"asr-data:{tag}"
    if not any(j["name"] == data_job for j in plan.jobs):
        plan.jobs.append(_job(data_job, "asr-data", [{"call": "export_asr_data", "kwargs": {
            "table": plan.table, "corpus": t["corpus"], "splits": t["splits"], "out": str(data_dir)}}],
            deps=plan.table_deps, outputs=[data_dir]))
    return data_dir, data_job


def _asr_jobs(plan: _Plan, tname: str, t: dict) -> None:
    """asr-e2e / asr-frozen: one job per checkpoint (or per seed, then a pooling job)."""
    d, cfg, kind = plan.d, plan.cfg, t["type"]
    data_dir, data_job = _asr_data_job(plan, t)
    for ck in t["checkpoints"] or list(cfg.checkpoints):
        if kind == "asr-e2e" and _baseline(cfg, ck):
            continue  # nothing to fine-tune
        run, deps = plan.out / tname / ck, ["checkpoints", data_job]
        extra = _runtime_args(t, plan.trust)
        if kind == "asr-frozen":
            extra += ["--layer", _layer(cfg, ck, t["layer"]), "--feature-store", plan.store]
            deps.append(plan.features[(ck, t["precision"])]["name"])
        if t["hparams"]:
            extra += ["--hparams", _path(cfg, t["hparams"])]

        def asr_cli(run_dir, overrides, subset=None, ck=ck, extra=extra):
            return (["-q", "asr", "finetune" if kind == "asr-e2e" else "frozen", "--ckpt", ck,
                     "--registry", plan.registry, "--train", str(data_dir / "train.csv"),
                     "--valid", str(data_dir / "valid.csv"), "--test", str(data_dir / "test.csv"),
                     "--table", plan.table, "--out", str(run_dir), "--db", plan.db,
                     "--bootstrap", str(d["report"]["bootstrap"]), "--seed", str(d["seed"]), "--no-progress"]
                    + (["--subset", subset] if subset else []) + extra + overrides)
        if not t["seeds"]:
            plan.jobs.append(_job(f"{tname}:{ck}", kind, [{"cli": asr_cli(run, list(t["overrides"]))}],
                                  deps=deps, resources=t["resources"], task=tname, checkpoint=ck, outputs=[run]))
        else:
            plan.jobs += _seeded(tname, kind, ck, None, t["resources"], deps, d, plan.db, [
                (s_, [{"cli": asr_cli(run / f"seed{s_}", [*t["overrides"], f"seed={s_}"], f"{SUBSET}@seed{s_}")}],
                 run / f"seed{s_}" / f"{SUBSET}.wer.json") for s_ in t["seeds"]])


def _st_steps(plan: _Plan, t: dict, ck: str, pair: str, model_dir: Path, train_seed: int, subset=None) -> list:
    """Train (fairseq s2t on the store's features) then decode and score one ST model."""
    src, tgt = pair.split("-")
    sp, kind = t["splits"], t["type"]
    train = ["-q", "st", "train", "--ckpt", ck, "--layer", _layer(plan.cfg, ck, t["layer"]),
             "--registry", plan.registry, "--feature-store", plan.store, *_runtime_args(t, plan.trust),
             "--corpus", t["corpus"], "--train", plan.table, "--train-split", sp["train"],
             "--valid", plan.table, "--valid-split", sp["valid"], "--src", src, "--tgt", tgt,
             "--out", str(model_dir), "--preset", _preset(plan.cfg, t["preset"]),
             "--seed", str(train_seed)] + list(t["overrides"])
    decode = ["-q", "st", "decode", "--model", str(model_dir), "--test", plan.table,
              "--test-split", sp["test"], "--corpus", t["corpus"], "--out", str(model_dir / "test.hyp"),
              "--db", plan.db, "--name", ck, "--bootstrap", str(plan.d["report"]["bootstrap"]),
              "--seed", str(plan.d["seed"]), "--task", kind] + (["--subset", subset] if subset else [])
    return [{"cli": train}, {"cli": decode}]


def _st_jobs(plan: _Plan, tname: str, t: dict) -> None:
    """st / gender-st: one job per checkpoint and pair (or per seed + pooling), then MuST-SHE."""
    kind, seed = t["type"], plan.d["seed"]
    for ck in t["checkpoints"] or list(plan.cfg.checkpoints):
        fname = plan.features[(ck, t["precision"])]["name"]
        for pair in t["pairs"]:
            model, name = plan.out / tname / f"{ck}.{pair}", f"{tname}:{ck}:{pair}"
            if not t["seeds"]:
                hyp, scored = model / "test.hyp", name
                plan.jobs.append(_job(name, kind, _st_steps(plan, t, ck, pair, model, seed + 1), deps=[fname],
                                      resources=t["resources"], task=tname, checkpoint=ck, pair=pair,
                                      outputs=[model]))
            else:
                hyp = model / f"seed{t['seeds'][0]}" / "test.hyp"  # MuST-SHE: the first seed's output
                plan.jobs += _seeded(tname, kind, ck, pair, t["resources"], [fname], plan.d, plan.db, [
                    (s_, _st_steps(plan, t, ck, pair, model / f"seed{s_}", s_, f"{SUBSET}@seed{s_}"),
                     model / f"seed{s_}" / "test.hyp.json") for s_ in t["seeds"]])
                scored = f"{name}:seed{t['seeds'][0]}"
            if t["mustshe"]:
                tsv = _path(plan.cfg, t["mustshe"], base=Path(plan.table).parent)
                plan.jobs.append(_job(f"mustshe:{ck}:{pair}", "mustshe", [{"call": "score_mustshe", "kwargs": {
                    "tsv": tsv, "hyps": str(hyp), "db": plan.db, "checkpoint": ck, "lang_pair": pair}}],
                    deps=[scored], task=tname, checkpoint=ck, pair=pair))


def _probe_jobs(plan: _Plan, tname: str, t: dict) -> None:
    """Gender probes per checkpoint; the first pretrained one also probes its random-init twin."""
    cfg = plan.cfg
    ckpts = t["checkpoints"] or list(cfg.checkpoints)
    twin_of = next((ck for ck in ckpts if not _baseline(cfg, ck)), None)
    for ck in ckpts:
        cli = ["-q", "probe", "run", "--ckpt", ck, "--registry", plan.registry, "--table", plan.table,
               "--layers", t["layers"] if not _baseline(cfg, ck) else "all", "--probes", ",".join(t["probes"]),
               "--db", plan.db, "--seed", str(plan.d["seed"]), "--out", str(plan.out / tname / ck),
               "--feature-store", plan.store, *_runtime_args(t, plan.trust)]
        cli += ["--corpus", t["corpus"]] if t["corpus"] else []
        cli += ["--control"] if t["control"] else []
        # one random-init twin (same architecture) is the control for the first pretrained checkpoint
        cli += [] if (t["random_init"] and ck == twin_of) else ["--no-random-init"]
        plan.jobs.append(_job(f"{tname}:{ck}", "probes", [{"cli": cli}],
                              deps=["checkpoints", plan.features[(ck, t["precision"])]["name"]] + plan.table_deps,
                              resources=t["resources"], task=tname, checkpoint=ck, outputs=[plan.out / tname / ck]))


TASK_PLANNERS = {"asr-e2e": _asr_jobs, "asr-frozen": _asr_jobs, "st": _st_jobs, "gender-st": _st_jobs,
                 "probes": _probe_jobs}


def _order_after(plan: _Plan, task_jobs: dict[str, list[str]]) -> None:
    """`after`: every job of a task waits for the other tasks' jobs."""
    for tname, t in plan.cfg.tasks.items():
        extra = [j for other in t["after"] for j in task_jobs[other]]
        for job in plan.jobs:
            if job["task"] == tname:
                job["deps"] = sorted(set(job["deps"]) | set(extra))


FROZEN_TASKS = ("asr-frozen", "st", "gender-st", "probes")
SUBSET = "test"   # the score subset of the tasks' test split; a seed's own rows are test@seed<N>


def _baseline(cfg: StudyConfig, ck: str) -> bool:
    return bool(cfg.checkpoints[ck]["baseline"])


def _layer(cfg: StudyConfig, ck: str, layer) -> str:
    """The layer a task reads; filterbanks have one output (0), so any layer but `all` means it."""
    return str(layer) if not _baseline(cfg, ck) or str(layer) == "all" else "0"


def _seeded(tname: str, kind: str, ck: str, pair: str | None, res: dict, deps: list[str], d: dict, db: str,
            per_seed: list[tuple]) -> list[dict]:
    """One job per training seed (``per_seed``: (seed, steps, result JSON)), each storing its own
    rows under test@seed<N>, then the pooling job, named as the single-seed job would be, that
    stores mean ± sd and the seed-and-speaker CI under ``test`` (analysis/seeds.py)."""
    base = f"{tname}:{ck}" + (f":{pair}" if pair else "")
    jobs = [_job(f"{base}:seed{s_}", kind, steps, deps=deps, resources=res, task=tname, checkpoint=ck, pair=pair,
                 outputs=[Path(result).parent]) for s_, steps, result in per_seed]
    jobs.append(_job(base, "seeds", [{"call": "pool_seeds", "kwargs": {
        "results": [str(r) for _, _, r in per_seed], "seeds": [s_ for s_, _, _ in per_seed],
        "key": "bleu" if kind in ("st", "gender-st") else None, "db": db, "checkpoint": ck, "task": kind,
        "lang_pair": pair or "", "subset": SUBSET, "bootstrap": d["report"]["bootstrap"], "seed": d["seed"]}}],
        deps=[j["name"] for j in jobs], task=tname, checkpoint=ck, pair=pair))
    return jobs


def _runtime_args(t: dict, trust: bool = False) -> list[str]:
    """--device / --precision (and --trust-checkpoint) of a model task. ``auto`` becomes the GPU
    the job asked for (resources.gpus) or the CPU, so a job never takes a GPU it did not ask
    SLURM for."""
    device = t["device"]
    if device == "auto" and t["resources"]["gpus"] < 1:
        device = "cpu"
    return ["--device", device, "--precision", t["precision"]] + (["--trust-checkpoint"] if trust else [])


def _feature_jobs(cfg: StudyConfig, table: str, registry: str, store: str, table_deps: list[str],
                  trust: bool = False) -> dict:
    """One extraction job per checkpoint (and precision) for everything its frozen-feature tasks
    read: each task's rows and layers is a request (probes: the probe rows only), and the job
    extracts each utterance once into as few store entries as cover them (gendergap/jobs.py)."""
    groups: dict[tuple, list[dict]] = {}
    for t in cfg.tasks.values():
        if t["type"] in FROZEN_TASKS:
            for ck in t["checkpoints"] or list(cfg.checkpoints):
                groups.setdefault((ck, t["precision"]), []).append(t)
    jobs = {}
    for (ck, precision), tasks in groups.items():
        requests = []
        for t in tasks:
            probe = t["type"] == "probes"
            splits = ["train", "valid", "dev", "test"] if probe else sorted(set(t["splits"].values()))
            layers = "all" if probe and _baseline(cfg, ck) else _layer(cfg, ck, t["layers" if probe else "layer"])
            requests.append({"corpus": t["corpus"], "splits": splits, "layers": layers,
                             "probe_seed": cfg.data["seed"] if probe else None})
        gpus = max(t["resources"]["gpus"] for t in tasks)
        res = max((t["resources"] for t in tasks), key=lambda r: (r["gpus"], r["cpus"]))
        name = f"features:{ck}" + ("" if precision == "fp32" else f":{precision}")
        device = "auto" if gpus >= 1 else "cpu"  # as _runtime_args: a GPU only when the job asked for one
        jobs[(ck, precision)] = _job(name, "features", [{"call": "extract_features", "kwargs": {
            "table": table, "ckpt": ck, "registry": registry, "store": store, "requests": requests,
            "device": device, "precision": precision, **({"trust": True} if trust else {})}}],
            deps=["checkpoints"] + table_deps, resources=res, checkpoint=ck, outputs=[store])
    return jobs


def _preset(cfg: StudyConfig, preset: str) -> str:
    return preset if preset in ("xs", "tiny") else _path(cfg, preset)


def _only(jobs: list[dict], only: list[str], cfg: StudyConfig) -> list[dict]:
    from corpora.base.errors import UserError

    unknown = [t for t in only if t not in cfg.tasks and t != "report"]
    if unknown:
        raise UserError(f"--only names unknown task(s): {', '.join(unknown)}", path=cfg.path,
                        fix=f"use task names from the config: {', '.join(cfg.tasks)}")
    by_name = {j["name"]: j for j in jobs}
    keep = {j["name"] for j in jobs if j["task"] in only or (j["kind"] == "report" and "report" in only)}
    stack = list(keep)
    while stack:
        for dep in by_name[stack.pop()]["deps"]:
            if dep not in keep:
                keep.add(dep)
                stack.append(dep)
    return [j for j in jobs if j["name"] in keep]


def _with_keys(jobs: list[dict]) -> list[dict]:
    import graphlib

    names = {j["name"] for j in jobs}
    by_name = {j["name"]: j for j in jobs}
    for job in jobs:
        job["deps"] = [d for d in job["deps"] if d in names]
    order = graphlib.TopologicalSorter({j["name"]: set(j["deps"]) for j in jobs}).static_order()
    jobs = [by_name[n] for n in order]
    keys: dict[str, str] = {}
    for job in jobs:
        job["key"] = config_hash({"steps": job["steps"], "deps": [keys[d] for d in job["deps"]]})
        keys[job["name"]] = job["key"]
    return jobs
