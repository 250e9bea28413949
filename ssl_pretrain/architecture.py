"""fairseq's wav2vec 2.0 model config as the transformers ``Wav2Vec2Config`` of the same shapes and
norms: what the converter (ssl_pretrain.convert) builds, and what a packed release's header is
checked against (ssl_pretrain.packed)."""
from __future__ import annotations

import ast

from corpora.base.errors import UserError

FAIRSEQ_CONV = "[(512, 10, 5)] + [(512, 3, 2)] * 4 + [(512,2,2)] + [(512,2,2)]"  # Wav2Vec2Config default


def conv_layers(spec) -> list[tuple[int, int, int]]:
    """fairseq's conv_feature_layers string (a Python expression fairseq eval()s) without eval:
    only list/tuple literals, ``+`` and ``*`` are accepted."""
    if not isinstance(spec, str):
        return [tuple(c) for c in spec]

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [ev(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            a, b = ev(node.left), ev(node.right)
            return a + b if isinstance(node.op, ast.Add) else a * b
        raise UserError(f"cannot read conv_feature_layers {spec!r}", fix="write it as a list of (dim, kernel, stride)")
    return [tuple(c) for c in ev(ast.parse(spec, mode="eval"))]


def hf_config(mcfg: dict):
    """A transformers Wav2Vec2Config with the same shapes and norms as the fairseq model."""
    from transformers import Wav2Vec2Config
    conv = conv_layers(mcfg.get("conv_feature_layers", FAIRSEQ_CONV))
    return Wav2Vec2Config(
        hidden_size=int(mcfg["encoder_embed_dim"]), num_hidden_layers=int(mcfg["encoder_layers"]),
        num_attention_heads=int(mcfg["encoder_attention_heads"]),
        intermediate_size=int(mcfg["encoder_ffn_embed_dim"]),
        hidden_act=mcfg.get("activation_fn", "gelu"), feat_extract_activation="gelu",
        conv_dim=[c[0] for c in conv], conv_kernel=[c[1] for c in conv], conv_stride=[c[2] for c in conv],
        conv_bias=bool(mcfg.get("conv_bias", False)),
        feat_extract_norm="layer" if mcfg.get("extractor_mode", "default") == "layer_norm" else "group",
        do_stable_layer_norm=bool(mcfg.get("layer_norm_first", False)),
        num_conv_pos_embeddings=int(mcfg.get("conv_pos", 128)),
        num_conv_pos_embedding_groups=int(mcfg.get("conv_pos_groups", 16)),
        hidden_dropout=float(mcfg.get("dropout", 0.1)), attention_dropout=float(mcfg.get("attention_dropout", 0.1)),
        activation_dropout=float(mcfg.get("activation_dropout", 0.0)),
        feat_proj_dropout=float(mcfg.get("dropout_input", 0.0)), layerdrop=float(mcfg.get("encoder_layerdrop", 0.0)),
        layer_norm_eps=1e-5,  # fairseq's LayerNorm / GroupNorm eps
        apply_spec_augment=True, mask_time_prob=0.05,  # fine-tuning defaults; inert in eval()
    )


def preset_config(preset: str):
    """The transformers config of a pretraining preset's model (ssl_pretrain/presets/<preset>.yaml):
    what a checkpoint the study pretrains, or a benchmark's random-init encoder, will be."""
    from ssl_pretrain.hardware import load_preset
    return hf_config(dict(load_preset(preset)["model"]))
