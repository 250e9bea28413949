"""Speed perturbation: frozen recipe copies of the training set, the fine-tuning option."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from corpora.base.errors import UserError
from downstream_asr.perturb import change_speed, check_factors

pytestmark = pytest.mark.usefixtures("one_thread")


def test_change_speed_scales_length_and_pitch():
    sr = 16000
    t = np.arange(sr) / sr
    x = np.sin(2 * np.pi * 200 * t).astype(np.float32)
    for f in (0.9, 1.1):
        y = change_speed(x, f, sr)
        assert abs(len(y) - len(x) / f) <= 1
        peak = np.argmax(np.abs(np.fft.rfft(y))) * sr / len(y)
        assert abs(peak - 200 * f) < 3  # pitch moves with the speed: a new voice


def test_factors_must_include_the_original():
    assert check_factors([0.9, 1, 1.1]) == [0.9, 1.0, 1.1]
    for bad in ([0.9, 1.1], [1.0, 1.0], [1.0, 3.0], "fast"):
        with pytest.raises(UserError):
            check_factors(bad)


def test_frozen_trains_on_perturbed_training_copies_only(tmp_path):
    from downstream_asr.frozen import train_frozen
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import COUNTERS
    from ssl_pretrain.model_choice import ModelChoice
    ref = CheckpointRef.resolve(tiny_wav2vec2(tmp_path / "w2v"))
    data = write_corpus(tmp_path / "data")
    over = {"max_steps": 1, "batch_seconds": 3, "valid_batch_seconds": 6, "proj_dim": 16, "hidden_size": 8,
            "speed_perturb": [0.9, 1.0, 1.1]}
    before = COUNTERS["utterances"]
    s = train_frozen(ModelChoice(ref), "all", data["train"], data["valid"], tmp_path / "run", overrides=over,
                     progress=False, extra_csvs=[data["test"]])
    assert s["train_utterances"] == 3 * 8
    assert COUNTERS["utterances"] - before == 3 * 8 + 4  # three training copies and valid; test is not read
    entries = [json.loads(p.read_text()) for p in (tmp_path / "run" / "features").rglob("entry.json")]
    assert sorted(e["rows"] for e in entries) == [4, 8, 8, 8]

    # read back through the store (no forward pass): frames of each copy against the original
    from downstream_asr.frozen import csv_segments
    from downstream_asr.perturb import speed_perturbed
    from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
    store, ext, counted = FeatureStore(tmp_path / "run" / "features"), SSLExtractor(ref), COUNTERS["utterances"]
    train = pd.read_csv(data["train"])
    orig = store.view(ext, csv_segments(train, 16000), "all", progress=False)
    for f in (0.9, 1.1):
        sp, _ = speed_perturbed(train, data["train"], f, tmp_path / "run" / "perturbed", 16000)
        view = store.view(ext, csv_segments(sp, 16000), "all", progress=False)
        ratio = np.array([view.n_frames(f"{i}-sp{f:g}") / orig.n_frames(i) for i in train["ID"]])
        # 20 ms frames of a 1/f times longer signal (+-1 frame of the CNN's rounding)
        assert np.allclose(ratio, 1 / f, atol=1.5 / min(orig.n_frames(i) for i in train["ID"]))
    assert COUNTERS["utterances"] == counted
    assert json.loads((tmp_path / "run" / "run.json").read_text())["overrides"]["speed_perturb"] == [0.9, 1.0, 1.1]


def test_finetune_speed_perturbs_training_batches_only(tmp_path):
    import speechbrain as sb
    import torch

    from downstream_asr.data import audio_dataset, read_csv
    from downstream_asr.finetune import train_finetune
    from downstream_asr.text import TextNorm
    ssl = tiny_wav2vec2(tmp_path / "w2v")
    data = write_corpus(tmp_path / "data")
    over = {"max_steps": 1, "batch_seconds": 4, "valid_batch_seconds": 8, "dnn_neurons": 16,
            "speed_perturb": True, "speed_perturb_speeds": [90]}
    from ssl_pretrain.model_choice import ModelChoice
    brain = train_finetune(ModelChoice.resolve(ssl), data["train"], data["valid"], tmp_path / "run", overrides=over,
                           progress=False)["brain"]
    ds = audio_dataset(read_csv(data["train"], TextNorm(), training=True), brain.vocab)
    batch = next(iter(sb.dataio.dataloader.make_dataloader(ds, batch_size=1)))
    seen = []
    hook = brain.modules.wav2vec2.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[1]))
    with torch.no_grad():
        brain.forward_logprobs(batch, sb.Stage.TRAIN)
        brain.forward_logprobs(batch, sb.Stage.VALID)
    hook.remove()
    n = batch.sig[0].shape[1]
    assert abs(seen[0] - n / 0.9) <= 2 and seen[1] == n  # 90 % speed: 1/0.9 longer; validation untouched
