"""ASR fine-tuning in several processes: torchrun + SpeechBrain's DDP over gloo, on the CPU.

The acceptance check: 2 ranks x 1 batch per step must train like 1 rank accumulating 2
batches per step (``--grad-accum 2``). Both runs see the same batches in the same pairs
(SpeechBrain's DistributedSamplerWrapper deals the length-bucketed batches out: rank r takes
batches r, r+2, ...; one rank accumulates batches 2k and 2k+1), start from the same weights and
seed, and DDP averages the two ranks' gradients where accumulation sums the halves. So the
numbers agree up to float rounding, not just statistically -- provided there is no dropout:
each rank draws its own dropout masks, one process draws them in sequence, and the masks would
differ (so the tiny model here has dropout 0).

Tolerance: 1e-5 relative on losses, 1e-5 absolute on weights after 3 Adam steps. The only
difference left is the order of float additions ((g0 + g1) / 2 in the all-reduce against
g0 / 2 + g1 / 2 accumulated), ~1e-7 relative per gradient in fp32, which Adam's normalised
steps (lr 5e-3 and 1e-3) cannot grow past ~1e-6 in 3 steps. Measured on this machine: the
weights were bit-identical and the losses agreed to 1e-15. With the default head dropout
(0.15) instead, 4 steps differed by 0.16 % in training loss and 7e-3 in the largest weight:
that is the masks, not the batching.
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)

pytestmark = pytest.mark.usefixtures("one_thread")
REPO = Path(__file__).resolve().parents[1]
STEPS = 3
# 1.5 padded seconds per batch: 2 of these 0.3-0.7 s utterances, 16 of them -> >= 6 batches an
# epoch, so the 3 steps of 2 batches stay inside the first epoch (no odd batch at an epoch end)
# freeze_encoder_steps=1: the encoder's parameters stop and start getting gradients under DDP
OVERRIDES = ["batch_seconds=1.5", "valid_batch_seconds=6", f"max_steps={STEPS}", "head_dropout=0.0",
             "lr_head=5e-3", "lr_wav2vec=1e-3", "freeze_encoder_steps=1"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("asr-ddp")
    return {"ssl": tiny_wav2vec2(root / "w2v", dropout=0.0),
            **write_corpus(root / "data", {"train": 16, "valid": 2, "test": 4})}


def _torchrun(nproc: int) -> list[str]:
    """The venv's torchrun (the same entry point as `python -m torch.distributed.run`)."""
    exe = Path(sys.executable).with_name("torchrun")
    launcher = [str(exe)] if exe.is_file() else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--standalone", "--nproc_per_node", str(nproc)]


def _finetune_args(data, out: Path, *extra: str) -> list[str]:
    return ["-m", "gendergap.cli", "asr", "finetune", "--ckpt", str(data["ssl"]), "--train", str(data["train"]),
            "--valid", str(data["valid"]), "--out", str(out), "--device", "cpu", "--no-progress", *extra,
            *OVERRIDES]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _one_rank_with_grad_accum(data, out: Path) -> None:
    from gendergap.cli import main
    assert main(_finetune_args(data, out, "--grad-accum", "2")[2:]) == 0


def _weights(out: Path) -> dict:
    """The module weights of the run's (only) checkpoint."""
    (ckpt,) = sorted((out / "save").glob("CKPT*"))
    return {f"{m}.{k}": v for m in ("wav2vec2", "head")
            for k, v in torch.load(ckpt / f"{m}.ckpt", map_location="cpu", weights_only=True).items()}


def _assert_same_training(one: Path, two: Path) -> None:
    a, b = (json.loads((d / "train_summary.json").read_text()) for d in (one, two))
    assert a["optimizer_step"] == b["optimizer_step"] == STEPS
    assert (a["world_size"], a["grad_accum"]) == (1, 2) and (b["world_size"], b["grad_accum"]) == (2, 1)
    assert a["global_batch_seconds"] == b["global_batch_seconds"] == 3.0  # 1.5 s x 2, either way
    assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
    assert b["valid"]["loss"] == pytest.approx(a["valid"]["loss"], rel=1e-5)
    wa, wb = _weights(one), _weights(two)
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-5, msg=k)


@pytest.mark.slurm
@pytest.mark.slow  # ~20 s of work, plus however long the shared one-node queue makes the job wait
def test_two_ranks_on_slurm_train_like_one_rank_accumulating_two_batches(slurm_cluster, data, tmp_path):
    """An sbatch job runs torchrun with 2 gloo ranks on the node; the same command with
    --grad-accum 2 in one process gives the same losses and weights."""
    two = tmp_path / "two-ranks"
    script = tmp_path / "job.sh"
    command = " ".join(_torchrun(2) + _finetune_args(data, two))
    # one CPU asked for: the node is shared with other tests' jobs, and these ranks are tiny
    script.write_text("#!/bin/bash\n"
                      f"#SBATCH --partition={slurm_cluster.partition}\n#SBATCH --ntasks=1\n#SBATCH --cpus-per-task=1\n"
                      f"#SBATCH --mem=2G\n#SBATCH --time=10\n#SBATCH --output={tmp_path}/job-%j.out\n"
                      f"#SBATCH --chdir={REPO}\nset -e\nexport OMP_NUM_THREADS=1 PYTHONPATH={REPO}\n"
                      f"echo SLURM_JOB_ID=$SLURM_JOB_ID\n{command}\n")
    sub = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30,
                         env=_env())
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    one = tmp_path / "one-rank"
    _one_rank_with_grad_accum(data, one)  # meanwhile, here
    state = slurm_cluster.wait_for_jobs([job_id], timeout_s=480)[job_id]
    log = (tmp_path / f"job-{job_id}.out").read_text(errors="replace")
    assert state == "COMPLETED", f"job {job_id} {state}: {log[-3000:]}"
    assert f"SLURM_JOB_ID={job_id}" in log and "[rank1]" in log  # two ranks ran inside the job
    _assert_same_training(one, two)


def test_two_ranks_locally_rank0_alone_writes_decodes_and_stores(data, tmp_path):
    """Plain torchrun (no SLURM): the CLI end to end with --test and --db. Both ranks exit 0;
    the run directory, hypotheses and the results DB are written once, by rank 0."""
    two, db = tmp_path / "two-ranks", tmp_path / "results.db"
    proc = subprocess.run([*_torchrun(2), *_finetune_args(data, two, "--test", str(data["test"]), "--db", str(db),
                                                             "--bootstrap", "0")],
                          capture_output=True, text=True, timeout=480, env=_env(), cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]  # torchrun fails if any rank does
    assert proc.stdout.count("trained to optimizer step 3") == 1  # rank 0 reports, rank 1 just exits
    run = json.loads((two / "run.json").read_text())
    assert run["ckpt_name"] and run["runtime"]["device"] == "cpu"
    summary = json.loads((two / "train_summary.json").read_text())
    assert (summary["world_size"], summary["grad_accum"], summary["optimizer_step"]) == (2, 1, STEPS)
    hyps = (two / "test.hyp.tsv").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 4
    with sqlite3.connect(db) as con:
        (n_runs,) = con.execute("SELECT COUNT(*) FROM runs").fetchone()
        (config,) = con.execute("SELECT config FROM runs").fetchone()
    assert n_runs == 1
    assert json.loads(config)["world_size"] == 2 and json.loads(config)["global_batch_seconds"] == 3.0
    # the same numbers as one process accumulating two batches
    _one_rank_with_grad_accum(data, tmp_path / "one-rank")
    _assert_same_training(tmp_path / "one-rank", two)
