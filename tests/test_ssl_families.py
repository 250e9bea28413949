"""Every self-supervised family as a checkpoint (ssl_pretrain.families): tiny random-weight models
of wav2vec 2.0, HuBERT, WavLM, data2vec, the wav2vec 2.0 conformer and w2v-BERT 2.0, built with
transformers' own classes (tests/family_helpers.py), each registered with `ckpt add`, read through
the feature store batch-invariantly, trained on by frozen-feature ASR for an epoch, probed, and
fine-tuned for two steps (w2v-BERT: refused in one line, SpeechBrain's lobe takes waveforms). The
one-sweep study with four families to a report is in tests/test_ssl_families_sweep.py."""
from __future__ import annotations

import json

import numpy as np
import pytest

from asr_helpers import one_thread, write_corpus  # noqa: F401 (fixture)
from family_helpers import FAMILY_TYPES, tiny_family_model
from gendergap.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    # seed 1: the random-init twins (seed 0) must differ from the models
    return root, {t: tiny_family_model(root / t, t, seed=1, dropout=0.1) for t in FAMILY_TYPES}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("families_data"), {"train": 8, "valid": 4, "test": 4})


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_ckpt_add_records_family_size_front_end_and_rate(models, model_type, tmp_path, capsys):
    _, folders = models
    reg = tmp_path / "ckpts.json"
    assert main(["ckpt", "add", "M", str(folders[model_type]), "--hours", "1", "--registry", str(reg)]) == 0
    entry = json.loads(reg.read_text())["checkpoints"][0]
    from transformers import AutoModel
    n_params = sum(p.numel() for p in AutoModel.from_pretrained(folders[model_type]).parameters())
    assert entry["family"] == model_type and entry["parameters"] == n_params and entry["layers"] == 2
    assert entry["hidden_size"] == 32 and entry["sample_rate"] == 16000
    assert entry["front_end"] == {"wav2vec2": "conv, GroupNorm", "hubert": "conv, GroupNorm",
                                  "wavlm": "conv, GroupNorm", "data2vec-audio": "conv, LayerNorm",
                                  "wav2vec2-conformer": "conv, LayerNorm", "wav2vec2-bert": "fbank 80x2"}[model_type]
    capsys.readouterr()
    assert main(["ckpt", "list", "--registry", str(reg)]) == 0
    from corpora.base.units import count_label
    row = capsys.readouterr().out.splitlines()[2].split()
    assert row[:3] == ["M", model_type, count_label(n_params)], row


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_features_do_not_depend_on_batching_and_twins_differ(models, model_type):
    """Every layer of every utterance, alone, batched and batched in another order: the same to
    float rounding (1e-5; padding never reaches a real frame). 20 ms frames for every family."""
    from ssl_pretrain.checkpoints import CheckpointRef
    _, folders = models
    ref = CheckpointRef.resolve(folders[model_type])
    ssl = ref.load()
    rng = np.random.default_rng(0)
    waves = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (8000, 20800, 13000, 5200)]
    alone = [ssl.hidden_states([w]) for w in waves]
    batched, mask = ssl.hidden_states(waves)
    shuffled, mask2 = ssl.hidden_states([waves[i] for i in (2, 0, 3, 1)])
    assert ssl.frame_shift_s == pytest.approx(0.02)
    for i, (states, m) in enumerate(alone):
        n = int(m.sum())
        assert abs(n - len(waves[i]) / 16000 / 0.02) <= 1.5    # 20 ms frames, edges aside
        assert int(mask[i].sum()) == n
        assert (batched[:, i, :n] - states[:, 0, :n]).abs().max() < 1e-5
        j = (2, 0, 3, 1).index(i)
        assert int(mask2[j].sum()) == n and (shuffled[:, j, :n] - states[:, 0, :n]).abs().max() < 1e-5
    assert states.shape[0] == 3   # layers 0..2
    twin, _ = ref.twin(0).load().hidden_states([waves[0]])
    assert (twin - alone[0][0]).abs().max() > 1e-3   # the random-init twin: same shapes, other weights


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_bf16_autocast_on_cpu_follows_fp32_and_keeps_batch_invariance(models, model_type):
    """The bf16 path every family takes on a CPU (autocast; the weights stay fp32): close to fp32,
    and a batched utterance still equals it alone at the same precision (within bf16's rounding)."""
    from ssl_pretrain.checkpoints import CheckpointRef
    _, folders = models
    ref = CheckpointRef.resolve(folders[model_type])
    fp32, bf16 = ref.load(precision="fp32"), ref.load(precision="bf16")
    rng = np.random.default_rng(1)
    waves = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (8000, 13000)]
    a, _ = fp32.hidden_states([waves[0]])
    b, _ = bf16.hidden_states([waves[0]])
    assert (b - a).norm() / a.norm() < 0.05
    batched, mask = bf16.hidden_states(waves)
    n = int(mask[0].sum())
    assert (batched[:, 0, :n] - b[:, 0, :n]).norm() / b.norm() < 0.02


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_frozen_asr_epoch_probe_and_fine_tuning(models, corpus, model_type, tmp_path, capsys):
    from downstream_asr.frozen import train_frozen
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.model_choice import ModelChoice
    root, folders = models
    ref = CheckpointRef.resolve(folders[model_type])
    s = train_frozen(ModelChoice(ref), "last", corpus["train"], corpus["valid"], tmp_path / "frozen",
                     feature_store=root / f"store-{model_type}", progress=False,
                     overrides={"number_of_epochs": 1, "batch_seconds": 3, "valid_batch_seconds": 6,
                                "proj_dim": 16, "hidden_size": 8, "tdnn_layers": 2})
    assert s["optimizer_step"] >= 2 and (tmp_path / "frozen" / "train_summary.json").is_file()

    assert main(["probe", "run", "--ckpt", str(folders[model_type]), "--name", "P", "--table", str(corpus["table"]),
                 "--layers", "all", "--probes", "mean", "--max-epochs", "2", "--out", str(tmp_path / "probe"),
                 "--feature-store", str(root / f"store-{model_type}"), "--device", "cpu"]) == 0
    results = json.loads((tmp_path / "probe" / "probe_results.json").read_text())
    assert set(results) == {"P", "P+random-init"}
    assert sorted({r["layer"] for r in results["P"]}) == [0, 1, 2]

    argv = ["asr", "finetune", "--ckpt", str(folders[model_type]), "--train", str(corpus["train"]), "--valid",
            str(corpus["valid"]), "--out", str(tmp_path / "ft"), "--device", "cpu", "--no-progress",
            "max_steps=2", "batch_seconds=3", "valid_batch_seconds=6"]
    capsys.readouterr()
    if model_type == "wav2vec2-bert":
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "w2v-BERT 2.0" in err[0] and "cannot fine-tune" in err[0], err
        assert not (tmp_path / "ft").exists()
    else:
        assert main(argv) == 0
        assert json.loads((tmp_path / "ft" / "train_summary.json").read_text())["optimizer_step"] == 2


