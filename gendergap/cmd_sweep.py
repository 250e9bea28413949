"""`gendergap sweep`: every downstream task per checkpoint, from a study config."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from corpora.base.errors import UserError
from gendergap.options import out_dir
from gendergap.preflight import preflight

DESCRIPTION = ("""\
Expand a study config (checkpoints x tasks x language pairs) into jobs with dependencies and
run them through submitit: locally (--executor local, N at a time) or as SLURM job arrays with
per-task resources. Each job is one typed study step (gendergap/steps/). Idempotent: a job whose
key (its step's kind and fields + the keys of the steps it reads) already finished is skipped, a
failed one is retried only with --retry-failed, and re-running after a kill finishes the rest.
Scores go to OUT/results.db (one row set per job), the report to OUT/report/.

jobs, in dependency order:
  corpus -> pretraining manifests -> [pretraining] -> checkpoints (registry OUT/checkpoints.json)
  asr-data -> asr-e2e / asr-frozen        (per checkpoint)
  features -> st / gender-st -> mustshe  (per checkpoint and language pair)
  probes                                  (per checkpoint)
  everything -> report

examples:
  gendergap sweep --config configs/mini.yaml --dry-run            # validate, print the plan, check the inputs
  gendergap sweep --config study.yaml --dry-run --variance-from runs/mini   # what it detects, """
               """by an earlier study's variance
  gendergap sweep --config configs/mini.yaml --out runs/mini      # run it here, 2 jobs at a time
  gendergap sweep --config configs/mini.yaml --only st,report     # ST (and what it needs) only
  gendergap sweep status --config configs/mini.yaml --out runs/mini
  gendergap sweep --config configs/boito2022.yaml --executor slurm --retry-failed
  gendergap sweep --schema                                        # every config key, documented
  gendergap sweep --config theirs.yaml --trust-checkpoint         # their .pt files may unpickle anything

What the design can detect (--dry-run, after the plan): per compared task, its primary test's
minimum detectable difference in Δrel (80 % power) for the config's shares, checkpoints, seeds and
test speakers, from documented variance components or --variance-from (docs/design-power.md).

Checked before anything runs (--dry-run and every real sweep): each job's inputs against the
data, without running it: the table reads (no duplicate ids), each task's corpus and splits
have rows, ST pairs have their tgt_text_<lang> translations, every audio file's header reads
(headers only, each file once, with a progress bar), pretraining sets have their genders,
test speakers have a gender, fairseq can batch each ST split with the preset (xs:
required-batch-size-multiple 8), checkpoint files exist. Every problem is one line,
`config.yaml:LINE: task 'x': what -- fix`; then exit 2, and nothing is submitted. Inputs a job
of the sweep will write, and jobs already done, are not checked.

SLURM: each array is throttled to executor.array_parallelism elements at once (%N); re-running a
sweep while an earlier run's jobs are still queued submits only the rest, and a new job waits on
its prerequisite's existing SLURM job id (afterok). Jobs are requeued on preemption / time-out
and resume from their own checkpoints.
""")


TRUST_HELP = ("unpickle the study's checkpoint files fully (torch.load weights_only=False): its .pt checkpoints and "
              "the SpeechBrain checkpoints of its ASR runs. Only for files from a source you trust; a study config "
              "cannot ask for this itself")


def register(subparsers, group: str, help_: str) -> None:
    p = subparsers.add_parser(group, help=help_, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", nargs="?", choices=("run", "status"), default="run",
                   help="run (default) or status: list the jobs, their state and logs")
    p.add_argument("--config", help="study config YAML (built-in: configs/mini.yaml)")
    p.add_argument("--out", type=out_dir("--out"), help="output directory (default: runs/<config name>)")
    p.add_argument("--executor", choices=("local", "slurm"), help="default: the config's executor.name")
    p.add_argument("--parallel", type=int, help="local executor: jobs at once (default: the config's)")
    p.add_argument("--only", help="comma-separated task names (plus the jobs they need, and 'report')")
    p.add_argument("--dry-run", action="store_true",
                   help="validate the config, print the plan (every job with its resources; under SLURM the job "
                   "arrays) and "
                   "what each compared task's design can detect, check every job's inputs against the data (exit 2 on "
                   "any problem) and cost the jobs; run nothing")
    p.add_argument("-v", "--verbose", action="store_true", help="--dry-run: also print each job's step with every "
                   "field (what makes its key: checkpoint, layer, overrides, seeds ...)")
    p.add_argument("--retry-failed", action="store_true", help="run jobs that failed before again")
    p.add_argument("--force", action="store_true", help="run even where the cost estimate says a file system "
                   "is too small (the dry run and every real run compare the disk estimate with the free space)")
    p.add_argument("--profile", metavar="FILE", help="throughput profile for the cost estimate (default: "
                   "~/.cache/gendergap/profile.json from `gendergap bench`, else the measured defaults of "
                   "docs/measurements.md)")
    p.add_argument("--variance-from", metavar="DIR", help="--dry-run: size each task's minimum detectable difference "
                   "with the variance components an earlier study measured (its folder, or its results DB file) "
                   "instead of the defaults fitted on the built-in study (docs/design-power.md)")
    p.add_argument("--schema", action="store_true", help="print every config key with its type, default, meaning")
    p.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    p.set_defaults(func=run)


