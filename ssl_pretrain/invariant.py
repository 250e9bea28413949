"""Batch-invariant inference for wav2vec 2.0-style encoders: a score depends on the model and the
utterance, never on which other utterances share its batch.

Padding reaches real frames in three places when a batch is run the plain way:

- **waveform normalisation** (fairseq's ``normalize``, transformers' ``do_normalize``,
  SpeechBrain's wrapper): the mean and variance of a zero-padded row include the padding;
- **GroupNorm front-ends** (``feat_extract_norm == "group"``, the "base" models): the first
  convolution's output is normalised over time, padding included, so every frame changes;
- **attention** over padded frames, where no mask is given.

``encode`` avoids all three: each utterance is normalised over its own samples, the convolutional
front-end runs one utterance at a time where it normalises over time (LayerNorm front-ends are per
frame: batched, padding never reaches a real frame), and the transformer gets the frame mask. It is
the one forward of every path that scores (ssl_pretrain.features for the feature store, the
fine-tuning module of downstream_asr for training-time validation, decode, transcribe and export).
On a single utterance it computes exactly what the plain forward computes.

Works for every family of ssl_pretrain.families: a front-end (the conv stack of wav2vec2, hubert,
wavlm, data2vec-audio and wav2vec2-conformer; w2v-BERT's log-mel filterbanks, computed per
utterance by its feature extractor), ``feature_projection`` and ``encoder``. Two encoders mix frames
over time outside attention: data2vec's five positional convolutions and the conformer's depthwise
convolution. A lone utterance's convolution sees zero padding past its end; in a batch it would see
the other utterances' padded frames, which the layers before it made non-zero.
``padded_frames_zeroed`` puts zeros there, so those convolutions compute what they compute alone.
"""
from __future__ import annotations

import hashlib
from contextlib import contextmanager

import torch

from ssl_pretrain.families import config_family


def absolute_lengths(wavs: torch.Tensor, rel_lengths: torch.Tensor | None) -> torch.Tensor:
    """Samples per row from SpeechBrain's relative lengths (1.0 = the padded length)."""
    n = wavs.shape[1]
    if rel_lengths is None:
        return torch.full((wavs.shape[0],), n, dtype=torch.long, device=wavs.device)
    return torch.round(rel_lengths.float() * n).long().clamp(1, n).to(wavs.device)


def normalise(x: torch.Tensor) -> torch.Tensor:
    """One utterance (1-D) to zero mean and unit variance over its own samples: fairseq's
    ``task.normalize`` and SpeechBrain's wrapper on a batch of one (layer norm, eps 1e-5)."""
    return torch.nn.functional.layer_norm(x, x.shape)


def unpad(wavs: torch.Tensor, lengths: torch.Tensor, normalize: bool) -> list[torch.Tensor]:
    """The rows of a padded batch cut to their lengths, each normalised on its own if asked."""
    xs = [w[: int(n)] for w, n in zip(wavs, lengths.tolist())]
    return [normalise(x) for x in xs] if normalize else xs


