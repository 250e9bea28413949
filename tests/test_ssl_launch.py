"""Hardware profiles, the SLURM dry run, and the submit path through submitit's local executor."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from corpora.base.errors import UserError
from gendergap.cli import main
from ssl_helpers import write_manifest, write_wavs
from ssl_pretrain.hardware import load_preset, plan_batch
from ssl_pretrain.launch import launch, parse_time_minutes


def test_update_freq_keeps_the_recipe_batch():
    assert plan_batch("large", "v100-32g", 2, 8).update_freq == 8      # the study: 16 V100
    assert plan_batch("large", "v100-32g", 16, 8).update_freq == 1     # the recipe's 128 GPUs
    # an A100-80GB keeps the recipe's per-GPU batch (max_tokens AND the batch_size crop cap) and
    # fp16; world x update_freq is the recipe's 128
    a100 = plan_batch("large", "a100-80g", 2, 8)
    assert (a100.update_freq, a100.max_tokens, a100.batch_size, a100.bf16, a100.fp16) == (8, 1_200_000, 4, False, True)
    assert a100.tokens_per_update == a100.recipe_tokens_per_update == 128 * 1_200_000
    assert a100.crops_per_update == a100.recipe_crops_per_update == 128 * 4
    one_node = plan_batch("large", "a100-80g", 1, 8)
    assert (one_node.world_size * one_node.update_freq, one_node.update_freq) == (128, 16)
    assert "dataset.batch_size=4" in one_node.overrides() and "(1x)" in one_node.describe()
    assert plan_batch("base", "v100-32g", 1, 8).update_freq == 8       # base: 64 GPUs x 1.4M


def test_presets_carry_the_recipe_values():
    large = load_preset("large")
    assert large["model"]["encoder_layers"] == 24 and large["model"]["encoder_embed_dim"] == 1024
    assert large["model"]["extractor_mode"] == "layer_norm" and large["optimization"]["lr"] == [0.005]
    assert large["lr_scheduler"]["warmup_updates"] == 32000 and large["criterion"]["loss_weights"] == [0.1, 0]
    assert (large["model"]["mask_prob"], large["model"]["mask_length"], large["model"]["latent_vars"],
            large["model"]["num_negatives"], large["dataset"]["max_tokens"]) == (0.65, 10, 320, 100, 1_200_000)
    assert load_preset("tiny")["model"]["encoder_embed_dim"] == 128


def test_time_limits():
    assert [parse_time_minutes(t) for t in ("4320", "72:00:00", "3-00:00:00", "30:00", "1-12")] == (
        [4320] * 3 + [30, 2160])


def shared_out_dir(tmp_path) -> Path:
    """An --out a multi-node dry run accepts: not under /tmp (pytest's tmp_path is node-local).
    A dry run writes nothing there; the tests check it stays absent."""
    return Path.home() / f".gendergap-dry-run-{tmp_path.name}" / "out"


def test_dry_run_two_nodes_of_eight_v100(tmp_path, capsys):
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=4), tmp_path / "m")
    out = shared_out_dir(tmp_path)
    assert main(["pretrain", "launch", "--preset", "large", "--hardware", "v100-32g", "--nodes", "2",
                 "--gpus-per-node", "8", "--partition", "gpu_p2", "--time", "20:00:00", "--account", "abc@v100",
                 "--constraint", "v100-32g", "--manifest", str(manifest), "--out", str(out),
                 "optimization.max_update=125000", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "update_freq 8" in text and "'optimization.update_freq=[8]'" in text
    script = text.split("# ---- sbatch script (submitit) ----\n")[1].split("# ---- fairseq command")[0]
    assert script.startswith("#!/bin/bash")
    flags = dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", script, flags=re.M))
    assert flags["nodes"] == "2" and flags["ntasks-per-node"] == "8" and flags["gpus-per-node"] == "8"
    assert (flags["partition"], flags["account"], flags["time"], flags["constraint"]) == \
        ("gpu_p2", "abc@v100", "1200", "v100-32g")
    assert flags["signal"].startswith("USR2@")  # submitit's requeue signal
    assert flags["cpus-per-task"] == "10"        # the v100-32g profile's
    assert "export SRUN_CPUS_PER_TASK=10" in script.split("srun")[0]   # newer srun ignores sbatch's -c
    assert "srun" in script and "submitit.core._submit" in script
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)   # valid shell
    fairseq_cmd = text.split("# ---- fairseq command (each task) ----\n")[1]
    for part in ("--config-name large", "distributed_training.distributed_world_size=16",
                 "dataset.max_tokens=1200000", "common.fp16=true", "optimization.max_update=125000"):
        assert part in fairseq_cmd
    assert not out.parent.exists()  # nothing ran, nothing written


@pytest.mark.slow
def test_local_executor_runs_the_same_job(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the job's fairseq inherits it
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=8), tmp_path / "m")
    job = launch("tiny", manifest, tmp_path / "out", plan=None, seed=2, executor="local",
                 overrides=["optimization.max_update=4", "checkpoint.save_interval_updates=2"])
    result = job.result()
    assert result["final_updates"] == 4
    assert (tmp_path / "out" / "checkpoints" / "checkpoint_last.pt").is_file()
    assert (tmp_path / "out" / "job_id.txt").read_text().strip() == str(job.job_id)


def test_cpu_profile_is_one_task_without_gpus(tmp_path, capsys):
    from gendergap.cmd_pretrain import PROFILE_NAMES
    from ssl_pretrain.hardware import PROFILES
    assert set(PROFILE_NAMES) == set(PROFILES)   # the CLI offers every profile
    cpu = plan_batch("tiny", "cpu", 1, None)
    assert (cpu.world_size, cpu.gpus_per_node, cpu.update_freq, cpu.max_tokens) == (1, 0, 1, 200_000)
    assert cpu.tasks_per_node == 1 and cpu.cpus_per_task == 1
    two = plan_batch("tiny", "cpu", 1, None, tasks_per_node=2)
    assert (two.world_size, two.tasks_per_node) == (2, 2)
    assert "distributed_training.distributed_backend=gloo" in two.overrides()   # NCCL needs GPUs
    assert "common.cpu=true" in cpu.overrides() and "common.fp16=false" in cpu.overrides()
    assert plan_batch("large", "cpu", 1, 1).update_freq == 128        # the recipe's batch, accumulated
    assert "common.cpu=false" in plan_batch("large", "v100-32g", 1, None).overrides()   # 8 GPUs by default
    with pytest.raises(UserError, match="on one node"):
        plan_batch("tiny", "cpu", 2, None)
    with pytest.raises(UserError, match="one task per GPU"):
        plan_batch("large", "v100-32g", 1, 8, tasks_per_node=2)
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=4), tmp_path / "m")
    assert main(["pretrain", "launch", "--preset", "tiny", "--hardware", "cpu", "--partition", "local",
                 "--cpus-per-task", "1", "--mem-gb", "2", "--time", "10", "--manifest", str(manifest),
                 "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "1 CPU rank(s)" in text
    script = text.split("# ---- sbatch script (submitit) ----\n")[1].split("# ---- fairseq command")[0]
    flags = dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", script, flags=re.M))
    assert (flags["ntasks-per-node"], flags["cpus-per-task"], flags["mem"], flags["partition"]) == \
        ("1", "1", "2GB", "local")
    assert not any("gpu" in k or "gres" in k for k in flags)   # a node without GPUs would refuse the job


def test_slurm_launch_needs_a_hardware_profile(tmp_path, capsys):
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=4), tmp_path / "m")
    assert main(["pretrain", "launch", "--preset", "tiny", "--manifest", str(manifest),
                 "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "--executor slurm needs --hardware" in capsys.readouterr().err


def test_profile_cpus_per_task_and_the_cli_override(tmp_path, capsys):
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=4), tmp_path / "m")

    def sbatch_flags(*extra):
        assert main(["pretrain", "launch", "--preset", "large", "--hardware", "a100-80g", "--gpus-per-node", "8",
                     "--manifest", str(manifest), "--out", str(tmp_path / "out"), "--dry-run", *extra]) == 0
        text = capsys.readouterr().out
        script = text.split("# ---- sbatch script (submitit) ----\n")[1].split("# ---- fairseq command")[0]
        return dict(re.findall(r"^#SBATCH --([\w-]+)=(.*)$", script, flags=re.M)), script, text

    flags, script, text = sbatch_flags()
    assert flags["cpus-per-task"] == "8" and "export SRUN_CPUS_PER_TASK=8" in script
    assert "common.fp16=true" in text and "common.bf16=false" in text and "caveat" not in text   # fp16 by default
    flags, script, text = sbatch_flags("--cpus-per-task", "6", "--bf16")
    assert flags["cpus-per-task"] == "6" and "export SRUN_CPUS_PER_TASK=6" in script
    assert "common.bf16=true" in text and "common.fp16=false" in text
    assert "bf16 caveat:" in text and "not by fairseq-hydra-train" in text
    with pytest.raises(UserError, match="no fast bf16"):
        plan_batch("large", "v100-32g", 2, 8, bf16=True)


@pytest.mark.parametrize("local", ["/tmp/run", "/dev/shm/x/run", "/var/tmp/run", "$TMPDIR/run"])
def test_multi_node_output_on_a_node_local_dir_is_refused(tmp_path, monkeypatch, capsys, local):
    monkeypatch.setenv("TMPDIR", str(Path.home() / "node-tmp"))
    out = local.replace("$TMPDIR", str(Path.home() / "node-tmp"))
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=4), tmp_path / "m")
    args = ["pretrain", "launch", "--preset", "large", "--hardware", "v100-32g", "--gpus-per-node", "8",
            "--manifest", str(manifest), "--out", out, "--dry-run"]
    assert main(args + ["--nodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "needs one shared output dir" in err and "shared file system" in err
    assert main(args + ["--nodes", "1"]) == 0          # one node: node-local output is fine