def load(args):
    from gendergap.config import load_config
    from gendergap.plan import plan_jobs

    if not args.config:
        raise UserError("--config is required", fix="e.g. --config configs/mini.yaml (see --schema)")
    cfg = load_config(args.config)
    cfg.trust = bool(getattr(args, "trust_checkpoint", False))   # from the command line only, never the file
    out = Path(args.out or Path("runs") / cfg.data["name"])
    only = [t.strip() for t in args.only.split(",") if t.strip()] if args.only else None
    return cfg, out, plan_jobs(cfg, out, only=only)


def _resources(res: dict) -> str:
    return f"{res['cpus']} cpu {res['gpus']} gpu {res['mem_gb']:g} GB {res['time_min']} min"


def print_plan(jobs, out, states, executor: str = "local", slurm: dict | None = None, verbose: bool = False) -> None:
    """Every job with its state, resources (what SLURM is asked for) and dependencies, and with
    ``verbose`` its step's every field (what makes its key); under SLURM also the job arrays a run
    would submit now, with their throttle."""
    from gendergap.sweep import array_label, slurm_groups

    print(f"{len(jobs)} jobs (state as of now; output in {out}):")
    for j in jobs:
        print(f"  {states[j.name]:8s} {j.name:36s} {_resources(j.resources)}"
              + (f"  after {', '.join(j.deps)}" if j.deps else ""))
        if verbose:
            print("             " + j.describe())
    if executor == "slurm":
        slurm = slurm or {}
        groups = slurm_groups(jobs, states)
        throttle = slurm.get("array_parallelism")
        print(f"SLURM: {len(groups)} job array(s) to submit (one per task, afterok on the arrays they need), "
              + (f"at most {throttle} element(s) of each running at once (executor.array_parallelism)"
                 if throttle else "no throttle (executor.array_parallelism unset: submitit's default %256)"))
        for g in groups:
            label = array_label(g[0])
            array = f"--array=0-{len(g) - 1}" + (f"%{throttle}" if throttle else "") if len(g) > 1 else "(one job)"
            print(f"  gg-{label:24s} {len(g):4d} job(s) {array:18s} {_resources(g[0].resources)}"
                  + (f" partition {slurm['partition']}" if slurm.get("partition") else ""))


def print_cost(jobs, states: dict, parallel: int, executor: str, profile: str | None = None,
               force: bool = False) -> None:
    """The cost table of the jobs still to run (gendergap.cost), a note where jobs ask for a GPU
    this machine lacks, and the disk check: a UserError per file system too small, unless --force."""
    from gendergap.cost import check_space, cost_table, estimate, load_profile, store_lines

    prof = load_profile(profile)
    est = estimate(jobs, states, prof)
    print(cost_table(est, parallel if executor == "local" else len(est), prof))
    for line in store_lines(est):
        print(line)
    if executor == "local":
        line = oversubscribed(jobs, states, parallel, os.cpu_count() or 1)
        if line:
            print(f"warning: {line}")
    gpu = [j.name for j in jobs if (j.resources or {}).get("gpus") and states.get(j.name) != "done"]
    if gpu and executor == "local":
        import torch
        if not torch.cuda.is_available():
            print(f"note: {len(gpu)} job(s) ask for a GPU (resources.gpus) and this machine has none: they run on "
                  "the CPU here, and each result row records the device it ran on")
    for line in check_space(est, force=force):
        print(f"warning: {line} (--force: running anyway)")
    sys.stdout.flush()