def front_end(model, xs: list[torch.Tensor], fbank=None, cache: "FrontEndCache | None" = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's front-end on 1-D waveforms: (features [B, T, C] zero-padded, frames [B]).
    ``fbank``: the feature extractor of a filterbank family (w2v-BERT), run per utterance.
    ``cache``: a frozen conv front-end's outputs kept per waveform (FrontEndCache)."""
    if config_family(model.config).filterbank:
        return filterbank_features(fbank, xs)
    if cache is not None:
        return cache.features(model, xs)
    return conv_features(model, xs)


class FrontEndCache:
    """A frozen convolutional front-end's output per waveform, computed once per training job.

    When the front-end is frozen and nothing augments the waveform, every epoch feeds it the same
    utterances again: its output is a frozen feature, like the feature store's. Each utterance runs
    alone (what the batch-invariant forward computes for it anyway), under no_grad, and is kept
    under a digest of its samples, so a changed waveform (speed perturbation) is simply a new entry
    and a cached output is always the one recomputing would give. Entries are added until
    ``max_mb`` is reached (a training job cycles through its data, so keeping the first ones beats
    evicting); the rest are computed each time."""

    def __init__(self, max_mb: float):
        self.max_bytes = int(max_mb * 2**20)
        self.bytes = 0
        self.entries: dict[bytes, torch.Tensor] = {}
        self.hits = self.misses = 0

    @staticmethod
    def digest(x: torch.Tensor) -> bytes:
        return hashlib.blake2b(x.detach().contiguous().cpu().numpy().tobytes(), digest_size=16).digest()

    def features(self, model, xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        lengths = torch.tensor([len(x) for x in xs], device=xs[0].device)
        frames = model._get_feat_extract_output_lengths(lengths).long()
        per_utt = []
        for x in xs:
            key = self.digest(x)
            feats = self.entries.get(key)
            if feats is None:
                self.misses += 1
                with torch.no_grad():
                    feats = model.feature_extractor(x[None]).transpose(1, 2)[0]
                if self.bytes + feats.numel() * feats.element_size() <= self.max_bytes:
                    self.entries[key] = feats
                    self.bytes += feats.numel() * feats.element_size()
            else:
                self.hits += 1
            per_utt.append(feats)
        return torch.nn.utils.rnn.pad_sequence(per_utt, batch_first=True), frames


def filterbank_features(fbank, xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """w2v-BERT's input: its feature extractor's stacked log-mel frames, one utterance at a time
    (it normalises each mel bin over the utterance's own frames), then padded."""
    if fbank is None:
        raise ValueError("a filterbank model needs its feature extractor (preprocessor_config.json)")
    per_utt = [torch.as_tensor(fbank(x.detach().float().cpu().numpy(), sampling_rate=fbank.sampling_rate,
                                     return_tensors="np")["input_features"][0]) for x in xs]
    frames = torch.tensor([len(f) for f in per_utt], device=xs[0].device)
    return torch.nn.utils.rnn.pad_sequence(per_utt, batch_first=True).to(xs[0].device), frames


def conv_features(model, xs: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The convolutional front-end on 1-D waveforms: (features [B, T, C] zero-padded, frames [B])."""
    lengths = torch.tensor([len(x) for x in xs], device=xs[0].device)
    frames = model._get_feat_extract_output_lengths(lengths).long()
    if getattr(model.config, "feat_extract_norm", "layer") == "group":
        # GroupNorm in the first conv block normalises over time: padding would change every frame
        per_utt = [model.feature_extractor(x[None]).transpose(1, 2)[0] for x in xs]
        return torch.nn.utils.rnn.pad_sequence(per_utt, batch_first=True), frames
    # layer-norm front-ends are per frame: a real frame never sees padding
    batch = torch.nn.utils.rnn.pad_sequence(xs, batch_first=True)
    return model.feature_extractor(batch).transpose(1, 2), frames


def frame_mask(frames: torch.Tensor, n_frames: int) -> torch.Tensor:
    """[B, T] True on real frames."""
    return torch.arange(n_frames, device=frames.device)[None, :] < frames[:, None]


@contextmanager
def padded_frames_zeroed(model, mask: torch.Tensor):
    """While inside, every temporal convolution of the encoder reads zeros on padded frames (its
    input [B, C, T] with T the mask's length; a causal convolution's left-padded input is left
    alone, as its model masks it already). Kernel-1 convolutions are unaffected, real frames too."""
    keep = mask[:, None, :]

    def zero_padding(module, args):
        x = args[0]
        if x.dim() == 3 and x.shape[-1] == keep.shape[-1] and x.shape[0] == keep.shape[0]:
            return (x * keep.to(x.dtype),) + tuple(args[1:])
        return None

    hooks = [m.register_forward_pre_hook(zero_padding) for m in model.encoder.modules()
             if isinstance(m, torch.nn.Conv1d) and m.kernel_size[0] > 1]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def project(model, feats: torch.Tensor) -> torch.Tensor:
    """The feature projection (wav2vec2/wavlm/data2vec return (hidden, normed features); hubert hidden)."""
    out = model.feature_projection(feats)
    return out[0] if isinstance(out, tuple) else out


def encode(model, wavs: torch.Tensor, lengths: torch.Tensor, *, normalize: bool,
           all_layers: bool = False, fbank=None, cache: FrontEndCache | None = None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's last hidden states for a padded batch of waveforms [B, T] with ``lengths``
    samples each: (states [B, T', D], frames [B]); frames past an utterance's own are not its own.
    ``all_layers``: every layer's instead, [L + 1, B, T', D] (transformers' ``hidden_states``: index 0
    the first layer's input, L the last output). In training mode the model's SpecAugment
    (``apply_spec_augment``) masks real frames only. ``cache``: a frozen front-end's outputs
    (FrontEndCache)."""
    check_plain_encoder(model)
    feats, frames = front_end(model, unpad(wavs, lengths, normalize), fbank, cache)
    mask = frame_mask(frames, feats.shape[1])
    hidden = project(model, feats)
    if hasattr(model, "_mask_hidden_states"):
        hidden = model._mask_hidden_states(hidden, attention_mask=mask)
    if all_layers:
        return torch.stack(layer_states(model, hidden, mask)), frames
    return run_encoder(model, hidden, mask), frames


def check_plain_encoder(model) -> None:
    """The encoder's last layer is the model's output: no adapter, no intermediate FFN after it."""
    if getattr(model, "adapter", None) is not None or getattr(model, "intermediate_ffn", None) is not None:
        raise ValueError("models with an adapter (add_adapter) are not supported: their output is not the encoder's")


def run_encoder(model, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with padded_frames_zeroed(model, mask):
        out = model.encoder(hidden, attention_mask=mask)
    return out[0] if isinstance(out, tuple) else out.last_hidden_state


def layer_states(model, hidden: torch.Tensor, mask: torch.Tensor, keep: list[int] | None = None) -> list:
    """The transformer's states, index 0 the first layer's input and i layer i's output (for pre-LN
    "large" models the last one after the final LayerNorm, as fairseq's encoder output): the ``keep``
    ones (default all). Read with hooks, as transformers' own ``hidden_states`` are not returned by
    the encoder module of every version."""
    n = len(model.encoder.layers)
    keep = list(range(n + 1)) if keep is None else keep
    captured: dict[int, torch.Tensor] = {}

    def keep_input(module, args, kwargs):
        captured[0] = (args[0] if args else kwargs["hidden_states"]).clone()   # later ops work in place

    def keep_output(i):
        def hook(module, args, out):
            captured[i] = (out[0] if isinstance(out, tuple) else out).clone()
        return hook

    hooks = [model.encoder.layers[0].register_forward_pre_hook(keep_input, with_kwargs=True)] if 0 in keep else []
    hooks += [layer.register_forward_hook(keep_output(i))
              for i, layer in enumerate(model.encoder.layers, start=1) if i in keep and i < n]
    try:
        captured[n] = run_encoder(model, hidden, mask)
    finally:
        for h in hooks:
            h.remove()
    return [captured[i] for i in keep]
