"""Fine-tuning with the CNN front-end frozen: no gradient below it, and its output kept per utterance.

SpeechBrain froze the CNN's parameters but left transformers' ``_requires_grad`` on, so each backward
ran through the frozen CNN down to the waveform; the cache (``front_end_cache_mb``) keeps the CNN's
output per waveform instead of recomputing it every epoch. Both must leave training unchanged.
"""
from __future__ import annotations

import pytest
import torch

from asr_helpers import one_thread, tiny_wav2vec2  # noqa: F401 (fixture)
from ssl_pretrain.invariant import FrontEndCache, conv_features, encode


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tiny_wav2vec2(tmp_path_factory.mktemp("w2v") / "hf", dropout=0.0)


def encoder(folder, tmp_path, **kw):
    from downstream_asr.ctc_inference import Wav2Vec2Encoder
    torch.manual_seed(0)
    return Wav2Vec2Encoder(source=str(folder), save_path=str(tmp_path / "cache"), freeze=False,
                           freeze_feature_extractor=True, **kw)


def batches(n: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lens = torch.randint(3000, 8000, (3,), generator=g)
        wavs = torch.zeros(3, int(lens.max()))
        for i, k in enumerate(lens.tolist()):
            wavs[i, :k] = torch.randn(k, generator=g)
        out.append((wavs, lens.float() / wavs.shape[1]))
    return out


def train(enc, data, epochs: int = 2) -> dict:
    torch.manual_seed(1)
    head = torch.nn.Linear(enc.model.config.hidden_size, 5)
    opt = torch.optim.Adam([p for p in list(enc.parameters()) + list(head.parameters()) if p.requires_grad], lr=1e-2)
    enc.train()
    for _ in range(epochs):
        for wavs, rel in data:
            loss = head(enc(wavs, rel)).logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {k: v.clone() for k, v in enc.state_dict().items()}


def test_frozen_cnn_output_needs_no_gradient(folder, tmp_path, one_thread):
    enc = encoder(folder, tmp_path)
    enc.train()
    xs = [torch.randn(4000), torch.randn(6000)]
    feats, _ = conv_features(enc.model, xs)
    assert not feats.requires_grad        # before the fix: True, and backward ran to the samples
    assert all(not p.requires_grad for p in enc.model.feature_extractor.parameters())


def test_cache_gives_the_features_recomputing_gives(folder, tmp_path, one_thread):
    enc = encoder(folder, tmp_path)
    xs = [torch.randn(n) for n in (3000, 5000, 4100)]
    cache = FrontEndCache(max_mb=16)
    first, frames = cache.features(enc.model, xs)
    again, frames2 = cache.features(enc.model, xs[::-1])
    plain, plain_frames = conv_features(enc.model, xs)
    assert torch.equal(frames, plain_frames) and torch.equal(frames2, plain_frames.flip(0))
    assert torch.equal(first, plain)
    assert torch.equal(again, plain.flip(0)[:, : plain.shape[1]])
    assert (cache.misses, cache.hits) == (3, 3)
    # a changed waveform (speed perturbation) is a new entry, never an old one's output
    changed = xs[0].clone()
    changed[100] += 1e-3
    cache.features(enc.model, [changed])
    assert cache.misses == 4


def test_cache_stops_adding_at_its_budget(folder, tmp_path, one_thread):
    enc = encoder(folder, tmp_path)
    one = conv_features(enc.model, [torch.randn(5000)])[0]
    size = one.numel() * one.element_size()
    cache = FrontEndCache(max_mb=2.5 * size / 2**20)
    xs = [torch.randn(5000) for _ in range(4)]
    out, _ = cache.features(enc.model, xs)
    assert len(cache.entries) == 2 and cache.bytes <= cache.max_bytes
    assert torch.equal(out, conv_features(enc.model, xs)[0])   # the uncached ones are computed


def test_training_with_the_cache_gives_the_same_weights(folder, tmp_path, one_thread):
    data = batches()
    plain = train(encoder(folder, tmp_path / "a"), data)
    enc = encoder(folder, tmp_path / "b", front_end_cache_mb=64)
    cached = train(enc, data)
    assert enc.front_end_cache.hits == 9 and enc.front_end_cache.misses == 9   # epoch 2 read the cache
    assert max((plain[k] - cached[k]).abs().max().item() for k in plain) == 0.0
    assert any((plain[k] != encoder(folder, tmp_path / "c").state_dict()[k]).any() for k in plain)  # it trained


def test_cache_needs_a_frozen_front_end(folder, tmp_path):
    from downstream_asr.ctc_inference import Wav2Vec2Encoder
    with pytest.raises(ValueError, match="front_end_cache_mb needs a frozen front-end"):
        Wav2Vec2Encoder(source=str(folder), save_path=str(tmp_path / "c"), freeze=False,
                        freeze_feature_extractor=False, front_end_cache_mb=64)


def test_encode_with_a_cache_is_the_plain_forward(folder, tmp_path, one_thread):
    enc = encoder(folder, tmp_path)
    enc.model.eval()
    wavs, rel = batches(1)[0]
    lengths = torch.round(rel * wavs.shape[1]).long()
    plain, f1 = encode(enc.model, wavs, lengths, normalize=True)
    cache = FrontEndCache(16)
    for _ in range(2):
        cached, f2 = encode(enc.model, wavs, lengths, normalize=True, cache=cache)
        assert torch.equal(f1, f2) and torch.equal(plain, cached)


def masked_frames(enc, wavs, lengths) -> tuple[torch.Tensor, torch.Tensor]:
    """Which frames of the transformer's input masking changed, [B, T'], and each utterance's frames."""
    seen = {}
    original = enc.model._mask_hidden_states

    def spy(hidden, **kw):
        before = hidden.clone()
        out = original(hidden, **kw)
        seen["masked"] = (out != before).any(-1)
        return out
    enc.model._mask_hidden_states = spy
    try:
        _, frames = encode(enc.model, wavs, lengths, normalize=True)
    finally:
        del enc.model._mask_hidden_states
    return seen["masked"], frames


def test_fine_tuning_masks_cover_real_frames_in_training_only(tmp_path, one_thread):
    """wav2vec 2.0's own fine-tuning masks (mask_time_prob): off by default, as SpeechBrain's
    wrapper has them; on, about the asked fraction of each utterance's own frames is masked in
    training, never a padded frame, and evaluation is the unmasked forward."""
    folder = tiny_wav2vec2(tmp_path / "hf", dropout=0.0, mask_time_prob=0.05)   # has a mask embedding
    wavs, rel = batches(1, seed=3)[0]
    lengths = torch.round(rel * wavs.shape[1]).long()
    off = encoder(folder, tmp_path / "off")
    off.train()
    assert not off.model.config.apply_spec_augment
    assert not masked_frames(off, wavs, lengths)[0].any()

    on = encoder(folder, tmp_path / "on", mask_time_prob=0.5, mask_time_length=2)
    on.train()
    torch.manual_seed(0)
    masked, frames = masked_frames(on, wavs, lengths)
    for i, n in enumerate(frames.tolist()):
        assert not masked[i, n:].any()                 # padding is never masked
        assert 0.2 <= masked[i, :n].float().mean().item() <= 0.8
    on.eval()
    assert not masked_frames(on, wavs, lengths)[0].any()
    off.eval()
    with torch.no_grad():
        assert torch.equal(on(wavs, rel), off(wavs, rel))   # same weights: evaluation ignores the masks


def test_time_masks_need_a_mask_embedding(folder, tmp_path):
    # a model saved without one (its config's mask probabilities 0): say so, not an AttributeError
    # at the first training step; channel masks zero channels and need none
    with pytest.raises(ValueError, match="no mask embedding"):
        encoder(folder, tmp_path / "a", mask_time_prob=0.5)
    assert encoder(folder, tmp_path / "b", mask_feature_prob=0.2).model.config.apply_spec_augment


@pytest.mark.parametrize("kw, message", [({"mask_time_prob": 1.0}, "mask_time_prob=1.0"),
                                         ({"mask_feature_prob": -0.1}, "mask_feature_prob=-0.1"),
                                         ({"mask_time_length": 0}, "mask_time_length=0")])
def test_fine_tuning_masks_refuse_impossible_values(folder, tmp_path, kw, message):
    with pytest.raises(ValueError, match=message):
        encoder(folder, tmp_path, **kw)
