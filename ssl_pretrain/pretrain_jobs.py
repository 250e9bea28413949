"""A pretraining job from `gendergap pretrain run|launch`'s options: run here under the watchdog
(ssl_pretrain.run), optionally warm-started, or submitted through submitit (ssl_pretrain.launch)."""
from __future__ import annotations

from corpora.base.errors import UserError
from ssl_pretrain.hardware import PROFILES, plan_batch
from ssl_pretrain.watchdog import Policy


def watchdog_policy(*, no_watchdog: bool = False, lr_factor: float = 0.5, max_restarts: int = 3,
                    stuck_window: int = 0) -> Policy | None:
    """The watchdog's policy, or None to run fairseq without it."""
    if no_watchdog:
        return None
    return Policy(lr_factor=lr_factor, max_restarts=max_restarts, stuck_window=stuck_window)


def pretrain_here(*, preset: str, manifest: str, out: str, seed: int | None = None, overrides=(),
                  init_from: str | None = None, registry: str | None = None, trust_checkpoint: bool = False,
                  check_audio: str = "sample", threads: int | None = None, no_watchdog: bool = False,
                  lr_factor: float = 0.5, max_restarts: int = 3, stuck_window: int = 0) -> tuple[dict, str]:
    """Pretrain (or resume) on this machine, from ``init_from``'s weights when given: the run's
    summary, and in words the checkpoint to register (or why there is none yet)."""
    from ssl_pretrain.registry import run_checkpoint
    from ssl_pretrain.run import check_overrides, run_pretraining, warm_start

    # before init.pt is written: an override naming code or a checkpoint needs --trust-checkpoint
    overrides = check_overrides(overrides, trust=trust_checkpoint)
    if init_from:
        from ssl_pretrain.checkpoints import CheckpointRef
        ref = CheckpointRef.resolve(init_from, registry, trust=trust_checkpoint)
        overrides += warm_start(ref.fairseq_state(), out, source=init_from)
    policy = watchdog_policy(no_watchdog=no_watchdog, lr_factor=lr_factor, max_restarts=max_restarts,
                             stuck_window=stuck_window)
    summary = run_pretraining(preset, manifest, out, seed=seed, overrides=overrides, policy=policy,
                              check_audio=check_audio, threads=threads, trust=trust_checkpoint)
    try:
        wrote = f"the checkpoint to register: {run_checkpoint(out)[1]} (`gendergap ckpt add NAME {out}` picks it)"
    except UserError:
        wrote = "no checkpoint written (fairseq saves at checkpoint.save_interval_updates and at the end of an epoch)"
    return summary, wrote


def submit(*, preset: str, manifest: str, out: str, hardware: str | None = None, nodes: int = 1,
           gpus_per_node: int | None = None, tasks_per_node: int | None = None, bf16: bool = False,
           partition: str | None = None, time: str = "4320", account: str | None = None, qos: str | None = None,
           constraint: str | None = None, cpus_per_task: int | None = None, mem_gb: int | None = None,
           executor: str = "slurm", dry_run: bool = False, seed: int | None = None, overrides=(),
           check_audio: str = "sample", threads: int | None = None, no_watchdog: bool = False,
           lr_factor: float = 0.5, max_restarts: int = 3, stuck_window: int = 0):
    """Submit the job (ssl_pretrain.launch.launch): the submitit job, or with ``dry_run`` the
    sbatch script and fairseq command it would submit."""
    from ssl_pretrain.launch import SlurmOptions, launch, parse_time_minutes

    plan = None
    if executor == "slurm" and not hardware:
        # the profile sets max_tokens, precision and update_freq: guessing a GPU type would
        # silently change the batch (and a cluster without that GPU would refuse the job)
        raise UserError("--executor slurm needs --hardware",
                        fix=f"pass --hardware {' / '.join(PROFILES)} (cpu: one CPU task, no GPU)")
    if hardware:
        plan = plan_batch(preset, hardware, nodes, gpus_per_node, tasks_per_node, bf16=bf16)
    elif bf16 or tasks_per_node:
        raise UserError("--bf16 / --tasks-per-node need --hardware", fix="pass --hardware a100-80g (or cpu)")
    slurm = SlurmOptions(partition=partition, time_min=parse_time_minutes(time), account=account, qos=qos,
                         constraint=constraint, cpus_per_task=cpus_per_task, mem_gb=mem_gb)
    policy = watchdog_policy(no_watchdog=no_watchdog, lr_factor=lr_factor, max_restarts=max_restarts,
                             stuck_window=stuck_window)
    return launch(preset, manifest, out, plan, slurm, seed=seed, overrides=overrides, policy=policy,
                  executor=executor, dry_run=dry_run, check_audio=check_audio, threads=threads)
