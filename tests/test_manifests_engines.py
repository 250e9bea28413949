"""The exported wav2vec manifest really trains: a tiny fairseq-hydra-train run (CPU, 3 updates)."""
import os

import pytest
import torch

from fairseq_tiny import train_tiny
from manifest_fixtures import write_corpus
from manifests.build import build_manifests
from manifests.export_fairseq import read_wav2vec_manifest


@pytest.mark.slow
def test_fairseq_pretrains_on_the_exported_manifest(tmp_path):
    table = write_corpus(tmp_path / "corpus", split_of={"f3": "valid", "m3": "valid"})
    out = tmp_path / "manifest"
    build_manifests(table, out, gender="balanced", fmt="fairseq", seed=0)
    root, rows = read_wav2vec_manifest(out / "train.tsv")
    assert any(r.startswith(os.path.relpath(out / "audio", root)) for r, _ in rows)   # cut segments included
    proc, log = train_tiny(out, tmp_path)
    assert proc.returncode == 0, log[-3000:]
    assert f"loaded {len(rows)}, skipped 0 samples" in log          # fairseq read every manifest line
    state = torch.load(tmp_path / "ckpt" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 3
    assert '"valid_loss"' in log                                    # valid.tsv was read and evaluated
