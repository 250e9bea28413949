"""The CUDA paths: extraction, a frozen-ASR epoch and fine-tuning steps on a GPU in fp16 and bf16.

Marker `gpu`: run with `pytest -m gpu` on a machine with CUDA; elsewhere they are skipped with
the reason (tests/conftest.py). The CPU runs the same code paths in fp32/bf16 in the other tests.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from asr_helpers import tiny_wav2vec2, write_corpus
from corpora.utterances import UtteranceTable
from gendergap.cli import main
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.feature_store import FeatureStore, SSLExtractor

pytestmark = pytest.mark.gpu
SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"
FAST = ["--no-progress", "--bootstrap", "0", "batch_seconds=3", "valid_batch_seconds=6"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu")
    return {"root": root, "model": tiny_wav2vec2(root / "w2v"), **write_corpus(root / "data")}


@pytest.mark.parametrize("precision,tolerance", [("fp16", 0.01), ("bf16", 0.03)])
def test_extraction_on_cuda_matches_cpu_fp32(corpus, tmp_path, precision, tolerance):
    rows = UtteranceTable.load(corpus["table"]).audio_rows()
    ref = CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors")
    store = FeatureStore(tmp_path / "store")
    cpu = store.view(SSLExtractor(ref, "cpu", "fp32"), rows, "all", dtype="float32", progress=False)
    gpu = store.view(SSLExtractor(ref, "cuda:0", precision), rows, "all", dtype="float32", progress=False)
    meta = json.loads((gpu.dir / "entry.json").read_text())
    assert meta["runtime"]["device"] == "cuda:0" and meta["runtime"]["cuda"] == torch.version.cuda
    for layer in cpu.layers:
        a, b = np.concatenate(cpu.layer(rows["id"], layer)), np.concatenate(gpu.layer(rows["id"], layer))
        assert np.linalg.norm(b - a) / np.linalg.norm(a) < tolerance, layer


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_frozen_asr_epoch_on_cuda(corpus, tmp_path, precision):
    out = tmp_path / "frozen"
    assert main(["asr", "frozen", "--ckpt", str(corpus["model"]), "--layer", "all", "--train", str(corpus["train"]),
                 "--valid", str(corpus["valid"]), "--test", str(corpus["test"]), "--out", str(out),
                 "--feature-store", str(tmp_path / "store"), "--device", "cuda", "--precision", precision, *FAST,
                 "max_steps=4", "hidden_size=32", "proj_dim=32"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["runtime"]["device"] == "cuda:0" and run["runtime"]["precision"] == precision
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["optimizer_step"] == 4 and np.isfinite(summary["valid"]["loss"])


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_finetuning_steps_on_cuda(corpus, tmp_path, precision):
    out = tmp_path / "ft"
    assert main(["asr", "finetune", "--ckpt", str(corpus["model"]), "--train", str(corpus["train"]),
                 "--valid", str(corpus["valid"]), "--test", str(corpus["test"]), "--out", str(out),
                 "--device", "cuda", "--precision", precision, *FAST, "max_steps=3"]) == 0
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["optimizer_step"] == 3 and np.isfinite(summary["valid"]["loss"])
    assert json.loads((out / "test.json").read_text())["runtime"]["precision"] == precision


def test_st_trains_and_decodes_on_cuda_in_fp16(tmp_path):
    from st_helpers import tiny_wav2vec, toy_rows, write_toy_table, write_wavs_for
    rows = toy_rows()
    write_wavs_for(tmp_path, rows)
    table = str(write_toy_table(tmp_path, rows))
    out = tmp_path / "st"
    assert main(["st", "train", "--ckpt", str(tiny_wav2vec(tmp_path / "w2v")), "--layer", "1", "--train", table,
                 "--train-split", "train", "--valid", table, "--valid-split", "valid", "--src", "fr", "--tgt", "en",
                 "--out", str(out), "--feature-store", str(tmp_path / "store"), "--device", "cuda",
                 "--precision", "fp16", "--preset", "tiny", "data.vocab_size=40", "max-update=4"]) == 0
    train = json.loads((out / "st.json").read_text())["preset"]["train"]
    assert train["fp16"] is True and train["cpu"] is False  # fairseq's --fp16 on the GPU
    assert main(["st", "decode", "--model", str(out), "--test", table, "--test-split", "test",
                 "--out", str(tmp_path / "test.hyp"), "--no-score"]) == 0


def test_contrastive_accuracy_on_cuda_matches_cpu(tmp_path):
    from ssl_helpers import write_manifest, write_wavs
    from ssl_pretrain.evaluate import contrastive_accuracy
    root = tmp_path / "audio"
    manifest = write_manifest(root, write_wavs(root, n=8), tmp_path / "manifest", n_valid=4)
    ref = CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors")
    cpu = contrastive_accuracy(ref, manifest, seed=0, device="cpu")
    gpu = contrastive_accuracy(ref, manifest, seed=0, device="cuda:0")
    assert gpu["n_masked"] == cpu["n_masked"] and abs(gpu["accuracy"] - cpu["accuracy"]) < 0.02


def test_bench_measures_a_cuda_profile(tmp_path):
    """`gendergap bench --device cuda`: the CUDA figures go under `cuda` in the profile, beside
    any CPU ones already there."""
    profile = tmp_path / "profile.json"
    assert main(["bench", "--quick", "--seconds", "0.5", "--device", "cpu", "--out", str(profile)]) == 0
    assert main(["bench", "--quick", "--seconds", "0.5", "--device", "cuda", "--precision", "bf16",
                 "--out", str(profile)]) == 0
    devices = json.loads(profile.read_text())["devices"]
    assert set(devices) == {"cpu", "cuda"} and devices["cuda"]["extract_gflops"] > devices["cpu"]["extract_gflops"]
