"""The one forward of a fine-tuned wav2vec 2.0 + CTC head, shared by training, the validation pass
that picks the checkpoint, `asr decode`, `asr transcribe` (run directories and exports) and export.

``Wav2Vec2Encoder`` is SpeechBrain's Hugging Face wrapper with its forward replaced by
ssl_pretrain.invariant.encode: SpeechBrain's own layer-normalises the whole padded batch and runs a
GroupNorm front-end over the padding, so an utterance's hypothesis depended on the batch it fell in
(the lengths that share a batch differ by speaker, hence by gender). Same parameters, same state
dict and the same result on a batch of one, so a checkpoint or an export loads in either class.

``ctc_log_probs`` returns the frame lengths the encoder really gives each utterance (as fractions of
the padded length, SpeechBrain's convention), not the waveform's relative length: rounding that
times the padded frame count is off by one frame for some lengths in a batch, which adds a padded
frame to a hypothesis or drops a real one.
"""
from __future__ import annotations

import torch
from speechbrain.integrations.huggingface.wav2vec2 import Wav2Vec2

from downstream_asr.text import decode
from ssl_pretrain.invariant import FrontEndCache, absolute_lengths, encode


class Wav2Vec2Encoder(Wav2Vec2):
    """SpeechBrain's Wav2Vec2 lobe, batch-invariant (see the module doc).

    ``layers="last"`` (the reference study's recipe) returns the last layer. ``layers="all"`` returns
    a learned weighted sum of every layer, each layer-normalised first (s3prl's featurizer; the
    computation and parameter name of SpeechBrain's WeightedSSLModel with ``layernorm: True``, so an
    export of it loads there): the head reads the lower layers a small encoder keeps phonetic detail in.

    ``mask_time_prob`` / ``mask_feature_prob`` (and their span lengths, in frames and channels):
    wav2vec 2.0's own fine-tuning masks (fairseq's ``mask_prob`` / ``mask_channel_prob``), drawn in
    training only, over real frames only (ssl_pretrain.invariant.encode). 0 and 0: no masking,
    SpeechBrain's default (``apply_spec_augment=False``)."""

    def __init__(self, *args, layers: str = "last", front_end_cache_mb: float = 0,
                 mask_time_prob: float = 0.0, mask_time_length: int = 10,
                 mask_feature_prob: float = 0.0, mask_feature_length: int = 10, **kwargs):
        super().__init__(*args, apply_spec_augment=mask_time_prob > 0 or mask_feature_prob > 0, **kwargs)
        if layers not in ("last", "all"):
            raise ValueError(f"layers={layers!r}: last or all")
        for name, prob in (("mask_time_prob", mask_time_prob), ("mask_feature_prob", mask_feature_prob)):
            if not 0.0 <= prob < 1.0:
                raise ValueError(f"{name}={prob}: a fraction in [0, 1)")
        for name, length in (("mask_time_length", mask_time_length), ("mask_feature_length", mask_feature_length)):
            if int(length) < 1:
                raise ValueError(f"{name}={length}: a span of at least 1")
        if mask_time_prob > 0 and getattr(self.model, "masked_spec_embed", None) is None:
            # transformers builds the embedding only for a config with a mask probability > 0
            raise ValueError("mask_time_prob > 0, but this model has no mask embedding (masked_spec_embed: its "
                             "config.json's mask probabilities are 0); use mask_feature_prob, which needs none")
        cfg = self.model.config
        cfg.mask_time_prob, cfg.mask_time_length = float(mask_time_prob), int(mask_time_length)
        cfg.mask_feature_prob, cfg.mask_feature_length = float(mask_feature_prob), int(mask_feature_length)
        self.layers = layers
        frozen_front_end = self.freeze or self.freeze_feature_extractor
        if frozen_front_end and hasattr(self.model.feature_extractor, "_freeze_parameters"):
            # SpeechBrain freezes the CNN's parameters one by one, which leaves transformers'
            # _requires_grad flag on: its forward then marks the waveform as requiring grad and every
            # backward ran through the whole frozen CNN down to the samples (the largest cost of a
            # fine-tuning step of the tiny models). Same parameters, same gradients without it.
            self.model.feature_extractor._freeze_parameters()
        if front_end_cache_mb and not frozen_front_end:
            raise ValueError("front_end_cache_mb needs a frozen front-end (freeze_feature_encoder: True)")
        self.front_end_cache = FrontEndCache(front_end_cache_mb) if front_end_cache_mb else None
        if layers == "all":
            self.weights = torch.nn.Parameter(torch.zeros(self.model.config.num_hidden_layers + 1))

    def extract_features(self, wav, wav_lens=None):
        if self.output_all_hiddens:
            raise ValueError("Wav2Vec2Encoder returns one tensor per frame (output_all_hiddens=False)")
        out, _ = encode(self.model, wav, absolute_lengths(wav, wav_lens), normalize=self.normalize_wav,
                        all_layers=self.layers == "all", cache=self.front_end_cache)
        if self.layers == "all":
            out = torch.nn.functional.layer_norm(out, out.shape[-1:])
            out = (out * torch.softmax(self.weights, dim=-1).view(-1, 1, 1, 1)).sum(0)
        if self.output_norm:
            out = torch.nn.functional.layer_norm(out, out.shape[1:])
        return out


def frame_lengths(wav2vec2, wavs: torch.Tensor, wav_lens: torch.Tensor, n_frames: int) -> torch.Tensor:
    """Each utterance's own output frames, relative to ``n_frames`` (exact after SpeechBrain's
    ``round(rel * n_frames)``)."""
    lobe = getattr(wav2vec2, "module", wav2vec2)   # under DDP the lobe is wrapped
    frames = lobe.model._get_feat_extract_output_lengths(absolute_lengths(wavs, wav_lens)).long()
    return frames.float() / n_frames


def ctc_log_probs(modules, log_softmax, wavs: torch.Tensor, wav_lens: torch.Tensor):
    """(log-probabilities [B, T, V], relative frame lengths [B]) of ``modules.wav2vec2`` + ``modules.head``."""
    feats = modules.wav2vec2(wavs, wav_lens)
    return log_softmax(modules.head(feats)), frame_lengths(modules.wav2vec2, wavs, wav_lens, feats.shape[1])


def greedy_texts(log_probs: torch.Tensor, rel_frames: torch.Tensor, vocab) -> list[str]:
    """Greedy CTC hypotheses (blank 0) as text in ``vocab`` (downstream_asr.text.decode)."""
    import speechbrain as sb

    return [decode(h, vocab) for h in sb.decoders.ctc_greedy_decode(log_probs, rel_frames, blank_id=0)]
