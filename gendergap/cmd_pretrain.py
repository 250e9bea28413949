"""`gendergap pretrain run|launch|plan`: thin wiring over ssl_pretrain.pretrain_jobs / hardware."""
from __future__ import annotations

import argparse
import json

from gendergap.options import add_trust_option, options_of, out_dir
from ssl_pretrain.hardware import BF16_CAVEAT, measure_batches, plan_batch
from ssl_pretrain.pretrain_jobs import pretrain_here, submit

RUN_EPILOG = """\
Runs fairseq-hydra-train here (CPU, or the local GPUs with common.cpu=false) under the
watchdog; output: OUT/checkpoints/, OUT/train.log, OUT/watchdog.jsonl, OUT/run.json.
Running the same command again resumes from OUT/checkpoints/checkpoint_last.pt.
examples:
  gendergap pretrain run --preset tiny --manifest m/F --out runs/ssl/F --seed 1
  gendergap pretrain run --preset tiny --manifest m/F --out runs/ssl/F optimization.max_update=1000
  # continue the shipped female checkpoint by 5,000 updates (warm start, fresh schedule):
  gendergap pretrain run --preset tiny --manifest m/F --out runs/ssl/F-more --seed 1 \\
      --init-from ssl_pretrain/shipped/tiny-female.safetensors optimization.max_update=5000
  gendergap pretrain run --preset base --manifest m/B --out runs/ssl/B common.cpu=false \\
      distributed_training.distributed_world_size=1 optimization.update_freq=[64]
The manifest dir holds train.tsv (and valid.tsv) in fairseq's wav2vec format:
root dir on line 1, then relpath<TAB>num_samples.
Overrides that make fairseq import code or load a file as a checkpoint (common.user_dir,
checkpoint.restore_file, checkpoint.finetune_from_model, model.w2v_path, hydra.*, *._target_)
are refused unless --trust-checkpoint; every checkpoint fairseq will load (checkpoint_last.pt on
resume, init.pt) is read with the safe loader before it starts. --init-from always wins: OUT/init.pt
is rewritten for other weights (OUT/init.json records which), or refused once the run has
checkpoints trained from the old ones.
"""

LAUNCH_EPILOG = """\
Submits through submitit: one task per GPU, fairseq's distributed init from the SLURM
environment, requeue on preemption / time-out (resumes from checkpoint_last.pt).
Each rank runs the recipe's per-GPU batch (max_tokens and the batch_size crop cap) and
update_freq makes world x update_freq the recipe's (large: 128 GPUs x 1.2M samples, <= 4 crops).
Precision: fp16 as in the recipes; --bf16 on the A100 hardware profiles (the dry run prints fairseq's caveat).
--cpus-per-task defaults to the hardware profile's (v100-32g 10, a100-* 8, cpu 1) and is exported to
srun as SRUN_CPUS_PER_TASK. A multi-node job needs --out on a shared file system: /tmp,
/dev/shm, /var/tmp, $TMPDIR and other node-local dirs are refused. There are no setup lines: the job
inherits the environment of the shell this command runs in (module loads, exports; sbatch's default).
OUT gets job_id.txt, train.log (rank 0's fairseq log; train.rank<N>.log: the other ranks),
watchdog.jsonl, checkpoints/ and submitit/<job id>/ (each task's stdout and stderr). fairseq writes
checkpoint_last.pt at the end of every epoch and every checkpoint.save_interval_updates (large and base:
25,000), so a requeue repeats the updates since. docs/pretraining.md: a SLURM walk-through.
examples:
  # the study's setting: 16 V100-32GB (2 nodes x 8) -> update_freq 8; look first:
  gendergap pretrain launch --preset large --hardware v100-32g --nodes 2 --gpus-per-node 8 \\
      --partition gpu_p2 --time 20:00:00 --account abc@v100 --manifest m/F --out runs/ssl/F-large \\
      optimization.max_update=125000 lr_scheduler.total_num_update=200000 --dry-run
    # (the study's F/M models: a 200,000-update schedule stopped at 125,000, footnote 4)
  # the same job through submitit's local executor (tests, a workstation):
  gendergap pretrain launch --preset tiny --executor local --manifest m/F --out runs/ssl/F
  # a SLURM cluster without GPUs (e.g. the tests' one-node cluster): 2 CPU ranks (gloo)
  gendergap pretrain launch --preset tiny --hardware cpu --tasks-per-node 2 --threads 1 \\
      --partition local --time 10 --manifest m/F --out runs/ssl/F --wait
"""

PLAN_EPILOG = """\
"samples/update" and "crops/update" are the most one update can hold (every rank batch full);
with --manifest they are measured: fairseq's own batch sampler (FileAudioDataset.batch_by_size,
crops to task.max_sample_size) runs on the manifest's lengths.
examples:
  gendergap pretrain plan --preset large --hardware a100-80g --nodes 1 --gpus-per-node 8
  gendergap pretrain plan --preset large --hardware v100-32g --nodes 2 --gpus-per-node 8 --manifest m/F
"""

