"""Speed perturbation: frozen recipe copies of the training set, the fine-tuning option."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from corpora.errors import UserError
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
    ssl = tiny_wav2vec2(tmp_path / "w2v")
    data = write_corpus(tmp_path / "data")
    over = {"max_steps": 1, "batch_seconds": 3, "valid_batch_seconds": 6, "proj_dim": 16, "hidden_size": 8,
            "speed_perturb": [0.9, 1.0, 1.1]}
    s = train_frozen(ssl, "all", data["train"], data["valid"], tmp_path / "run", overrides=over, progress=False,
                     extra_csvs=[data["test"]])
    assert s["train_utterances"] == 3 * 8
    feats = tmp_path / "run" / "features"

    def frames(pattern):
        index = next(feats.glob(f"layer-all/{pattern}/features.tsv"))
        t = pd.read_csv(index, sep="\t", dtype={"id": str})
        return dict(zip(t["id"], t["n_frames"]))

    orig = frames("train-??????????")  # train-<key>: the original copy
    for f in (0.9, 1.1):
        sp = frames(f"train-sp{f:g}-*")
        assert set(sp) == {f"{i}-sp{f:g}" for i in orig}
        ratio = np.array([sp[f"{i}-sp{f:g}"] for i in orig]) / np.array([orig[i] for i in orig])
        # 20 ms frames of a 1/f times longer signal (+-1 frame of the CNN's rounding)
        assert np.allclose(ratio, 1 / f, atol=1.5 / min(orig.values()))
    # valid (and test) are never perturbed: one valid feature set, of the original IDs
    valid_sets = list(feats.glob("layer-all/valid*"))
    assert len(valid_sets) == 1 and not any("-sp" in i for i in frames(valid_sets[0].name))
    assert not list(feats.glob("layer-all/test*")) and not list(feats.glob("speed/valid*"))
    assert not list(feats.glob("speed/test*"))
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
    brain = train_finetune(ssl, data["train"], data["valid"], tmp_path / "run", overrides=over, progress=False)["brain"]
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
