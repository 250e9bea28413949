"""Submit pretraining through submitit: SLURM (multi-node, one task per GPU) or local.

On SLURM every task runs fairseq-hydra-train; fairseq reads its rank, world size and the
master node from the SLURM environment (`distributed_training.distributed_port` > 0 switches
that on). CPU ranks (the cpu profile, gloo) go through `python -m ssl_pretrain.run`, which
works around fairseq's two CUDA-only calls on that path (see ssl_pretrain/run.py). On
preemption or time-out submitit requeues the job (`Checkpointable`) and fairseq resumes from
checkpoint_last.pt. Global rank 0 also runs the watchdog: on a trip it rolls back, journals,
and requeues the job, which restarts with the lower lr recorded in the journal.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import submitit

from corpora.base.atomic import write_text
from corpora.base.errors import UserError
from ssl_pretrain import watchdog as wd
from ssl_pretrain.hardware import BF16_CAVEAT, BatchPlan
from ssl_pretrain.manifest_check import check_manifest_dir
from ssl_pretrain.run import (
    base_lr,
    build_command,
    check_overrides,
    fairseq_env,
    read_log_from,
    recover,
    resume_updates,
    run_pretraining,
    start_fairseq,
    stop,
    watchdog_state,
)

log = logging.getLogger(__name__)


def parse_time_minutes(text: str | int) -> int:
    """A SLURM time limit (minutes, MM:SS, H:MM:SS, D-H, D-H:MM, D-H:MM:SS) in whole minutes."""
    s = str(text).strip()
    days = 0
    if "-" in s:
        d, _, s = s.partition("-")
        if not d.isdigit():
            s = "bad"
        days = int(d) if d.isdigit() else 0
        parts = s.split(":")
        parts = parts + ["0"] * (3 - len(parts))          # D-H[:MM[:SS]]
    else:
        parts = s.split(":")
        parts = {1: ["0", parts[0], "0"], 2: ["0"] + parts, 3: parts}.get(len(parts), ["bad"])
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise UserError(f"cannot read time limit {text!r}",
                        fix="write minutes (4320), H:MM:SS (72:00:00) or D-HH:MM:SS (3-00:00:00)")
    h, m, sec = (int(p) for p in parts)
    return days * 1440 + h * 60 + m + (1 if sec else 0)


@dataclass
class SlurmOptions:
    partition: str | None = None
    time_min: int = 4320
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    cpus_per_task: int | None = None   # None: the hardware profile's (HardwareProfile.cpus_per_task)
    mem_gb: int | None = None
    extra: dict = field(default_factory=dict)

    def submitit_parameters(self, plan: BatchPlan, job_name: str) -> dict:
        """SlurmExecutor parameters: one task per GPU (the cpu profile: its CPU ranks and no GPU
        request, which a cluster without GPUs would refuse)."""
        cpus = self.cpus_per_task or plan.cpus_per_task
        p = {"job_name": job_name, "nodes": plan.nodes, "ntasks_per_node": plan.tasks_per_node,
             "cpus_per_task": cpus, "time": self.time_min, "signal_delay_s": 120,
             # SLURM >= 22.05 no longer passes sbatch's --cpus-per-task down to srun: without
             # this the tasks get one core each and fairseq's data workers share it
             "setup": [f"export SRUN_CPUS_PER_TASK={cpus}"]}
        if plan.gpus_per_node:
            p["gpus_per_node"] = plan.gpus_per_node
        for k in ("partition", "account", "qos", "constraint"):
            if getattr(self, k) is not None:
                p[k] = getattr(self, k)
        if self.mem_gb is not None:
            # SlurmExecutor takes sbatch's own `mem` ("32GB"), not the AutoExecutor's mem_gb
            p["mem"] = f"{self.mem_gb}GB"
        if self.extra:
            p["additional_parameters"] = dict(self.extra)
        return p


class PretrainJob(submitit.helpers.Checkpointable):
    """What each task of the job runs. Requeued as is on time-out / preemption: fairseq's
    own resume (checkpoint_last.pt) and the watchdog journal carry the state."""

    def __init__(self, preset: str, manifest: str, out: str, seed: int | None, overrides: list[str],
                 policy: dict | None, distributed: bool, threads: int | None = None):
        self.preset, self.manifest, self.out = preset, manifest, out
        self.seed, self.overrides, self.policy, self.distributed = seed, overrides, policy, distributed
        self.threads = threads

    def __call__(self) -> dict:
        policy = wd.Policy(**self.policy) if self.policy is not None else None
        if not self.distributed:
            return run_pretraining(self.preset, self.manifest, self.out, self.seed, self.overrides, policy,
                                   threads=self.threads)
        env = submitit.JobEnvironment()
        out = Path(self.out)
        lr, seed, restarts = watchdog_state(out / (policy.journal if policy else "watchdog.jsonl"),
                                                 base_lr(self.preset, self.overrides), self.seed)
        port = 10000 + int(re.sub(r"\D", "", str(env.job_id))[-4:] or 0) % 20000
        extra = [f"distributed_training.distributed_port={port}"] + ([f"optimization.lr=[{lr}]"] if restarts else [])
        cpu_ranks = "common.cpu=true" in self.overrides
        # one hydra dir per rank: each writes its .hydra/config.yaml and hydra_train.log there
        cmd = build_command(self.preset, self.manifest, self.out, seed, self.overrides + extra,
                            hydra_dir=out / "hydra" / f"rank{env.global_rank}", cpu_ranks=cpu_ranks)
        log_path = out / ("train.log" if env.global_rank == 0 else f"train.rank{env.global_rank}.log")
        offset = log_path.stat().st_size if log_path.exists() else 0
        start_updates = resume_updates(out / "train.log")
        proc = start_fairseq(cmd, log_path, fairseq_env(threads=self.threads))
        while proc.poll() is None:
            time.sleep(10)
            if env.global_rank == 0 and policy is not None:
                trip = wd.check(wd.parse_lines(read_log_from(log_path, offset).splitlines()), policy, start_updates)
                if trip is not None:
                    stop(proc)
                    recover(trip, out, lr, restarts, seed, policy)
                    self._requeue(env)
        if proc.returncode != 0:
            raise RuntimeError(f"fairseq exited with code {proc.returncode}; see {log_path}")
        return {"final_updates": resume_updates(out / "train.log"), "lr": lr, "restarts": restarts}

    @staticmethod
    def _requeue(env) -> None:
        # every rank restarts together: requeue the whole job (what submitit does on time-out);
        # the restarted tasks read the lowered lr and seed from the watchdog journal
        subprocess.run(["scontrol", "requeue", str(env.job_id)], check=True)


def submit_command(folder: Path) -> str:
    """The command line submitit's SLURM executor puts in the sbatch script."""
    return f"{shlex.quote(sys.executable)} -u -m submitit.core._submit {shlex.quote(str(folder))}"


