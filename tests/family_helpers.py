"""Tiny random-weight models of every self-supervised family (ssl_pretrain.families), built locally
with transformers' own classes and saved as a Hub folder would be (config.json, model.safetensors,
preprocessor_config.json): the real architectures at 2 layers x 32 dims, 20 ms frames at 16 kHz."""
from __future__ import annotations

from pathlib import Path

FAMILY_TYPES = ("wav2vec2", "hubert", "wavlm", "data2vec-audio", "wav2vec2-conformer", "wav2vec2-bert")
WAVEFORM_TYPES = FAMILY_TYPES[:-1]


def tiny_config(model_type: str, dropout: float = 0.0):
    import transformers as T
    common = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48,
                  hidden_dropout=dropout, attention_dropout=dropout, activation_dropout=dropout,
                  layerdrop=0.0, mask_time_prob=0.0, vocab_size=8)
    if model_type == "wav2vec2-bert":   # log-mel input (80 bins stacked x2), conformer, causal conv
        return T.Wav2Vec2BertConfig(**common, feature_projection_input_dim=160, conv_depthwise_kernel_size=5,
                                    position_embeddings_type="relative_key", left_max_position_embeddings=16,
                                    right_max_position_embeddings=4, feat_proj_dropout=dropout)
    conv = dict(conv_dim=(16, 16, 16, 16), conv_kernel=(10, 3, 3, 3), conv_stride=(5, 4, 4, 4),
                feat_proj_dropout=dropout, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    if model_type == "wav2vec2":        # base-style: GroupNorm front-end, post-LN
        return T.Wav2Vec2Config(**common, **conv, feat_extract_norm="group")
    if model_type == "hubert":
        return T.HubertConfig(**common, **conv, feat_extract_norm="group")
    if model_type == "wavlm":           # gated relative position bias
        return T.WavLMConfig(**common, **conv, feat_extract_norm="group", num_buckets=16, max_bucket_distance=40)
    if model_type == "data2vec-audio":  # LayerNorm front-end, a stack of positional convolutions
        return T.Data2VecAudioConfig(**{**common, **conv, "num_conv_pos_embeddings": 5}, conv_pos_kernel_size=5)
    if model_type == "wav2vec2-conformer":   # conformer blocks: depthwise conv over time
        return T.Wav2Vec2ConformerConfig(**common, **conv, feat_extract_norm="layer", do_stable_layer_norm=True,
                                         conv_depthwise_kernel_size=7, position_embeddings_type="relative")
    raise ValueError(model_type)


def tiny_family_model(folder: Path, model_type: str, seed: int = 0, dropout: float = 0.0) -> Path:
    """A random-init model of ``model_type`` saved as a transformers folder at ``folder``."""
    import torch
    from transformers import AutoModel, SeamlessM4TFeatureExtractor, Wav2Vec2FeatureExtractor
    torch.manual_seed(seed)
    AutoModel.from_config(tiny_config(model_type, dropout)).save_pretrained(folder)
    if model_type == "wav2vec2-bert":
        SeamlessM4TFeatureExtractor(feature_size=80, num_mel_bins=80, sampling_rate=16000, stride=2,
                                    padding_value=1.0).save_pretrained(folder)
    else:
        Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                 return_attention_mask=True).save_pretrained(folder)
    return Path(folder)