# the hardware profiles of ssl_pretrain/hardware.py (PROFILES), named here so building the parser
# imports nothing heavy; tests/test_ssl_launch.py keeps the two in step
PROFILE_NAMES = ("v100-32g", "a100-40g", "a100-80g", "cpu")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="tiny", help="large, base, tiny, or a fairseq hydra yaml file (default tiny)")
    p.add_argument("--manifest", required=True, help="dir with train.tsv (and valid.tsv), fairseq wav2vec format")
    p.add_argument("--out", type=out_dir("--out"), required=True,
                   help="output dir (checkpoints, log, watchdog journal)")
    p.add_argument("--seed", type=int, default=None, help="fairseq common.seed (default: the preset's)")
    p.add_argument("--check-audio", choices=("sample", "all", "none"), default="sample",
                   help="read audio headers of 200 sampled files (default), of all, or none")
    p.add_argument("--no-watchdog", action="store_true", help="run fairseq without the watchdog")
    p.add_argument("--lr-factor", type=float, default=0.5, help="watchdog: lr multiplier on each rollback (0.5)")
    p.add_argument("--max-restarts", type=int, default=3, help="watchdog: rollbacks before giving up (3)")
    p.add_argument("--stuck-window", type=int, default=0,
                   help="watchdog: log lines without loss improvement that count as stuck (0 = off)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch in fairseq (OMP_NUM_THREADS); 1 is fastest on a busy shared CPU")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="fairseq hydra overrides")


def run_local(args) -> int:
    summary, wrote = pretrain_here(**options_of(pretrain_here, args))
    print(f"done: {summary['final_updates']} updates, checkpoints in {args.out}/checkpoints "
          f"(lr {summary['lr']:g}, {summary['restarts']} watchdog restarts); {wrote}")
    return 0


def run_launch(args) -> int:
    result = submit(**options_of(submit, args))
    if args.dry_run:
        print(result, end="")
        return 0
    print(f"submitted job {result.job_id} ({args.executor}); logs in {args.out}/submitit, "
          f"training log {args.out}/train.log")
    if args.wait:
        out = result.result()
        print(f"done: {json.dumps({k: out[k] for k in ('final_updates', 'lr', 'restarts') if k in out})}")
    return 0


def run_plan(args) -> int:
    plan = plan_batch(args.preset, args.hardware, args.nodes, args.gpus_per_node, args.tasks_per_node,
                      bf16=args.bf16)
    print(plan.describe())
    if args.manifest:
        m = measure_batches(plan, args.preset, args.manifest)
        print(f"measured on {args.manifest} (fairseq's batch sampler, {m['batches']} batches): "
              f"{m['crops_per_update']:.1f} crops/update, {m['samples_per_update']:,.0f} samples/update "
              f"({m['audio_s_per_update']:.0f} s of audio)")
    if plan.bf16:
        print("bf16 caveat: " + BF16_CAVEAT)
    print(" ".join(plan.overrides()))
    return 0


def _add_layout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nodes", type=int, default=1, help="nodes (default 1)")
    p.add_argument("--gpus-per-node", type=int, default=None,
                   help="GPUs per node = tasks per node (default 8; not with the cpu hardware profile)")
    p.add_argument("--tasks-per-node", type=int, default=None,
                   help="cpu hardware profile: CPU ranks on the node, one SLURM task each, gloo (default 1); "
                        "GPU hardware profiles: always one task per GPU")
    p.add_argument("--bf16", action="store_true",
                   help="bf16 instead of fp16 (A100 hardware profiles; fairseq's bf16 is not mixed precision: "
                        "see the caveat printed)")


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description=help)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    r = sub.add_parser("run", help="pretrain here (subprocess), resumable, under the watchdog",
                       description="Pretrain wav2vec 2.0 with fairseq on this machine.", epilog=RUN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(r)
    r.add_argument("--init-from", default=None, metavar="CKPT",
                   help="start from this checkpoint's weights (a registered name, a .pt or a packed .safetensors "
                        "release) with a fresh optimizer, schedule and data order: continue a shipped checkpoint "
                        "with optimization.max_update=N more updates. A rerun resumes from checkpoint_last.pt")
    r.add_argument("--registry", default=None, help="checkpoint registry JSON for --init-from NAME")
    add_trust_option(r)
    r.set_defaults(func=run_local)

    la = sub.add_parser("launch", help="submit to SLURM (or submitit's local executor)",
                        description="Submit wav2vec 2.0 pretraining through submitit.", epilog=LAUNCH_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(la)
    la.add_argument("--hardware", choices=PROFILE_NAMES,
                    help="hardware profile: a GPU's precision and CPUs per task; cpu: CPU ranks, no GPU "
                         "(required for --executor slurm)")
    _add_layout(la)
    la.add_argument("--partition", help="SLURM partition")
    la.add_argument("--time", default="4320", help="time limit: minutes, H:MM:SS or D-HH:MM:SS (default 3 days)")
    la.add_argument("--account", help="SLURM account")
    la.add_argument("--qos", help="SLURM quality of service")
    la.add_argument("--constraint", help="SLURM node constraint, e.g. v100-32g")
    la.add_argument("--cpus-per-task", type=int, default=None,
                    help="CPUs per task (data loading; default: the hardware profile's, v100-32g 10, a100-* 8, cpu 1)")
    la.add_argument("--mem-gb", type=int, default=None, help="memory per node in GB (default: SLURM's)")
    la.add_argument("--executor", choices=("slurm", "local"), default="slurm",
                    help="slurm (default) or submitit's local executor")
    la.add_argument("--dry-run", action="store_true",
                    help="print the sbatch script and fairseq command; submit nothing")
    la.add_argument("--wait", action="store_true", help="wait for the job and print its result")
    la.set_defaults(func=run_launch)

    pl = sub.add_parser("plan", help="print update_freq / max_tokens / samples per update for a preset on given GPUs",
                        description="How a preset's batch is laid out on the GPUs at hand.", epilog=PLAN_EPILOG,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    pl.add_argument("--preset", default="large", help="large, base, tiny, or a fairseq hydra yaml file (default large)")
    pl.add_argument("--hardware", required=True, choices=PROFILE_NAMES)
    _add_layout(pl)
    pl.add_argument("--manifest", default=None,
                    help="measure crops and samples per update on this manifest (dir with train.tsv, or a .tsv)")
    pl.set_defaults(func=run_plan)
