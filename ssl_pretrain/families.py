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

import math
import os
from dataclasses import dataclass
from pathlib import Path

from corpora.base.boundary import MAX_CONFIG_BYTES, finite, read_json
from corpora.base.errors import UserError


@dataclass(frozen=True)
class Family:
    model_type: str
    label: str              # the name a table prints
    input: str              # "waveform" or "fbank"
    finetune: bool = True   # SpeechBrain's wav2vec 2.0 lobe fine-tunes it end to end
    # its shapes, for the size estimate made before anything is built (architecture.estimate_parameters):
    ffn_blocks: int = 1         # feed-forward blocks per layer (a conformer layer has two, macaron style)
    conv_module: bool = False   # a conformer layer's convolution module (pointwise, depthwise, pointwise)
    pos_conv: str = "one"       # positional convolution: "one" grouped conv, a "stack" of them, or "none"
    # weights the frozen encoder never reads: SpecAugment's mask embedding (training only) may be absent
    inert_weights: tuple = ("masked_spec_embed",)
    # a conv front-end's norm where the config names none (data2vec-audio's conv blocks are all LayerNorm)
    conv_norm: str | None = None

    @property
    def filterbank(self) -> bool:
        """The input is log-mel filterbank frames (w2v-BERT), not the waveform through a conv front-end."""
        return self.input == "fbank"

    def frame_shift_s(self, config, sample_rate: int) -> float:
        """Seconds between output frames: the conv strides for a waveform front-end; the filterbank's
        10 ms hop times its stacking stride for w2v-BERT (20 ms in both standard cases)."""
        if self.filterbank:
            return 0.01 * (fbank_dim(config) // FBANK_BINS)
        return math.prod(config.conv_stride) / sample_rate

    def front_end(self, config) -> str:
        """The front-end as Table 3 prints it: "fbank 80x2", "conv, GroupNorm" or "conv, LayerNorm"."""
        if self.filterbank:
            return f"fbank {fbank_dim(config) // 2}x2"
        norm = self.conv_norm or getattr(config, "feat_extract_norm", "group")
        return "conv, " + ("GroupNorm" if norm == "group" else "LayerNorm")

    def feature_extractor(self, meta: dict):
        """The per-utterance feature extractor a filterbank family's input goes through, built from
        its folder's preprocessor_config.json ``meta`` as data (never an Auto class reading a class
        name from the file); None for a waveform family (its conv front-end is part of the model)."""
        if not self.filterbank:
            return None
        from transformers import SeamlessM4TFeatureExtractor  # lazy: transformers is heavy

        return SeamlessM4TFeatureExtractor.from_dict(meta)

    def meta_input(self, config, seconds: float):
        """A ``seconds``-long utterance as the model takes it, on the meta device (shapes only)."""
        import torch  # lazy: only the cost table counts FLOPs

        if self.filterbank:
            return torch.zeros(1, int(seconds * 50), fbank_dim(config), device="meta")
        return torch.zeros(1, int(seconds * 16000), device="meta")


FAMILIES = {f.model_type: f for f in (
    Family("wav2vec2", "wav2vec 2.0", "waveform"),
    Family("hubert", "HuBERT", "waveform"),
    Family("wavlm", "WavLM", "waveform"),
    Family("data2vec-audio", "data2vec", "waveform", pos_conv="stack", conv_norm="layer"),
    Family("wav2vec2-conformer", "wav2vec 2.0 conformer", "waveform", ffn_blocks=2, conv_module=True),
    # SpeechBrain's lobe reads waveforms (and a Wav2Vec2FeatureExtractor): no end-to-end recipe here
    Family("wav2vec2-bert", "w2v-BERT 2.0", "fbank", finetune=False, ffn_blocks=2, conv_module=True,
           pos_conv="none"),
)}
SUPPORTED = ", ".join(FAMILIES)
# what a fairseq wav2vec 2.0 checkpoint is once converted (ssl_pretrain.convert)
WAV2VEC2 = FAMILIES["wav2vec2"]
FBANK_BINS = 80   # mel bins per filterbank frame (w2v-BERT stacks two frames: 160 inputs)
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


def config_family(config, path: Path | None = None) -> Family:
    """The Family of a transformers config object (a built model's ``.config``)."""
    return family_of({"model_type": config.model_type}, path)


def fbank_dim(config) -> int:
    """A filterbank family's input width: mel bins times the frames stacked (w2v-BERT: 80 x 2)."""
    return int(getattr(config, "feature_projection_input_dim", 2 * FBANK_BINS))


def frame_shift_s(config, sample_rate: int) -> float:
    """Seconds between a model's output frames (Family.frame_shift_s of its config's family)."""
    return config_family(config).frame_shift_s(config, sample_rate)


def folder_family(path) -> Family | None:
    """The family a transformers folder's config.json names; None when it is not a readable folder
    of a supported family (the checkpoint checks say what is wrong with it)."""
    try:
        cfg = read_json(Path(path) / "config.json", "config.json", shape=dict, max_bytes=MAX_CONFIG_BYTES)
    except UserError:
        return None
    return FAMILIES.get(cfg.get("model_type"))


def check_finetunable(family: Family, name: str) -> None:
    """End-to-end fine-tuning refused in one line where SpeechBrain cannot take the family."""
    if not family.finetune:
        raise UserError(f"{name} is a {family.label} model, which asr-e2e cannot fine-tune: {NOT_FINETUNABLE}",
                        fix="drop the asr-e2e task for this checkpoint (or run it on the waveform families)")


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
    family = config_family(config)
    if front_end_only and family.filterbank:
        return 0.0
    x = family.meta_input(config, seconds)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.feature_extractor(x) if front_end_only else model(x)
    return counter.get_total_flops() / seconds / 1e9


def describe(config, sample_rate: int, path: Path) -> dict:
    """What an entry records of a transformers config: family, size (parameters, layers, hidden
    size), front-end, sample rate."""
    family = config_family(config, path)
    return {"family": family.model_type, "parameters": count_parameters(config),
            "layers": int(config.num_hidden_layers), "hidden_size": int(config.hidden_size),
            "front_end": family.front_end(config), "sample_rate": int(sample_rate)}


def read_preprocessor(folder: Path) -> dict:
    """The folder's preprocessor_config.json as a dict ({} when absent), read as data."""
    path = Path(folder) / "preprocessor_config.json"
    if not os.path.lexists(path):
        return {}
    meta = read_json(path, "preprocessor_config.json", shape=dict, max_bytes=MAX_CONFIG_BYTES,
                     fix="download the model folder again")
    rate = meta.get("sampling_rate", 16000)
    # an int: it becomes a resampling ratio and a frame count (16000.5 would be truncated silently)
    finite(rate, "sampling_rate", lo=1000, hi=192000, path=path)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not float(rate).is_integer():
        raise UserError(f"sampling_rate {rate!r} is not a whole number of Hz", path=path,
                        fix="give the rate the model was trained at, e.g. 16000")
    if not isinstance(meta.get("do_normalize", False), bool):   # a "false" string would read as true
        raise UserError(f"do_normalize {meta['do_normalize']!r} is not true or false", path=path,
                        fix="download the model folder again")
    return meta


def check_weights_fit(model, info: dict, family: Family | None, weights) -> None:
    """Refuse weights that do not fit the config they were loaded under: transformers drops an
    unexpected weight and leaves a missing one at random init, so WavLM's weights under a wav2vec2
    config (or HuBERT's under data2vec) would load, silently a different model. ``info`` is
    from_pretrained's ``output_loading_info``. An unexpected weight outside the encoder's modules
    (a pretraining checkpoint's quantizer, project_q and project_hid; a CTC head) is no part of
    the features and passes. ``family`` None: a released recogniser of no self-supervised family
    (Whisper, ...), under the same rule with the default inert weights."""
    inert = family.inert_weights if family else Family.inert_weights
    label = family.label if family else model.config.model_type
    encoder = {n for n, _ in model.named_children()} | {n for n, _ in model.named_parameters(recurse=False)}
    # by its own name, so that a recogniser's ("wav2vec2.masked_spec_embed") counts as the encoder's
    missing = sorted(k for k in info.get("missing_keys", ()) if k.split(".")[-1] not in inert)
    unexpected = sorted(k for k in info.get("unexpected_keys", ()) if k.split(".")[0] in encoder)
    mismatched = sorted(str(k[0] if isinstance(k, (tuple, list)) else k) for k in info.get("mismatched_keys", ()))
    found = [(n, what) for n, what in ((len(missing), "missing"), (len(unexpected), "unexpected"),
                                        (len(mismatched), "of another shape")) if n]
    if found:
        first = (missing or unexpected or mismatched)[0]
        counts = ", ".join(f"{n} encoder weights {what}" for n, what in found)
        raise UserError(f"the weights do not fit config.json (a {label} model): {counts} (e.g. '{first}'); "
                        "they would be dropped or left at random init", path=weights,
                        fix="give the config.json the weights were saved with (copy the model folder again)")
