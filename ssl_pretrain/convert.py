"""fairseq wav2vec 2.0 pretraining checkpoint -> transformers `Wav2Vec2Model` folder.

A state-dict mapping written from the two module trees (fairseq's `Wav2Vec2Model` and
transformers' `Wav2Vec2Model`); the pretraining-only parts (quantizer, project_q, final_proj)
are dropped because downstream tasks use the encoder. tests/test_ssl_convert.py checks every
layer's hidden states against fairseq's own forward pass.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from corpora.base.atomic import swap_in_dir, write_json
from corpora.base.boundary import output_dir
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint
from ssl_pretrain.architecture import hf_config
from ssl_pretrain.packed import is_packed, load_packed

# fairseq model names that are fine-tuned wrappers, not pretraining checkpoints
FINETUNED_MODELS = {"wav2vec_ctc": "a CTC fine-tuned model", "wav2vec_seq2seq": "a seq2seq fine-tuned model",
                    "wav2vec2_ctc": "a CTC fine-tuned model"}
PRETRAINING_ONLY = ("quantizer.", "project_q.", "final_proj.", "project_inp.", "target_glu.")


def load_fairseq_checkpoint(path: str | os.PathLike, trust: bool = False, mmap: bool = False) -> dict:
    """A fairseq checkpoint dict, read on the CPU without unpickling arbitrary objects (see
    ssl_pretrain.safe_load; ``trust`` unpickles everything), or a packed .safetensors release.
    ``mmap``: the tensors mapped, not read (enough for the config and the shapes)."""
    from ssl_pretrain.safe_load import load_torch_file
    if is_packed(path):
        return load_packed(path)
    return load_torch_file(path, trust=trust, what="fairseq checkpoint", mmap=mmap)


def model_config(ckpt: dict, path: str | os.PathLike = "<checkpoint>") -> dict:
    """The model section of a fairseq checkpoint's config, checked to be wav2vec 2.0 *pretraining*."""
    if not isinstance(ckpt, dict) or "model" not in ckpt:
        raise UserError("not a fairseq checkpoint (no `model` state dict)", path=path,
                        fix="give a checkpoint written by fairseq-hydra-train")
    cfg = ckpt.get("cfg")
    if cfg is not None:
        mcfg = {k: cfg["model"][k] for k in cfg["model"]}  # a dict or an omegaconf DictConfig
    elif ckpt.get("args") is not None:  # fairseq < 0.10 checkpoints keep an argparse Namespace
        mcfg = dict(vars(ckpt["args"]))
        mcfg["_name"] = mcfg.get("arch", "")
    else:
        raise UserError("checkpoint has neither `cfg` nor `args`", path=path,
                        fix="give a checkpoint written by fairseq")
    name = str(mcfg.get("_name", ""))
    keys = ckpt["model"].keys()
    if name in FINETUNED_MODELS or any(k.startswith("w2v_encoder.") for k in keys) or "w2v_path" in mcfg:
        kind = FINETUNED_MODELS.get(name, "a fine-tuned model")
        raise UserError(f"this is {kind} (fairseq model `{name}`), not a wav2vec 2.0 pretraining checkpoint",
                        path=path, fix="give the pretrained checkpoint the fine-tuning started from "
                        "(its path is in the fine-tuned model's cfg.model.w2v_path)")
    if not name.startswith("wav2vec2") or "mask_emb" not in keys:
        raise UserError(f"fairseq model `{name}` is not a wav2vec 2.0 model", path=path,
                        fix="give a checkpoint of fairseq's wav2vec2 model (task audio_pretraining)")
    for key, want in (("layer_type", "transformer"), ("pos_conv_depth", 1), ("pos_enc_type", "abs")):
        if mcfg.get(key, want) != want:
            raise UserError(f"model.{key}={mcfg[key]!r} has no transformers Wav2Vec2Model equivalent", path=path,
                            fix=f"only {key}={want!r} models convert")
    return mcfg


def _rename(key: str) -> str | None:
    """fairseq parameter name -> transformers name (None: pretraining-only, dropped)."""
    if key.startswith(PRETRAINING_ONLY):
        return None
    rules = [
        (r"^mask_emb$", "masked_spec_embed"),
        (r"^feature_extractor\.conv_layers\.(\d+)\.0\.(weight|bias)$", r"feature_extractor.conv_layers.\1.conv.\2"),
        # layer_norm extractor: Sequential(conv, dropout, Sequential(TransposeLast, LayerNorm, TransposeLast), GELU)
        (r"^feature_extractor\.conv_layers\.(\d+)\.2\.1\.(weight|bias)$",
         r"feature_extractor.conv_layers.\1.layer_norm.\2"),
        # default extractor: Sequential(conv, dropout, GroupNorm, GELU) in block 0 only
        (r"^feature_extractor\.conv_layers\.0\.2\.(weight|bias)$", r"feature_extractor.conv_layers.0.layer_norm.\1"),
        (r"^post_extract_proj\.(weight|bias)$", r"feature_projection.projection.\1"),
        (r"^layer_norm\.(weight|bias)$", r"feature_projection.layer_norm.\1"),
        (r"^encoder\.pos_conv\.0\.bias$", "encoder.pos_conv_embed.conv.bias"),
        (r"^encoder\.pos_conv\.0\.weight_g$", "encoder.pos_conv_embed.conv.WEIGHT_G"),
        (r"^encoder\.pos_conv\.0\.weight_v$", "encoder.pos_conv_embed.conv.WEIGHT_V"),
        (r"^encoder\.layer_norm\.(weight|bias)$", r"encoder.layer_norm.\1"),
        (r"^encoder\.layers\.(\d+)\.self_attn\.(k|v|q|out)_proj\.(weight|bias)$",
         r"encoder.layers.\1.attention.\2_proj.\3"),
        (r"^encoder\.layers\.(\d+)\.self_attn_layer_norm\.(weight|bias)$", r"encoder.layers.\1.layer_norm.\2"),
        (r"^encoder\.layers\.(\d+)\.fc1\.(weight|bias)$", r"encoder.layers.\1.feed_forward.intermediate_dense.\2"),
        (r"^encoder\.layers\.(\d+)\.fc2\.(weight|bias)$", r"encoder.layers.\1.feed_forward.output_dense.\2"),
        (r"^encoder\.layers\.(\d+)\.final_layer_norm\.(weight|bias)$", r"encoder.layers.\1.final_layer_norm.\2"),
    ]
    for pattern, repl in rules:
        if re.match(pattern, key):
            return re.sub(pattern, repl, key)
    return "UNMAPPED"


