"""The frozen-feature model's parts: global feature normalisation, the TDNN layers, padding."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from corpora.base.errors import UserError
from downstream_asr.frozen import FrozenCTCModel, LayerWeightedSum, feature_stats

pytestmark = pytest.mark.usefixtures("one_thread")


class Arrays:
    """Features by id, as a feature-store view hands them out ([L, T, D] per utterance)."""

    def __init__(self, xs):
        self.xs = xs

    def get(self, uid):
        return self.xs[uid]


def test_feature_stats_are_per_layer_per_dim_over_all_frames(tmp_path):
    rng = np.random.default_rng(0)
    xs = [rng.normal(loc=[[[1.0]], [[-2.0]], [[5.0]]], scale=[[[1.0]], [[3.0]], [[0.5]]],
                     size=(3, n, 4)).astype(np.float32)
          for n in (7, 11, 5)]
    mean, std = feature_stats(Arrays(xs), range(3))
    cat = np.concatenate(xs, axis=1)  # [L, T, D]
    np.testing.assert_allclose(mean.numpy(), cat.mean(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(std.numpy(), cat.std(1), rtol=1e-5, atol=1e-5)
    # one-layer views ([1, T, D] per utterance) give [1, D]
    m1, s1 = feature_stats(Arrays([xs[0][1:2]]), [0])
    assert m1.shape == (1, 4)
    np.testing.assert_allclose(m1.numpy()[0], xs[0][1].mean(0), rtol=1e-5, atol=1e-5)


def test_global_norm_standardises_and_is_saved_with_the_model():
    torch.manual_seed(0)
    comb = LayerWeightedSum(2, 3, norm="global")
    mean, std = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.0, 1.0]]), torch.tensor([[2.0, 2.0, 2.0], [0.5, 1.0, 4.0]])
    comb.set_stats(mean, std)
    x = mean + std * torch.randn(4, 9, 2, 3)  # [B, T, L, D]
    # with equal layer weights: the mean of the standardised layers
    expected = ((x - mean) / std).mean(-2)
    torch.testing.assert_close(comb(x), expected)
    # the statistics travel in the state dict (a checkpoint), so decoding uses the training ones
    other = LayerWeightedSum(2, 3, norm="global")
    other.load_state_dict(comb.state_dict())
    assert bool(other.stats_set)
    torch.testing.assert_close(other(x), expected)
    # the per-frame norm is unchanged: one frame's output does not depend on the statistics
    frame = LayerWeightedSum(2, 3, norm="frame")
    torch.testing.assert_close(frame(x), torch.nn.functional.layer_norm(x, (3,)).mean(-2))
    with pytest.raises(UserError, match="feature_norm"):
        LayerWeightedSum(2, 3, norm="cmvn")


@pytest.mark.parametrize("lstm_layers", [0, 1])
def test_tdnn_padding_never_reaches_real_frames(lstm_layers):
    torch.manual_seed(0)
    model = FrozenCTCModel(n_layers=3, feat_dim=8, n_chars=6, proj_dim=16, hidden_size=8, num_layers=lstm_layers,
                           tdnn_layers=3, tdnn_kernel=5, dropout=0.0).eval()
    short = torch.randn(1, 10, 3, 8)
    alone, _ = model(short, torch.tensor([10]))
    # the same utterance in a batch padded to 25 frames with garbage after frame 10
    padded = torch.cat([short, 100 * torch.randn(1, 15, 3, 8)], 1)
    batch = torch.cat([padded, torch.randn(1, 25, 3, 8)])
    out, lengths = model(batch, torch.tensor([10, 25]))
    assert out.shape == (2, 25, 6) and lengths.tolist() == [10, 25]
    torch.testing.assert_close(out[0, :10], alone[0])


def test_recipe_fills_the_statistics_from_the_training_features(tmp_path):
    from downstream_asr.frozen import csv_segments, train_frozen
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
    from ssl_pretrain.model_choice import ModelChoice
    ref = CheckpointRef.resolve(tiny_wav2vec2(tmp_path / "w2v"))
    data = write_corpus(tmp_path / "data")
    over = {"max_steps": 1, "batch_seconds": 3, "valid_batch_seconds": 6, "proj_dim": 16, "hidden_size": 8}
    s = train_frozen(ModelChoice(ref), "all", data["train"], data["valid"], tmp_path / "run", overrides=over,
                     progress=False)
    comb = s["brain"].modules.model.combine
    assert comb.norm == "global" and bool(comb.stats_set)
    train = pd.read_csv(data["train"])
    view = FeatureStore(tmp_path / "run" / "features").view(SSLExtractor(ref), csv_segments(train, 16000), "all",
                                                              progress=False)
    mean, std = feature_stats(view, train["ID"])
    torch.testing.assert_close(comb.mean, mean)
    torch.testing.assert_close(comb.std, std.clamp(min=1e-5))
