"""Model architectures: fairseq's wav2vec 2.0 model config as the transformers ``Wav2Vec2Config`` of
the same shapes and norms (what the converter, ssl_pretrain.convert, builds, and what a packed
release's header is checked against, ssl_pretrain.packed); and a model folder's config.json checked
before anything is built from it (``check_architecture``: shape fields in sane ranges, the model's
memory estimated from its family's shapes, then transformers' config and a meta-device build)."""
from __future__ import annotations

import ast

from corpora.base.errors import UserError, printable
from ssl_pretrain.hardware import load_preset

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
        # > 0 so that transformers builds masked_spec_embed (fairseq's mask_emb); the fine-tuning
        # recipe sets the masks it uses (downstream_asr/hparams/finetune_ctc.yaml); inert in eval()
        apply_spec_augment=True, mask_time_prob=0.05,
    )


def preset_config(preset: str):
    """The transformers config of a pretraining preset's model (ssl_pretrain/presets/<preset>.yaml):
    what a checkpoint the study pretrains, or a benchmark's random-init encoder, will be."""
    return hf_config(dict(load_preset(preset)["model"]))


# ---- a model folder's config.json, bounded before anything is built --------------------------------
# Every number below becomes a tensor shape or a loop count: an unchecked one allocates many GB, or
# builds 100,000 layers, or fails deep inside torch. The ranges hold every released model (the largest,
# XLS-R 2B: 48 layers x 1920; w2v-BERT 2.0: 24 x 1024) with a wide margin; the memory bound is separate
# (``check_architecture``'s ``max_bytes``) because a real model may exceed it and the user may raise it.
INT_RANGES = {
    "hidden_size": (1, 16384), "num_hidden_layers": (1, 256), "num_attention_heads": (1, 256),
    "intermediate_size": (1, 65536), "num_conv_pos_embeddings": (1, 1024), "num_conv_pos_embedding_groups": (1, 1024),
    "conv_pos_kernel_size": (1, 1024), "conv_depthwise_kernel_size": (1, 1024),
    "feature_projection_input_dim": (1, 8192),
    "num_buckets": (1, 4096), "max_bucket_distance": (1, 100000), "max_source_positions": (1, 20000),
    "left_max_position_embeddings": (0, 20000), "right_max_position_embeddings": (0, 20000),
    "num_adapter_layers": (0, 64), "adapter_kernel_size": (1, 1024), "adapter_stride": (1, 1024),
    "output_hidden_size": (1, 16384),
}
CONV_RANGES = {"conv_dim": (1, 8192), "conv_kernel": (1, 1024), "conv_stride": (1, 1024)}
MAX_CONV_LAYERS = 32
FIX = "restore the model folder's config.json as it was released (copy the folder again)"


def _positive_int(value, field: str, lo: int, hi: int, path) -> int:
    # bool is an int to Python, and "32" or 32.0 are what a hand-edited file holds: all refused here
    if isinstance(value, bool) or not isinstance(value, int):
        raise UserError(f"the model config's {field} {value!r} is not an integer", path=path, fix=FIX)
    if not lo <= value <= hi:
        raise UserError(f"the model config's {field} {value} is outside [{lo}, {hi}]", path=path, fix=FIX)
    return value


def architecture_fields(cfg: dict, family, path) -> dict:
    """The family's default config overlaid with ``cfg`` (what transformers will build), with every
    shape field checked: integers in INT_RANGES, conv lists of equal length, heads dividing the
    hidden size. A UserError naming the first field that is wrong."""
    from transformers import CONFIG_MAPPING
    merged = {**CONFIG_MAPPING[family.model_type]().to_dict(), **cfg}   # an absent field: the class default
    for field, (lo, hi) in INT_RANGES.items():
        if field in merged:
            _positive_int(merged[field], field, lo, hi, path)
    if family.input == "waveform":
        lists = {f: merged.get(f) for f in CONV_RANGES}
        for field, value in lists.items():
            if not isinstance(value, list) or not 1 <= len(value) <= MAX_CONV_LAYERS:
                raise UserError(f"the model config's {field} is not a list of 1 to {MAX_CONV_LAYERS} integers",
                                path=path, fix=FIX)
            for v in value:
                _positive_int(v, f"{field} entry", *CONV_RANGES[field], path)
        if len({len(v) for v in lists.values()}) != 1:
            sizes = ", ".join(f"{f} {len(v)}" for f, v in lists.items())
            raise UserError(f"the model config's conv lists differ in length ({sizes}): one entry per conv layer",
                            path=path, fix=FIX)
        # transformers' own check compares the saved count with the lists, and raises deep in its validator
        layers = cfg.get("num_feat_extract_layers", len(lists["conv_dim"]))
        if layers != len(lists["conv_dim"]):
            raise UserError(f"the model config's num_feat_extract_layers {layers!r} is not the "
                            f"{len(lists['conv_dim'])} conv layers conv_dim lists", path=path, fix=FIX)
    hidden, heads = merged["hidden_size"], merged["num_attention_heads"]
    if hidden % heads:
        raise UserError(f"the model config's hidden_size {hidden} is not divisible by num_attention_heads {heads}",
                        path=path, fix=FIX)
    groups = merged.get("num_conv_pos_embedding_groups", 1)
    if family.pos_conv != "none" and hidden % groups:
        raise UserError(f"the model config's hidden_size {hidden} is not divisible by num_conv_pos_embedding_groups "
                        f"{groups}", path=path, fix=FIX)
    return merged