def fairseq_to_transformers(ckpt: dict, path: str | os.PathLike = "<checkpoint>"):
    """Build a transformers Wav2Vec2Model (eval mode) holding the fairseq checkpoint's encoder.

    Returns (model, info) where info says what was dropped and whether inputs are normalised.
    """
    from transformers import Wav2Vec2Model
    mcfg = model_config(ckpt, path)
    config = hf_config(mcfg)
    model = Wav2Vec2Model(config).eval()
    target = model.state_dict()
    # transformers stores the weight-normed positional conv either as weight_g/weight_v or,
    # with torch's parametrizations, as original0/original1
    g_name = next(k for k in target
                  if k.startswith("encoder.pos_conv_embed.conv.") and k.endswith(("weight_g", "original0")))
    v_name = next(k for k in target
                  if k.startswith("encoder.pos_conv_embed.conv.") and k.endswith(("weight_v", "original1")))
    mapped, dropped, unmapped = {}, [], []
    for key, value in ckpt["model"].items():
        new = _rename(key)
        if new is None:
            dropped.append(key)
        elif new == "UNMAPPED":
            unmapped.append(key)
        else:
            new = new.replace("encoder.pos_conv_embed.conv.WEIGHT_G", g_name).replace(
                "encoder.pos_conv_embed.conv.WEIGHT_V", v_name)
            mapped[new] = value.float()
    missing = sorted(set(target) - set(mapped))
    if unmapped or missing:
        raise UserError(f"cannot map the checkpoint onto transformers Wav2Vec2Model: unmapped {unmapped[:5]}, "
                        f"missing {missing[:5]}", path=path,
                        fix="only standard fairseq wav2vec2 pretraining checkpoints convert")
    for k, v in mapped.items():
        if tuple(v.shape) != tuple(target[k].shape):
            raise UserError(f"shape mismatch for {k}: checkpoint {tuple(v.shape)} vs model {tuple(target[k].shape)}",
                            path=path, fix="the checkpoint's cfg.model does not describe its weights")
    model.load_state_dict(mapped, strict=True)
    task = ckpt.get("cfg", {}).get("task", {}) if ckpt.get("cfg") is not None else vars(ckpt.get("args", {}))
    info = {"normalize": bool(task.get("normalize", False)), "sample_rate": int(task.get("sample_rate", 16000)),
            "dropped": dropped, "fairseq_model": mcfg.get("_name"),
            "num_updates": num_updates(ckpt)}
    return model, info


def num_updates(ckpt: dict) -> int | None:
    """Updates trained, as fairseq records it in the checkpoint."""
    hist = ckpt.get("optimizer_history") or []
    return int(hist[-1]["num_updates"]) if hist and "num_updates" in hist[-1] else None


def convert_checkpoint(path: str | os.PathLike, out_dir: str | os.PathLike, trust: bool = False) -> Path:
    """Write a transformers folder (config.json, model.safetensors, preprocessor_config.json)
    plus gendergap_source.json saying where it came from. Returns ``out_dir``.

    ``out_dir`` is written whole or not at all (built in a fresh temporary folder beside it, then
    swapped in). An existing ``out_dir`` is replaced only when it is an earlier conversion (it holds
    gendergap_source.json) or empty: a folder of the user's own files is never deleted."""
    import tempfile

    out_dir = output_dir(out_dir, "output folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "gendergap_source.json").is_file():
        raise UserError("the output folder exists and holds files that are not an earlier conversion", path=out_dir,
                        fix="give a new or empty folder (a conversion replaces only a folder it wrote before)")
    ckpt = load_fairseq_checkpoint(path, trust=trust)
    model, info = fairseq_to_transformers(ckpt, path)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        _write_folder(model, info, path, tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    swap_in_dir(tmp, out_dir)
    return out_dir


def _write_folder(model, info: dict, path, tmp: Path) -> None:
    from transformers import Wav2Vec2FeatureExtractor
    model.save_pretrained(tmp)
    # group-norm (base-style) models were pretrained on zero-padded batches without a mask
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=info["sample_rate"], padding_value=0.0,
                             do_normalize=info["normalize"],
                             return_attention_mask=model.config.feat_extract_norm == "layer").save_pretrained(tmp)
    write_json(tmp / "gendergap_source.json", {"source": file_fingerprint(path), **info})
