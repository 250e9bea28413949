"""The demo: the whole study in miniature, as one sweep over a study config.

`gendergap study` = `gendergap sweep --config configs/mini.yaml --out study` run here, followed
by a summary: time per stage (job kind), the headline numbers and where everything is. Finished
jobs are skipped, so re-running is a no-op and a killed study resumes where it stopped.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from gendergap.config import CONFIG_DIR, StudyConfig, load_config
from gendergap.cost import estimate
from gendergap.plan import plan_jobs
from gendergap.preflight import preflight
from gendergap.steps.conditions import ConditionsStep
from gendergap.steps.data import AsrDataStep, CorpusStep, ManifestStep, MergeStep
from gendergap.steps.mixed import MixedModelStep, VoiceMeasuresStep
from gendergap.steps.models import CheckpointsStep, FeaturesStep, PretrainStep
from gendergap.steps.report import ReportStep
from gendergap.steps.seeds import PoolSeedsStep
from gendergap.steps.selection import SelectionStep
from gendergap.tasks import step_kinds
from ssl_pretrain.feature_store import bytes_on_disk

DEFAULT_CONFIG = CONFIG_DIR / "mini.yaml"
# The study's own stages around its tasks': the data and models every task reads, then the
# pooling, comparing and reporting of the tasks' rows. The tasks' stages come from their
# registrations (gendergap.tasks.step_kinds), so a new task kind needs no line here.
BEFORE_TASKS = tuple(c.KIND for c in (CorpusStep, MergeStep, ManifestStep, PretrainStep, CheckpointsStep,
                                      SelectionStep, AsrDataStep, FeaturesStep))
AFTER_TASKS = tuple(c.KIND for c in (PoolSeedsStep, ConditionsStep, VoiceMeasuresStep, MixedModelStep, ReportStep))


def stage_order(kinds) -> list[str]:
    """The step kinds ``kinds`` in the time table's order: the study's stages before its tasks, the
    task kinds in their registrations' stage order, the stages after; then any other kind in the
    order given (a kind is never left out of the table)."""
    known = [*BEFORE_TASKS, *(k.name for k in step_kinds()), *AFTER_TASKS]
    present = dict.fromkeys(kinds)
    return [k for k in known if k in present] + [k for k in present if k not in known]


def with_pretraining(cfg: StudyConfig) -> StudyConfig:
    """--pretrain: every shipped checkpoint is pretrained anew on the set it was made from."""
    cfg = copy.deepcopy(cfg)
    for name, c in cfg.checkpoints.items():
        if c["shipped"]:
            if not c["pretrained_on"]:
                raise UserError(f"checkpoint {name!r} is shipped but names no `pretrained_on` set to pretrain on",
                                path=cfg.path, line=cfg.lines.get(f"checkpoints.{name}"))
            c["pretrain"], c["shipped"], c["note"] = c["pretrained_on"], None, "pretrained by this study (--pretrain)"
    return cfg


def run_study(config: str | Path | None, out: str | Path, pretrain: bool = False, parallel: int | None = None,
              seed: int | None = None, retry_failed: bool = False, trust: bool = False) -> int:
    from gendergap.sweep import run_sweep, summary

    cfg = load_config(config or DEFAULT_CONFIG)
    cfg.trust = trust   # --trust-checkpoint: the command line's, never the file's
    if pretrain:
        cfg = with_pretraining(cfg)
    if seed is not None:
        cfg.data["seed"] = seed
    out = Path(out).resolve()
    jobs = plan_jobs(cfg, out)
    t0 = time.perf_counter()
    print(f"gendergap study '{cfg.data['name']}' ({cfg.path}) -> {out}", flush=True)
    preflight(cfg, jobs, out)   # every job's inputs checked against the data before the first runs
    states = run_sweep(jobs, out, executor="local", parallel=parallel or cfg.data["executor"]["parallel"],
                       retry_failed=retry_failed)
    wall = time.perf_counter() - t0
    rows = summary(jobs, out)
    estimates = _estimates(jobs, {r["job"]: r["state"] for r in rows})
    print_stages(rows, wall, estimates)
    if (out / "features").is_dir():
        # every job writing into the store: the features step, and the probes' random-init twins
        store = str(out / "features")
        guess = sum(e.disk.get(store, 0.0) for e in estimates or [])
        print(f"  frozen features on disk: {bytes_on_disk(out / 'features') / 1e6:.0f} MB in {out / 'features'} "
              "(one store entry per checkpoint, shared by asr-frozen, st, gender-st and probes)"
              + (f"; estimated {guess / 1e6:.0f} MB" if guess else ""))
    bad = [r for r in rows if states.get(r["job"]) in ("failed", "blocked")]
    print(f"\noutputs in {out}:")
    for what, path in (("report", out / "report" / "report.md"), ("results DB", out / "results.db"),
                       ("checkpoint registry", out / "checkpoints.json"), ("job logs and state", out / "sweep"),
                       ("corpus", out / "corpus")):
        if path.exists():
            print(f"  {what:20s} {path}")
    if bad:
        print(f"\n{len(bad)} job(s) did not finish: " + ", ".join(r["job"] for r in bad)
              + f"\n  see `gendergap sweep status --config {cfg.path} --out {out}`; fix, then "
              "`gendergap study --retry-failed` (finished jobs are kept)")
        return 1
    report = out / "report" / "report.md"
    if report.is_file():
        print("\n" + headline(report))
    return 0


def _estimates(jobs, states: dict) -> list:
    """What the cost model (gendergap.cost) says every job costs, now that its inputs exist: the
    estimate the dry run gives, set beside what the jobs took."""
    try:
        return estimate(jobs, states, every_job=True)
    except UserError as e:   # a broken profile must not hide the study's results
        print(f"(no cost estimate: {e})")
        return []


def print_stages(rows: list[dict], wall: float, estimates: list | None = None) -> None:
    """Per stage (job kind): jobs, summed job seconds against the cost estimate, and the wall-clock
    span they covered."""
    guess: dict[str, float] = {}
    for e in estimates or []:
        if e.seconds is not None:
            guess[e.stage] = guess.get(e.stage, 0.0) + e.seconds
    print("\nstage          jobs   job time   CPU time   estimate   wall span")
    for kind in stage_order(r["kind"] for r in rows):
        mine = [r for r in rows if r["kind"] == kind and r["seconds"] is not None]
        if not mine:
            continue
        span = max(r["finished"] for r in mine) - min(r["started"] for r in mine)
        est = f"{guess[kind]:8.1f} s" if kind in guess else f"{'-':>10s}"
        cpu = [r.get("cpu_s") for r in mine]   # None: finished by a version that did not count it
        cpu = f"{'-':>10s}" if None in cpu else f"{sum(cpu):8.1f} s"
        print(f"  {kind:12s} {len(mine):4d} {sum(r['seconds'] for r in mine):8.1f} s {cpu} {est} {span:9.1f} s")
    print(f"  {'this run':12s} {'':4s} {'':10s} {'':10s} {'':10s} {wall:9.1f} s (wall clock, skipped jobs included)")


def headline(report_md: Path) -> str:
    """The report's tables, for the terminal (report.md holds them all, with the figures)."""
    keep, on = [], False
    for line in read_lines(report_md, "report"):
        if line.startswith("## "):
            on = not line.startswith("## Gender probes") and not line.startswith("## Other")
        if on:
            keep.append(line)
    return "\n".join(keep)
