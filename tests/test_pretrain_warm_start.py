"""`pretrain run --init-from`: a packed release continued by fairseq for real (fresh optimizer and
schedule), and a rerun of the same command resumes from checkpoint_last.pt, not from the start."""
from __future__ import annotations

from pathlib import Path

import torch

from gendergap.cli import main
from ssl_helpers import write_manifest, write_wavs
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.convert import num_updates

SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
QUICK = ["checkpoint.save_interval_updates=2", "common.log_interval=1", "dataset.validate_interval=1000",
         "checkpoint.save_interval=1000"]


def test_a_packed_release_is_continued_then_resumed(tmp_path):
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=10), tmp_path / "manifest")
    out = tmp_path / "more"
    base = ["pretrain", "run", "--preset", "tiny", "--manifest", str(manifest), "--out", str(out), "--seed", "1",
            "--threads", "1", "--init-from", str(SHIPPED / "tiny-female.safetensors"), "--no-watchdog"]
    assert main([*base, "optimization.max_update=2", *QUICK]) == 0
    log = (out / "train.log").read_text()
    assert "Loaded checkpoint" in log and str(out / "init.pt") in log  # the warm start
    first = torch.load(out / "checkpoints" / "checkpoint_last.pt", weights_only=False)
    assert num_updates(first) == 2  # fresh counters: the release's 6,000 updates are not resumed
    shipped = CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors").fairseq_state()["model"]
    key = "encoder.layers.0.fc1.weight"
    drift = (first["model"][key].float() - shipped[key].float()).abs().max().item()
    assert 0 < drift < 0.05  # two small Adam steps away from the release, not a random init
    assert main([*base, "optimization.max_update=4", *QUICK]) == 0  # the same command, a larger budget
    log = (out / "train.log").read_text()
    assert f"Loaded checkpoint {out / 'checkpoints' / 'checkpoint_last.pt'}" in log
    assert num_updates(torch.load(out / "checkpoints" / "checkpoint_last.pt", weights_only=False)) == 4