def estimate_parameters(c: dict, family) -> int:
    """The parameter count of the encoder ``c`` describes, from the family's shapes (the weight
    matrices; biases and norms are a rounding error): front-end, projection, positional convolution,
    and per layer attention, feed-forward block(s) and a conformer's convolution module."""
    hidden, inner = c["hidden_size"], c["intermediate_size"]
    if family.input == "waveform":
        dims = [1, *c["conv_dim"]]
        n = sum(a * b * k for a, b, k in zip(dims, dims[1:], c["conv_kernel"])) + dims[-1] * hidden
    else:
        n = c["feature_projection_input_dim"] * hidden
    per_pos_conv = hidden * (hidden // c.get("num_conv_pos_embedding_groups", 1))
    if family.pos_conv == "one":
        n += per_pos_conv * c["num_conv_pos_embeddings"]
    elif family.pos_conv == "stack":
        n += per_pos_conv * c["num_conv_pos_embeddings"] * c["conv_pos_kernel_size"]
    layer = 4 * hidden * hidden + family.ffn_blocks * 2 * hidden * inner
    if family.conv_module:
        layer += 3 * hidden * hidden + hidden * c["conv_depthwise_kernel_size"]
    return n + c["num_hidden_layers"] * layer


def _too_large(params: int, max_bytes: int, path) -> UserError:
    return UserError(f"the model config describes a model of about {params / 1e6:,.0f}M parameters "
                     f"({params * 4 / 1e9:,.1f} GB in fp32), over the {max_bytes / 1e9:g} GB bound", path=path,
                     fix="check hidden_size, intermediate_size and num_hidden_layers; if the model really is this "
                         "large, raise the bound: GENDERGAP_MAX_MODEL_GB=N")


def _refuse_quantised(cfg: dict, path) -> None:
    if cfg.get("quantization_config") is not None:
        # transformers would hand it to bitsandbytes/GPTQ/... at load time: another library, other weights
        q = cfg["quantization_config"]
        kind = q.get("quant_method", "?") if isinstance(q, dict) else "?"
        raise UserError(f"the model config asks for quantised weights (quantization_config, "
                        f"{printable(str(kind))[:40]}): "
                        "gendergap compares models in full or mixed precision only", path=path,
                        fix="use the model's unquantised release, or remove quantization_config if its weights "
                        "are plain")


def check_architecture(cfg: dict, family, path, max_bytes: int):
    """A folder's config.json checked before anything is built: its shape fields
    (``architecture_fields``), the model's size estimated from them (4 bytes a parameter) against
    ``max_bytes``, then transformers' own config and the model built on the meta device (shapes
    only, no memory) so any other field it rejects is one line too. The transformers config."""
    _refuse_quantised(cfg, path)
    c = architecture_fields(cfg, family, path)
    params = estimate_parameters(c, family)
    if params * 4 > max_bytes:   # before the meta build: a huge in-range config would take seconds there too
        raise _too_large(params, max_bytes, path)
    return _built_within(cfg, family.model_type, family.label, path, max_bytes)


def check_any_architecture(cfg: dict, path, max_bytes: int):
    """``check_architecture`` for a model of no self-supervised family (a released recogniser:
    Whisper, Speech2Text, ...): the shape fields it has within INT_RANGES, then the model built on
    the meta device within ``max_bytes``. The transformers config."""
    from transformers import CONFIG_MAPPING
    _refuse_quantised(cfg, path)
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise UserError(f"the model config's model_type {printable(repr(model_type))[:60]} is not one transformers "
                        "knows", path=path, fix=FIX)
    for field, (lo, hi) in INT_RANGES.items():
        if field in cfg:
            _positive_int(cfg[field], field, lo, hi, path)
    for field in ("encoder_layers", "decoder_layers", "num_mel_bins", "d_model", "encoder_ffn_dim", "decoder_ffn_dim"):
        if field in cfg:   # the sequence-to-sequence models' own names for the same shapes
            _positive_int(cfg[field], field, 1, INT_RANGES["intermediate_size"][1], path)
    return _built_within(cfg, model_type, model_type, path, max_bytes)


def _built_within(cfg: dict, model_type: str, label: str, path, max_bytes: int):
    from transformers import CONFIG_MAPPING
    try:
        config = CONFIG_MAPPING[model_type].from_dict(cfg)
    except Exception as e:  # noqa: BLE001 -- transformers' validators raise several kinds; all mean a bad field
        raise UserError(f"the model config is not a valid {label} config ({_one_line(e)})", path=path,
                        fix=FIX) from None
    exact = _meta_parameters(config, path)
    if exact * 4 > max_bytes:
        raise _too_large(exact, max_bytes, path)
    return config


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200]


def _meta_parameters(config, path) -> int:
    """The exact parameter count of the model built from ``config`` on the meta device: a field the
    checks above do not know (an activation's name, a norm kind) fails here, in one line."""
    import torch
    from transformers import MODEL_MAPPING
    if type(config) not in MODEL_MAPPING:
        return 0   # no bare model class to build (bounded by INT_RANGES alone)
    cls = MODEL_MAPPING[type(config)]   # imported outside the meta device (see families.forward_gflops)
    try:
        with torch.device("meta"):
            model = cls(config)
    except Exception as e:  # noqa: BLE001 -- building runs arbitrary layer constructors on the file's values
        raise UserError(f"no model can be built from the model config ({type(e).__name__}: {_one_line(e)})", path=path,
                        fix=FIX) from None
    return int(sum(p.numel() for p in model.parameters()))
