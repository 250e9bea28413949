"""The self-supervised model families a checkpoint may be: what each takes, and what it is.

A transformers folder is a checkpoint when its ``config.json`` names one of FAMILIES as its
``model_type``. They share wav2vec 2.0's layout (a front-end, a feature projection, a transformer or
conformer encoder whose per-layer states are the features), so one batch-invariant forward
(ssl_pretrain.invariant) serves them all:

==================  ==================================  ===========================================
model_type          models                              front-end
==================  ==================================  ===========================================
wav2vec2            wav2vec 2.0, XLS-R, MMS, LeBenchmark  waveform, conv (GroupNorm or LayerNorm)
hubert              HuBERT                              waveform, conv
wavlm               WavLM                               waveform, conv; gated relative position bias
data2vec-audio      data2vec (audio)                    waveform, conv (LayerNorm); 5-layer pos. conv
wav2vec2-conformer  wav2vec 2.0 conformer               waveform, conv; conformer encoder
wav2vec2-bert       w2v-BERT 2.0                        80-bin log-mel filterbank, stacked x2
==================  ==================================  ===========================================

``describe`` is what a registry entry and Table 3 record about a model: family, parameter count,
layers, hidden size, the front-end and its sample rate, read from the config (no weights loaded);
``forward_gflops`` what its forward costs per second of audio (the cost table of a dry run).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from corpora.base.errors import UserError


@dataclass(frozen=True)
class Family:
    model_type: str
    label: str              # the name a table prints
    input: str              # "waveform" or "fbank"
    finetune: bool = True   # SpeechBrain's wav2vec 2.0 lobe fine-tunes it end to end


FAMILIES = {f.model_type: f for f in (
    Family("wav2vec2", "wav2vec 2.0", "waveform"),
    Family("hubert", "HuBERT", "waveform"),
    Family("wavlm", "WavLM", "waveform"),
    Family("data2vec-audio", "data2vec", "waveform"),
    Family("wav2vec2-conformer", "wav2vec 2.0 conformer", "waveform"),
    # SpeechBrain's lobe reads waveforms (and a Wav2Vec2FeatureExtractor): no end-to-end recipe here
    Family("wav2vec2-bert", "w2v-BERT 2.0", "fbank", finetune=False),
)}
SUPPORTED = ", ".join(FAMILIES)
NOT_FINETUNABLE = ("SpeechBrain's wav2vec 2.0 lobe takes waveforms; w2v-BERT 2.0 reads log-mel "
                   "filterbanks: run it in the frozen-feature tasks (asr-frozen, st, probe)")


def family_of(cfg: dict, path: Path) -> Family:
    """The Family of a transformers config (a UserError naming the supported ones otherwise)."""
    model_type = cfg.get("model_type")
    if model_type not in FAMILIES:
        raise UserError(f"model_type {model_type!r} is not a supported self-supervised family "
                        f"(supported: {SUPPORTED})", path=path,
                        fix="give a folder of one of these families, or a fairseq wav2vec 2.0 .pt")
    return FAMILIES[model_type]


def folder_family(path) -> Family | None:
    """The family a transformers folder's config.json names; None when it is not a readable folder
    of a supported family (the checkpoint checks say what is wrong with it)."""
    try:
        cfg = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return FAMILIES.get(cfg.get("model_type")) if isinstance(cfg, dict) else None


def check_finetunable(family: Family, name: str) -> None:
    """End-to-end fine-tuning refused in one line where SpeechBrain cannot take the family."""
    if not family.finetune:
        raise UserError(f"{name} is a {family.label} model, which asr-e2e cannot fine-tune: {NOT_FINETUNABLE}",
                        fix="drop the asr-e2e task for this checkpoint (or run it on the waveform families)")


def frame_shift_s(config, sample_rate: int) -> float:
    """Seconds between output frames: the conv strides for a waveform front-end; the filterbank's
    10 ms hop times its stacking stride for w2v-BERT (20 ms in both standard cases)."""
    if config.model_type == "wav2vec2-bert":
        return 0.01 * int(getattr(config, "feature_projection_input_dim", 160) // 80)
    return math.prod(config.conv_stride) / sample_rate


def count_parameters(config) -> int | None:
    """The parameter count of a transformers config's model, built on the meta device (no memory,
    no weights); None for a config no model can be built from."""
    import torch
    from transformers import MODEL_MAPPING

    cls = MODEL_MAPPING[type(config)]   # imported outside the meta device (see forward_gflops)
    try:
        with torch.device("meta"):
            model = cls(config)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError):  # an odd config: no count
        return None
    return int(sum(p.numel() for p in model.parameters()))


def forward_gflops(config, seconds: float = 10.0, front_end_only: bool = False) -> float:
    """GFLOP per second of audio of the encoder's forward, counted by torch's FlopCounterMode on the
    meta device (shapes only: no memory, no weights) for one ``seconds``-long utterance.
    ``front_end_only``: the convolutional front-end's share (0 for a filterbank family)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import MODEL_MAPPING

    cls = MODEL_MAPPING[type(config)]   # imported here, not under the meta device: a module imported
    with torch.device("meta"):          # there keeps meta tensors as its constants (torchaudio's did)
        model = cls(config).eval()
    if config.model_type == "wav2vec2-bert":
        x = torch.zeros(1, int(seconds * 50), int(getattr(config, "feature_projection_input_dim", 160)), device="meta")
    else:
        x = torch.zeros(1, int(seconds * 16000), device="meta")
    if front_end_only and config.model_type == "wav2vec2-bert":
        return 0.0
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.feature_extractor(x) if front_end_only else model(x)
    return counter.get_total_flops() / seconds / 1e9


def describe(config, sample_rate: int, path: Path) -> dict:
    """What an entry records of a transformers config: family, size (parameters, layers, hidden
    size), front-end, sample rate."""
    family = family_of({"model_type": config.model_type}, path)
    if family.input == "fbank":
        front_end = f"fbank {int(getattr(config, 'feature_projection_input_dim', 160)) // 2}x2"
    else:
        # data2vec-audio has no feat_extract_norm: its conv blocks are all LayerNorm ones
        norm = "layer" if family.model_type == "data2vec-audio" else getattr(config, "feat_extract_norm", "group")
        front_end = "conv, " + ("GroupNorm" if norm == "group" else "LayerNorm")
    return {"family": family.model_type, "parameters": count_parameters(config),
            "layers": int(config.num_hidden_layers), "hidden_size": int(config.hidden_size),
            "front_end": front_end, "sample_rate": int(sample_rate)}


def read_preprocessor(folder: Path) -> dict:
    """The folder's preprocessor_config.json as a dict ({} when absent), read as data."""
    from corpora.base.boundary import finite
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"preprocessor_config.json is not valid JSON ({e})", path=path,
                        fix="download the model folder again") from None
    if not isinstance(meta, dict):
        raise UserError("preprocessor_config.json is not a JSON object", path=path, fix="download the model folder again")
    finite(meta.get("sampling_rate", 16000), "sampling_rate", lo=1000, hi=384000, path=path)
    return meta
