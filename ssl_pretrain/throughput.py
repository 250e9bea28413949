"""This machine's throughput for the cost estimate of `sweep --dry-run` (what `gendergap bench` measures).

Random-init wav2vec 2.0 encoders of the pretraining presets on random audio in the study's batches
(1.5 s utterances, 60 s a batch): frozen extraction (the batch-invariant forward, every layer) and
a training step (forward + backward), as achieved GFLOP/s (FLOPs counted by torch's
FlopCounterMode); and the extraction's time outside the model (reading audio, writing the feature
store's shards) per audio second, from 100 synthetic WAVs through the store.
"""
from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import soundfile as sf
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import Wav2Vec2Model

from ssl_pretrain.architecture import preset_config
from ssl_pretrain.device import autocast
from ssl_pretrain.families import forward_gflops
from ssl_pretrain.feature_store import FeatureStore, SSLExtractor
from ssl_pretrain.features import FrozenSSL
from ssl_pretrain.invariant import encode

# a study's batches: short utterances (1.5 s, the built-in corpus's), 60 s of audio a batch
BATCH, UTTERANCE_S = 40, 1.5


def achieved_gflops(preset: str, device: str, precision: str, seconds: float, train: bool) -> float:
    """Achieved GFLOP/s of one preset's encoder: extraction (train=False) or a training step, timed
    for at least ``seconds`` (and two steps)."""
    torch.manual_seed(0)
    model = Wav2Vec2Model(preset_config(preset)).to(device)
    model.train(train)
    wavs = 0.1 * torch.randn(BATCH, int(16000 * UTTERANCE_S), device=device)
    lengths = torch.full((BATCH,), wavs.shape[1], device=device)

    def step():
        with autocast(device, precision), torch.set_grad_enabled(train):
            out, _ = encode(model, wavs, lengths, normalize=True, all_layers=not train)
            if train:
                out.float().pow(2).mean().backward()

    with FlopCounterMode(display=False) as counter:
        step()
    flops = counter.get_total_flops()
    n, start = 0, time.perf_counter()
    while n < 2 or time.perf_counter() - start < seconds:
        step()
        n += 1
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return flops * n / (time.perf_counter() - start) / 1e9


class _RandomTiny(SSLExtractor):
    """A random-init tiny encoder in the feature store's place for a checkpoint's."""
    key, slug = "bench-tiny", "bench-tiny"

    def describe(self):
        return {"kind": "bench", "preset": "tiny"}

    def open(self):
        if self._model is None:
            self._model = FrozenSSL(Wav2Vec2Model(preset_config("tiny")), True, 16000, "bench", device=self.device,
                                    precision=self.precision)
        return self._model


def extraction_overhead(device: str, precision: str, gflops: float) -> float:
    """Seconds per audio second that extraction spends outside the model: the tiny preset's features
    of 100 synthetic 1.5 s WAVs through the feature store, less the model's compute time at the
    measured ``gflops``."""
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for i in range(100):
            path = Path(tmp) / f"u{i:03d}.wav"
            sf.write(path, (0.1 * rng.standard_normal(int(16000 * UTTERANCE_S))).astype(np.float32), 16000,
                     subtype="PCM_16")
            rows.append({"id": f"u{i:03d}", "audio": str(path), "offset": 0.0, "duration": UTTERANCE_S})
        torch.manual_seed(0)
        start = time.perf_counter()
        FeatureStore(Path(tmp) / "store").view(_RandomTiny(None, device, precision), pd.DataFrame(rows), "all",
                                               progress=False)
        seconds = time.perf_counter() - start
    audio = 100 * UTTERANCE_S
    return max(0.0, (seconds - audio * forward_gflops(preset_config("tiny")) / gflops) / audio)


def measure_throughput(device: str, precision: str, *, seconds: float = 3.0, quick: bool = False,
                       say: Callable[[str], None] = print) -> tuple[dict, list[str]]:
    """({figure: value} of the cost profile, the presets measured): extraction and training GFLOP/s
    of the largest preset measured (base unless ``quick``: what a real study runs) and the
    extraction's overhead; each figure ``say``-ed as it is measured."""
    presets = ["tiny"] if quick else ["tiny", "base"]
    figures = {}
    for what, train in (("extract_gflops", False), ("train_gflops", True)):
        rates = {p: achieved_gflops(p, device, precision, seconds, train) for p in presets}
        for p, r in rates.items():
            say(f"{what.split('_')[0]:8s} {p:5s} {device} {precision}: {r:8.1f} GFLOP/s")
        figures[what] = rates[presets[-1]]
    tiny = achieved_gflops("tiny", device, precision, seconds, False) if not quick else figures["extract_gflops"]
    figures["extract_overhead_s_per_audio_s"] = extraction_overhead(device, precision, tiny)
    say(f"extract  I/O   {device} {precision}: {figures['extract_overhead_s_per_audio_s'] * 1000:8.2f} ms per "
        "audio second outside the model (reading audio, writing the store's shards)")
    return figures, presets
