"""A self-supervised encoder as a frozen feature extractor, and the audio reading every extractor shares.

One forward path for every checkpoint: fairseq checkpoints are converted in memory to
transformers' Wav2Vec2Model (ssl_pretrain.convert), Hugging Face folders of every family in
ssl_pretrain.families load directly; both through ssl_pretrain.checkpoints.CheckpointRef.load.
`hidden_states` returns the layers asked for: index 0 is the transformer's input, index i the
output of layer i (for pre-LN "large" models the last one after the final LayerNorm, which is
what fairseq returns as the encoder output). It runs on the chosen device under autocast
(ssl_pretrain.device); features are stored by ssl_pretrain.feature_store.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from corpora.base.errors import UserError
from corpora.segment_audio import read_native
from ssl_pretrain.device import autocast
from ssl_pretrain.families import frame_shift_s
from ssl_pretrain.invariant import check_plain_encoder, frame_mask, front_end, layer_states, normalise, project
from ssl_pretrain.precision_canary import Shapes

log = logging.getLogger(__name__)


@dataclass
class FrozenSSL:
    """An encoder in eval mode with gradients off, on ``device``; forward passes run under autocast
    to ``precision`` (the weights stay fp32). ``fbank``: a filterbank family's feature extractor."""
    model: "torch.nn.Module"
    normalize: bool
    sample_rate: int
    source: str
    device: str = "cpu"
    precision: str = "fp32"
    fbank: object = None

    def __post_init__(self):
        self.model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @property
    def num_layers(self) -> int:
        return self.model.config.num_hidden_layers

    @property
    def dim(self) -> int:
        return self.model.config.hidden_size

    @property
    def frame_shift_s(self) -> float:
        """Seconds between output frames (20 ms for the standard conv stack and for w2v-BERT)."""
        return frame_shift_s(self.model.config, self.sample_rate)

    def _prepare(self, wave: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(wave, dtype=np.float32)).to(self.device)
        return normalise(x) if self.normalize else x  # fairseq's task.normalize, per utterance

    @torch.no_grad()
    def hidden_states(self, waves: list[np.ndarray], layers: list[int] | None = None,
                      dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``layers`` (default all, 0..L) for a batch of 1-D waveforms, on the CPU in ``dtype``:
        (states [len(layers), B, T, D], mask [B, T] True = real frame). Padding frames are zero."""
        model = self.model
        keep = list(range(self.num_layers + 1)) if layers is None else [int(x) for x in layers]
        bad = [x for x in keep if not 0 <= x <= self.num_layers]
        if bad:
            raise UserError(f"layer {bad[0]} does not exist (the model has layers 0..{self.num_layers})",
                            fix=f"pass layers between 0 and {self.num_layers}, 'last' or 'all'")
        check_plain_encoder(model)
        xs = [self._prepare(w) for w in waves]
        with autocast(self.device, self.precision, Shapes.of(model.config)):
            # the batch-invariant forward every scoring path shares (ssl_pretrain.invariant)
            feats, frames = front_end(model, xs, self.fbank)
            mask = frame_mask(frames, feats.shape[1])
            captured = layer_states(model, project(model, feats), mask, keep)
        states = torch.stack([c.to(dtype) for c in captured])
        states = states * mask[None, :, :, None].to(dtype)
        return to_host(states), mask.cpu()

    __call__ = hidden_states


def to_host(x: "torch.Tensor") -> "torch.Tensor":
    """``x`` on the CPU; from a GPU through page-locked memory. Measured on an H100 (8 x 10 s,
    every layer, fp32): the plain pageable ``.cpu()`` copy moved ~1.2 GB/s and took 80-90 % of
    the extraction time (base 137 of 169 ms a batch), a pinned one 3 ms. torch's caching host
    allocator reuses the pinned blocks once the caller drops them."""
    if x.device.type != "cuda":
        return x.cpu()
    return torch.empty(x.shape, dtype=x.dtype, pin_memory=True).copy_(x)


def to_model_rate(wave, native_rate: int, sample_rate: int):
    """``wave`` (1-D, numpy or torch) at the model's ``sample_rate``. The same object comes back
    when the rates agree, so 16 kHz audio keeps its exact samples and code path. Otherwise
    torchaudio's windowed-sinc resampler (its defaults, as downstream_asr.perturb uses it): the
    utterance table accepts any rate and records it, and the model's rate is applied only here."""
    if int(native_rate) == int(sample_rate):
        return wave
    import torch
    from torchaudio.functional import resample  # imported here: only non-model-rate audio needs it
    as_numpy = isinstance(wave, np.ndarray)
    x = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32)) if as_numpy else wave.float()
    y = resample(x, orig_freq=int(native_rate), new_freq=int(sample_rate))
    return y.numpy() if as_numpy else y


def read_segment(path: str, offset: float, duration: float, sample_rate: int) -> np.ndarray:
    """One utterance (mono float32, at ``sample_rate``) from a file, by offset/duration in seconds:
    cut at the file's own rate (corpora.segment_audio.read_native), then resampled to
    ``sample_rate`` if the file has another rate (to_model_rate)."""
    wave, native = read_native(path, offset, duration)
    return to_model_rate(wave, native, sample_rate)


def length_buckets(durations: list[float], max_batch_seconds: float, max_batch_size: int = 64) -> list[list[int]]:
    """Indices grouped into batches of similar length (sorted), each padding to at most
    ``max_batch_seconds`` of audio in total (batch size x longest utterance)."""
    order = sorted(range(len(durations)), key=lambda i: durations[i])
    batches, cur = [], []
    for i in order:
        longest = durations[i]  # sorted ascending: the newcomer is the longest
        if cur and ((len(cur) + 1) * longest > max_batch_seconds or len(cur) >= max_batch_size):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches
