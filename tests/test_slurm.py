"""Real SLURM: jobs go through sbatch to the one-node cluster on localhost (scripts/slurm/).

Skipped, with the reason, when that cluster is not up (see tests/slurm_helpers.py).
"""
from __future__ import annotations

import json
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


def test_two_slurm_jobs_write_one_results_db(slurm_cluster, tmp_path):
    """Two array elements on the cluster write 120 runs x 3 rows each into one results DB at the
    same time (each re-scores every run once): no row lost, none duplicated."""
    db = str(tmp_path / "results.db")

    def write(worker: str) -> int:  # a local function: cloudpickle ships it by value to the job
        import time as job_time

        from analysis.store import ResultsStore
        store = ResultsStore(db)
        start = job_time.time()
        for j in range(120):
            rid = store.start_run("slurm-writer", {"worker": worker, "j": j}, seed=j)
            rows = [{"checkpoint": f"{worker}-{j}", "task": "asr-frozen", "lang_pair": "", "subset": "test",
                     "gender": g, "metric": "wer", "value": float(j)} for g in ("F", "M", "all")]
            store.add_scores(rid, rows)
            store.add_scores(rid, rows, finish=True)
        store.close()
        return int(start)

    ex = slurm_cluster.executor(tmp_path / "logs", timeout_min=5, name="gg-db-writers")
    jobs = ex.map_array(write, ["a", "b"])
    states = slurm_cluster.wait_for_jobs([j.job_id for j in jobs], timeout_s=300)
    assert [states[j.job_id] for j in jobs] == ["COMPLETED", "COMPLETED"], states
    from analysis.store import ResultsStore
    store = ResultsStore(db, readonly=True)
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    runs, scores = store.runs(), store.scores()
    assert len(runs) == 240 and (runs["status"] == "done").all()
    keys = list(zip(scores["checkpoint"], scores["gender"]))
    assert len(keys) == len(set(keys)) == 240 * 3


def test_asr_job_killed_by_slurm_mid_epoch_resumes(slurm_cluster, tmp_path, capsys):
    """`asr finetune` with intra-epoch checkpoints runs as a SLURM job; `scancel --signal=KILL`
    ends it once its first checkpoint is complete (the job waits there to be killed); the same
    command run again resumes at that checkpoint's optimizer step, inside the first epoch."""
    import re
    import subprocess
    import time

    from asr_helpers import tiny_wav2vec2, write_corpus
    corpus = write_corpus(tmp_path / "data", {"train": 160, "valid": 2})  # 160 one-utterance batches an epoch
    model = tiny_wav2vec2(tmp_path / "w2v")
    out = tmp_path / "ft"
    argv = ["asr", "finetune", "--ckpt", str(model), "--train", str(corpus["train"]), "--valid",
            str(corpus["valid"]), "--out", str(out), "--device", "cpu", "--no-progress", "batch_seconds=0.75",
            "valid_batch_seconds=6", "ckpt_interval_steps=4", "number_of_epochs=50"]

    def train(args: list[str]) -> int:  # runs on the node: the CLI in the job's own process
        import time as node_time

        import torch
        torch.set_num_threads(1)
        from downstream_asr.common import CTCBrain
        from gendergap.cli import main as cli_main
        save = CTCBrain._save_intra_epoch_ckpt

        def save_then_stall(self):
            # The job stalls right after its first interval checkpoint, as a preempted job would
            # be caught there: SLURM's kill then lands mid-epoch however late it comes (a fast
            # node could otherwise finish epochs, and save end-of-epoch checkpoints, before it).
            save(self)
            node_time.sleep(600)

        CTCBrain._save_intra_epoch_ckpt = save_then_stall
        return cli_main(args)

    job = slurm_cluster.executor(tmp_path / "logs", timeout_min=10, name="gg-asr-kill").submit(train, argv)
    deadline = time.monotonic() + 300
    while not any((c / "complete.ckpt").exists() for c in out.glob("save/CKPT*")):
        assert slurm_cluster.job_state(job.job_id) in ("PENDING", "RUNNING", "CONFIGURING", ""), \
            slurm_cluster.job_state(job.job_id)
        assert time.monotonic() < deadline, "no intra-epoch checkpoint within 300 s"
        time.sleep(0.05)
    subprocess.run(["scancel", "--signal=KILL", "--full", job.job_id], check=True,
                   env={**__import__("os").environ, "SLURM_CONF": str(slurm_cluster.conf)})
    states = slurm_cluster.wait_for_jobs([job.job_id], timeout_s=120)
    assert states[job.job_id] in ("CANCELLED", "FAILED"), states
    import yaml
    saved = max((yaml.safe_load((c / "CKPT.yaml").read_text()) for c in out.glob("save/CKPT*")
                 if (c / "complete.ckpt").exists()), key=lambda m: m["unixtime"])["optimizer_step"]
    capsys.readouterr()
    assert main([*argv, f"max_steps={saved + 2}"]) == 0  # the rerun trains on from the saved step
    resumed = [line for line in capsys.readouterr().err.splitlines() if "resumed at optimizer step" in line]
    assert resumed, "the rerun did not resume"
    # "resumed at optimizer step S (E epoch(s) complete, B batch(es) into the next)": mid-epoch
    found = re.search(r"optimizer step (\d+) \((\d+) epoch\(s\) complete, (\d+) batch\(es\) into the next\)",
                      resumed[0])
    assert found, resumed
    step, epochs, batches = map(int, found.groups())
    assert saved == 4  # the first interval checkpoint, where the job stalled
    assert step == saved and step % 4 == 0 and batches > 0 and step > epochs * batches  # inside an epoch
    assert json.loads((out / "train_summary.json").read_text())["optimizer_step"] == saved + 2