def render_sbatch(plan: BatchPlan, slurm: SlurmOptions, folder: Path, job_name: str) -> str:
    """The sbatch script submitit would submit, rendered without submitting (submitit's own renderer)."""
    from submitit.slurm import slurm as sl
    params = slurm.submitit_parameters(plan, job_name)
    job_folder = folder / "%j"  # the same folder launch() gives the executor
    return sl._make_sbatch_string(command=submit_command(job_folder), folder=str(job_folder), **params)


# where a node keeps its own files: a multi-node job writing there splits its checkpoints
# across nodes (rank 0 saves, the others resume from nothing after a requeue)
NODE_LOCAL_DIRS = ("/tmp", "/dev/shm", "/var/tmp", "/scratch/local", "/local", "/localscratch", "/lscratch")


def node_local_root(path: Path) -> str | None:
    """The node-local directory ``path`` lies under ($TMPDIR, $SLURM_TMPDIR, /tmp, ...), or None."""
    roots = list(NODE_LOCAL_DIRS) + [os.environ[v] for v in ("TMPDIR", "SLURM_TMPDIR", "JOBTMP") if os.environ.get(v)]
    path = Path(os.path.abspath(path))
    for root in roots:
        for r in {Path(os.path.abspath(root)), Path(root).resolve()}:
            if path == r or r in path.parents:
                return str(root)
    return None