def test_an_unsupported_model_type_is_one_line_listing_the_families(tmp_path, capsys):
    from transformers import SpeechT5Config, SpeechT5Model
    folder = tmp_path / "speecht5"
    SpeechT5Model(SpeechT5Config(hidden_size=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                                 decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16)
                  ).save_pretrained(folder)
    capsys.readouterr()
    assert main(["ckpt", "add", "S", str(folder), "--registry", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'speecht5' is not a supported self-supervised family" in err[0], err
    assert all(t in err[0] for t in FAMILY_TYPES) and not (tmp_path / "r.json").exists()


def test_zeroing_padded_frames_changes_no_wav2vec2_bit():
    """wav2vec 2.0's encoder already zeroes padded frames before its one positional convolution:
    the zeroing every family now gets leaves the shipped checkpoints' batched features bit for bit
    as they were (the built-in study's scores cannot move)."""
    import contextlib

    import torch

    import ssl_pretrain.invariant as invariant
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.study_checkpoints import SHIPPED
    rng = np.random.default_rng(0)
    waves = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (8000, 20800, 13000, 5200)]
    ssl = CheckpointRef.resolve(SHIPPED / "tiny-balanced.safetensors").load()
    zeroed, _ = ssl.hidden_states(waves)
    orig = invariant.padded_frames_zeroed
    try:
        invariant.padded_frames_zeroed = lambda model, mask: contextlib.nullcontext()
        plain, _ = ssl.hidden_states(waves)
    finally:
        invariant.padded_frames_zeroed = orig
    assert torch.equal(zeroed, plain)
