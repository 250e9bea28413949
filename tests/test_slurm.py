"""Real SLURM: jobs go through sbatch to the one-node cluster on localhost (scripts/slurm/).

Skipped, with the reason, when that cluster is not up (see tests/slurm_helpers.py).
"""
from __future__ import annotations

import pickle
import sys

import pytest

from gendergap.cli import main
from ssl_helpers import write_manifest, write_wavs
from ssl_pretrain.run import resume_updates

pytestmark = pytest.mark.slurm


def test_job_array_through_submitit(slurm_cluster, tmp_path):
    """map_array -> one sbatch --array job; each element runs with the venv's python, sees its
    own SLURM_ARRAY_TASK_ID, and a raising element ends FAILED with its error returned."""
    def work(x: int) -> dict:  # a local function: cloudpickle ships it by value to the job
        import os
        import sys as job_sys
        if x < 0:
            raise ValueError(f"element {x} fails on purpose")
        return {"square": x * x, "task": int(os.environ["SLURM_ARRAY_TASK_ID"]),
                "array": os.environ["SLURM_ARRAY_JOB_ID"], "python": job_sys.executable}

    ex = slurm_cluster.executor(tmp_path / "logs", timeout_min=5, name="gg-array-test")
    jobs = ex.map_array(work, [1, 2, 3, -1])
    array_id = jobs[0].job_id.split("_")[0]
    assert [j.job_id for j in jobs] == [f"{array_id}_{i}" for i in range(4)]
    states = slurm_cluster.wait_for_jobs([j.job_id for j in jobs], timeout_s=300)
    assert [states[j.job_id] for j in jobs] == ["COMPLETED"] * 3 + ["FAILED"], states
    results = [j.result() for j in jobs[:3]]
    assert [r["square"] for r in results] == [1, 4, 9]
    assert [r["task"] for r in results] == [0, 1, 2]
    assert {r["array"] for r in results} == {array_id}
    assert {r["python"] for r in results} == {sys.executable}  # the venv's, not the system's
    with pytest.raises(Exception, match="element -1 fails on purpose"):
        jobs[3].result()


@pytest.mark.slow
def test_pretrain_launch_runs_on_slurm(slurm_cluster, tmp_path, monkeypatch, capsys):
    """`gendergap pretrain launch --executor slurm --hardware cpu`: a real sbatch job trains a
    tiny wav2vec 2.0 for 4 updates; checkpoint and train log are where the job left them."""
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=8), tmp_path / "m")
    out = tmp_path / "out"
    assert main(["pretrain", "launch", "--preset", "tiny", "--hardware", "cpu", "--executor", "slurm",
                 "--partition", slurm_cluster.partition, "--cpus-per-task", "1", "--threads", "1",
                 "--mem-gb", "2", "--time", "15", "--seed", "2", "--manifest", str(manifest), "--out", str(out),
                 "optimization.max_update=4", "checkpoint.save_interval_updates=2"]) == 0
    job_id = (out / "job_id.txt").read_text().strip()
    assert f"submitted job {job_id} (slurm)" in capsys.readouterr().out
    state = slurm_cluster.wait_for_jobs([job_id], timeout_s=480)[job_id]
    stderr = sorted((out / "submitit").glob(f"{job_id}/*.err"))
    assert state == "COMPLETED", f"job {job_id} {state}: " + (stderr[0].read_text()[-2000:] if stderr else "no log")
    # what the job returned (submitit's result pickle) and what fairseq wrote
    outcome, result = pickle.loads((out / "submitit" / job_id / f"{job_id}_0_result.pkl").read_bytes())
    assert outcome == "success" and result["final_updates"] == 4 and result["restarts"] == 0
    assert resume_updates(out / "train.log") == 4
    assert (out / "checkpoints" / "checkpoint_last.pt").is_file()
    # the sbatch script asked for one CPU task and no GPU (the node has none)
    script = (out / "submitit" / job_id / f"{job_id}_submission.sh").read_text()
    assert "--ntasks-per-node=1" in script and "--cpus-per-task=1" in script and "gpus" not in script


@pytest.mark.slow
def test_pretrain_launch_two_cpu_ranks_on_slurm(slurm_cluster, tmp_path, capsys):
    """`pretrain launch --hardware cpu --tasks-per-node 2`: one sbatch job, 2 SLURM tasks, each a
    fairseq rank (rank and world size from SLURM, gloo). They train the tiny preset for 4 updates
    as one data-parallel run; rank 0 writes the checkpoints; every task exits 0."""
    root = tmp_path / "audio"
    # enough utterances that each rank gets its own batches (max_tokens 60000: ~3 utterances each)
    manifest = write_manifest(root, write_wavs(root, n=40), tmp_path / "m", n_valid=8)
    out = tmp_path / "out"
    assert main(["pretrain", "launch", "--preset", "tiny", "--hardware", "cpu", "--tasks-per-node", "2",
                 "--executor", "slurm", "--partition", slurm_cluster.partition, "--threads", "1",
                 "--mem-gb", "4", "--time", "15", "--seed", "2", "--manifest", str(manifest), "--out", str(out),
                 "optimization.max_update=4", "checkpoint.save_interval_updates=2", "dataset.max_tokens=60000",
                 "common.log_interval=1"]) == 0
    job_id = (out / "job_id.txt").read_text().strip()
    state = slurm_cluster.wait_for_jobs([job_id], timeout_s=480)[job_id]
    logs = sorted((out / "submitit" / job_id).glob("*.err")) + sorted(out.glob("train*.log"))
    assert state == "COMPLETED", f"job {job_id} {state}: " + " | ".join(p.read_text()[-1500:] for p in logs)
    # both tasks ran the job and returned (submitit writes one result per task)
    for task in (0, 1):
        outcome, result = pickle.loads((out / "submitit" / job_id / f"{job_id}_{task}_result.pkl").read_bytes())
        assert outcome == "success" and result["final_updates"] == 4, (task, outcome, result)
    # the sbatch script asked for 2 tasks of 1 CPU (the cpu profile's), no GPU, and told srun so
    script = (out / "submitit" / job_id / f"{job_id}_submission.sh").read_text()
    assert "--ntasks-per-node=2" in script and "--cpus-per-task=1" in script and "gpus" not in script
    assert "export SRUN_CPUS_PER_TASK=1" in script
    # fairseq's own distributed init saw the two ranks: world size 2 over gloo, rank 1 its own log
    rank0, rank1 = (out / "train.log").read_text(), (out / "train.rank1.log").read_text()
    assert "distributed init (rank 0): tcp://" in rank0 and "'distributed_world_size': 2" in rank0
    assert "'distributed_backend': 'gloo'" in rank0 and "initialized host" in rank0
    assert "Traceback" not in rank0 + rank1
    # one update = both ranks' batches: fairseq sums nsentences over the ranks
    from ssl_pretrain import watchdog as wd
    inner = [r for r in wd.parse_lines(rank0.splitlines()) if r.kind == "train_inner"]
    assert [r.num_updates for r in inner] == [1, 2, 3, 4]
    assert all(r.values["bsz"] >= 2 for r in inner)       # >= one utterance from each rank
    assert resume_updates(out / "train.log") == 4
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("*.pt"))
    assert "checkpoint_last.pt" in ckpts and "checkpoint_1_4.pt" in ckpts
    assert not list((out / "checkpoints").glob("*rank*"))  # one checkpoint set, written by rank 0