def check_db_folder(out: Path) -> None:
    """The results DB (OUT/results.db) needs POSIX locks: checked on OUT's file system (its nearest
    existing folder, since a dry run creates nothing) before any job would write it."""
    from analysis.store import check_posix_locks

    folder = Path(out).resolve()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    check_posix_locks(folder)


def oversubscribed(jobs, states: dict, parallel: int, cores: int) -> str | None:
    """When the local executor would run more torch threads than this machine has cores (each job
    takes resources.cpus threads, ``parallel`` jobs at once): the line saying so, else None."""
    todo = [j for j in jobs if states.get(j.name) != "done"]
    widest = max(((j.resources or {}).get("cpus", 1) for j in todo), default=1)
    threads = widest * min(parallel, len(todo))
    if threads <= cores:
        return None
    return (f"jobs ask for up to {widest} CPU core(s) each (resources.cpus: their torch threads) and {parallel} run at "
            f"once: {threads} threads on this machine's {cores} core(s), which slows every job; lower resources.cpus "
            f"or --parallel so that resources.cpus x jobs at once <= {cores}")


def variance_components(args) -> tuple[dict | None, str] | None:
    """--variance-from's components, read before anything else (a bad one is one line, exit 2)."""
    if getattr(args, "variance_from", None) is None:
        return None
    if not args.dry_run:
        raise UserError("--variance-from sizes the dry run's minimum detectable differences: it needs --dry-run",
                        fix="add --dry-run, or leave --variance-from out")
    from gendergap.design import variance_source
    return variance_source(args.variance_from)


def print_design(cfg, jobs, states: dict, variance: tuple[dict | None, str] | None) -> None:
    """Each compared task's minimum detectable difference for the config's design (gendergap.design)."""
    from gendergap.design import design_lines
    for line in design_lines(cfg, jobs, states, components=variance):
        print(line)


def run(args) -> int:
    from gendergap import sweep

    if args.schema:
        from gendergap.config import schema_text
        print(schema_text())
        return 0
    variance = variance_components(args)
    cfg, out, jobs = load(args)
    executor = args.executor or cfg.data["executor"]["name"]
    if args.action == "status" or args.dry_run:
        rows = sweep.summary(jobs, out)
        if args.dry_run:
            if executor == "slurm" and not shutil.which("sbatch"):
                print("note: no `sbatch` here; a real run needs a SLURM login node")
            print_plan(jobs, out.resolve(), {r["job"]: r["state"] for r in rows}, executor, cfg.data["executor"],
                       verbose=args.verbose)
            print_design(cfg, jobs, {r["job"]: r["state"] for r in rows}, variance)
            sys.stdout.flush()
            preflight(cfg, jobs, out)
            check_db_folder(out)
            print("inputs checked: no problem found")
            print_cost(jobs, {r["job"]: r["state"] for r in rows}, args.parallel or cfg.data["executor"]["parallel"],
                       executor, profile=args.profile, force=args.force)
            return 0
        counts = {}
        for r in rows:
            counts[r["state"]] = counts.get(r["state"], 0) + 1
            secs = f"{r['seconds']:.0f} s" if r["seconds"] is not None else ""
            print(f"{r['state']:8s} {r['job']:36s} {secs:>7s}  {r['error'] or r['log']}")
        print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
        return 0
    sweep.check_executor(executor)
    preflight(cfg, jobs, out)
    print_cost(jobs, {r["job"]: r["state"] for r in sweep.summary(jobs, out)},
               args.parallel or cfg.data["executor"]["parallel"], executor, profile=args.profile, force=args.force)
    states = sweep.run_sweep(jobs, out, executor=executor, parallel=args.parallel or cfg.data["executor"]["parallel"],
                             retry_failed=args.retry_failed, slurm=cfg.data["executor"])
    bad = [n for n, s in states.items() if s in ("failed", "blocked")]
    if bad:
        print(f"{len(bad)} job(s) failed or blocked: {', '.join(bad)}; see `gendergap sweep status` for logs, "
              "fix, then re-run with --retry-failed")
        return 1
    print(f"all {len(states)} jobs done; report: {out / 'report' / 'report.md'}")
    return 0
