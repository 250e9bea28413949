"""Where an ST job's fairseq-train spends its time: the model's arithmetic against fairseq's own work.

benchmarks/profile_study_stages.py times an ST job's fairseq-train process as one block (it runs in
a process of its own). This script opens it: it takes a finished ST run directory (``st.json``
records the exact fairseq-train command), runs that command again under cProfile through the
project's fairseq entry (ssl_pretrain.fairseq_entry, as the job does: safe loading, batch-invariant
subsampler, subnormals flushed) with one torch thread, into a scratch folder (the run directory is
read, never written; its st.json is data: the command is built again from its preset's flags, each
name and value checked against downstream_st/fairseq_flags.py FLAGS as `st train` checks them), optionally
with fewer updates (``--updates``), and prints where the time went:

  imports, the update steps, and inside them the forward (criterion and model), the backward,
  the optimizer, gradient clipping, re-seeding, zero_grad; the validations; the rest.

Run (idle machine), e.g. on a study's first ST job:
  .venv/bin/python benchmarks/profile_st_train.py --run STUDY/st/B-tiny.fr-en/seed0
"""
from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

# (label, pstats key "path:function" whose cumulative time is the part); the first three are not
# nested in each other, the update step's parts are inside "update steps"
PARTS = [
    ("imports", "<frozen importlib._bootstrap>:_find_and_load", 0),
    ("update steps", "fairseq/trainer.py:train_step", 0),
    ("forward (loss)", "fairseq/tasks/fairseq_task.py:train_step", 1),   # minus the backward, below
    ("backward", "fairseq/optim/fairseq_optimizer.py:backward", 1),
    ("optimizer step", "fairseq/tasks/fairseq_task.py:optimizer_step", 1),
    ("gradient clipping", "fairseq/trainer.py:clip_grad_norm", 1),
    ("re-seeding", "fairseq/trainer.py:_set_seed", 1),
    ("zero_grad", "fairseq/trainer.py:zero_grad", 1),
    ("validation and saving", "fairseq_cli/train.py:validate_and_save", 0),
]
# inside the forward: the kernels that carry its arithmetic
KERNELS = [("linear layers", "{built-in method torch._C._nn.linear}"),
           ("conv1d (the subsampler)", "{built-in method torch.conv1d}"),
           ("attention", "{built-in method torch._C._nn.scaled_dot_product_attention}")]


def cumulative(stats: pstats.Stats, key: str) -> float:
    path, _, name = key.rpartition(":")
    if key.startswith("{"):
        # pstats prints a built-in ("~", 0, "<built-in method x>") as {built-in method x}
        return sum(v[3] for (f, _, n), v in stats.stats.items() if f == "~" and n == f"<{key[1:-1]}>")
    return sum(v[3] for (f, _, n), v in stats.stats.items() if f.endswith(path) and n == name)


def command(run_dir: Path, scratch: Path, updates: int) -> list[str]:
    """The run's fairseq-train command, built again the way `st train` builds it (its preset's flags,
    names and values through FLAGS; st.json read and checked by read_model_meta), saving into ``scratch``,
    under cProfile through the project's fairseq entry."""
    from downstream_st.presets import validation_start
    from downstream_st.train import build_train_command, read_model_meta

    preset = read_model_meta(run_dir)["preset"]
    if updates:
        preset["train"]["max-update"] = updates
    flags = dict(preset["train"])
    if validation_start(preset) is not None:
        flags["validate-after-updates"] = validation_start(preset)
    cmd = build_train_command(run_dir / "data", scratch / "checkpoints", flags, source=run_dir / "st.json")
    module = cmd.index("-m")
    return [sys.executable, "-m", "cProfile", "-o", str(scratch / "train.prof"),
            "-m", "ssl_pretrain.fairseq_entry", *cmd[module + 1:]]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", required=True, type=Path, help="a finished ST run directory (holds st.json)")
    p.add_argument("--updates", type=int, default=0, help="train N updates instead of the run's (0: the run's)")
    p.add_argument("--dump", type=Path, help="keep the .prof file here")
    args = p.parse_args()
    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    from corpora.base.errors import UserError
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        try:
            cmd = command(args.run, scratch, args.updates)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        with open(scratch / "train.log", "w") as log:   # the run's data dir holds config.yaml
            subprocess.run(cmd, cwd=args.run, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
        stats = pstats.Stats(str(scratch / "train.prof"))
        if args.dump:
            args.dump.parent.mkdir(parents=True, exist_ok=True)
            os.replace(scratch / "train.prof", args.dump)
    total = stats.total_tt
    parts = {label: cumulative(stats, key) for label, key, _ in PARTS}
    parts["forward (loss)"] -= parts["backward"]   # the task's train_step holds the backward
    updates = args.updates or "the run directory's"
    print(f"fairseq-train, {updates} updates, under cProfile (adds ~10 %): {total:.1f} s")
    inner = sum(parts[label] for label, _, depth in PARTS if depth)
    for label, _, depth in PARTS:
        print(f"   {'  ' * depth}{label:<24} {parts[label]:7.1f} s")
        if label == "zero_grad":
            print(f"     {'the rest of the step':<24} {parts['update steps'] - inner:7.1f} s")
    print(f"   {'other':<24} {total - sum(parts[label] for label, _, depth in PARTS if not depth):7.1f} s")
    print("   the forward's kernels (inside forward; the backward's run in autograd's engine):")
    for label, key in KERNELS:
        print(f"     {label:<24} {cumulative(stats, key):7.1f} s")


if __name__ == "__main__":
    main()