def launch(preset: str, manifest_dir, out_dir, plan: BatchPlan | None, slurm: SlurmOptions | None = None,
           seed: int | None = None, overrides=(), policy: wd.Policy | None = wd.Policy(),
           executor: str = "slurm", dry_run: bool = False, check_audio: str = "sample",
           threads: int | None = None):
    """Submit (or with ``dry_run`` only describe) a pretraining job.

    executor "slurm": ``plan`` sets nodes / GPUs / batch (the ``cpu`` profile: CPU ranks, gloo);
    a multi-node plan refuses a node-local ``out_dir`` (/tmp, /dev/shm, $TMPDIR, ...);
    "local": one local process (CPU or local GPUs), same job object, for testing the submit
    path. ``threads`` caps torch's CPU threads in the job (OMP_NUM_THREADS). Returns the
    submitit job, or the dry-run text.
    """
    if plan is not None and plan.nodes > 1 and executor == "slurm":
        local = node_local_root(out_dir)
        if local is not None:
            raise UserError(f"--out {out_dir} is under {local}, which each node has its own copy of; a "
                            f"{plan.nodes}-node job needs one shared output dir",
                            fix="give --out on a shared file system (e.g. $WORK or $SCRATCH)")
    out_dir = Path(out_dir).resolve()
    overrides = check_overrides(overrides)
    folder = out_dir / "submitit"
    # one task per GPU under SLURM; a local run lets fairseq spawn its own per-GPU processes
    distributed = executor == "slurm" and plan is not None and plan.world_size > 1
    all_overrides = (plan.overrides() if plan else []) + overrides
    job_name = f"w2v2-{Path(preset).stem}-{out_dir.name}"
    if dry_run:
        cmd = build_command(preset, manifest_dir, out_dir, seed, all_overrides
                            + (["distributed_training.distributed_port=<10000 + job id % 20000>"]
                               if distributed else []),
                            hydra_dir=(out_dir / "hydra" / "rank<global rank>") if distributed else None,
                            cpu_ranks=distributed and plan.cpu)
        return _dry_run_text(cmd, plan, slurm, executor=executor, folder=folder, job_name=job_name)
    check_manifest_dir(manifest_dir, check_audio=check_audio)
    job = PretrainJob(str(preset), str(Path(manifest_dir).resolve()), str(out_dir), seed, all_overrides,
                      policy.as_dict() if policy else None, distributed, threads)
    ex = _executor(executor, plan, slurm, folder=folder, job_name=job_name)
    submitted = ex.submit(job)
    write_text(out_dir / "job_id.txt", f"{submitted.job_id}\n")
    log.info("submitted %s job %s (logs: %s)", executor, submitted.job_id, folder)
    return submitted


def _dry_run_text(cmd: list[str], plan: BatchPlan | None, slurm: SlurmOptions | None, *, executor: str,
                  folder: Path, job_name: str) -> str:
    """What a dry run prints: the plan, the sbatch script (SLURM) and the fairseq command."""
    parts = []
    if plan:
        parts.append("# " + plan.describe())
        if plan.bf16:
            parts.append("# bf16 caveat: " + BF16_CAVEAT)
    if executor == "slurm":
        parts += ["# ---- sbatch script (submitit) ----",
                  render_sbatch(plan, slurm or SlurmOptions(), folder, job_name)]
    parts += ["# ---- fairseq command (each task) ----", shlex.join(cmd)]
    return "\n".join(parts) + "\n"


def _executor(executor: str, plan: BatchPlan | None, slurm: SlurmOptions | None, *, folder: Path, job_name: str):
    """The submitit executor a launch submits to: one local process, or SLURM with the plan's resources."""
    if executor == "local":
        ex = submitit.LocalExecutor(folder=folder / "%j")
        ex.update_parameters(timeout_min=(slurm.time_min if slurm else 60), tasks_per_node=1, nodes=1)
        return ex
    if executor == "slurm":
        if plan is None:
            raise UserError("a SLURM launch needs a hardware plan",
                            fix="pass --hardware (a GPU profile with --nodes, --gpus-per-node, or cpu)")
        try:
            ex = submitit.SlurmExecutor(folder=folder / "%j", max_num_timeout=20)
        except RuntimeError as e:
            raise UserError(f"cannot submit to SLURM here: {e}",
                            fix="run on a SLURM login node, or use --dry-run / --executor local") from None
        ex.update_parameters(**(slurm or SlurmOptions()).submitit_parameters(plan, job_name))
        return ex
    raise UserError(f"unknown executor {executor!r}", fix="use slurm or local")
