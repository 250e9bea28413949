"""Speak one speaker's utterances in a fresh process (the unit of parallelism and determinism).

Kept apart from ``build.py`` so a spawned worker imports only espeak-ng, numpy, scipy and
soundfile, not pandas or pyrealb.
"""
from __future__ import annotations

import hashlib
import io
import random
import zlib
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.signal import resample_poly

from corpora.base.atomic import atomic_open
from corpora.synth.espeak import Espeak
from corpora.synth.voices import Speaker

SAMPLE_RATE = 16_000
F0_UTTERANCES = 8   # a speaker's median F0 (synth_config.json) is measured on its first 8 utterances


def speaker_seed(seed: int, speaker_id: str) -> int:
    """A stable per-speaker seed (Python's hash() changes between processes)."""
    return zlib.crc32(f"{seed}:{speaker_id}".encode())


def to_16k(samples: np.ndarray, rate: int) -> np.ndarray:
    """int16 at ``rate`` -> int16 at 16 kHz (polyphase resampling, clipped, rounded)."""
    x = samples.astype(np.float64) / 32768.0
    if rate != SAMPLE_RATE:
        g = np.gcd(rate, SAMPLE_RATE)
        x = resample_poly(x, SAMPLE_RATE // g, rate // g)
    return np.clip(np.round(x * 32768.0), -32768, 32767).astype(np.int16)


def wav_bytes(samples: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, samples, SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def median_f0(x: np.ndarray, sr: int = SAMPLE_RATE, fmin: float = 60.0, fmax: float = 400.0) -> float:
    """Median F0 (Hz) over voiced frames: the normalised autocorrelation peak per 40 ms frame
    (frames under a tenth of the loudest frame's energy, or with a peak under half the frame's
    energy, are unvoiced)."""
    x = np.asarray(x, dtype=np.float64)
    frame, hop = int(0.04 * sr), int(0.01 * sr)
    lo, hi = int(sr / fmax), int(sr / fmin)
    frames = np.stack([x[s:s + frame] for s in range(0, len(x) - frame, hop)])
    frames -= frames.mean(axis=1, keepdims=True)
    energy = (frames ** 2).mean(axis=1)
    frames = frames[energy > 0.1 * energy.max()]
    spec = np.fft.rfft(frames, n=2 * frame, axis=1)
    ac = np.fft.irfft(np.abs(spec) ** 2, axis=1)[:, :frame]
    lag = lo + np.argmax(ac[:, lo:hi], axis=1)
    voiced = ac[np.arange(len(ac)), lag] > 0.5 * ac[:, 0]
    return float(np.median(sr / lag[voiced])) if voiced.any() else float("nan")


def speak_speaker(job: tuple[str, Speaker, int, list[tuple[str, str]], str]) -> tuple[str, list[dict]]:
    """Synthesise ``utterances`` [(utt_id, text)] for one speaker under ``out_dir/audio/<id>/``, with
    espeak-ng's data folder ``data_dir`` (``espeak.overlay_data_dir``: it holds the project's variants).

    Must run in a process that has not used espeak-ng yet (the builder's pool gives each
    speaker a fresh one). Returns (speaker id, one dict per utterance: id, num_samples,
    pitch, rate, range, sha256 of the written file; ``f0``: the median F0 of each of its first
    F0_UTTERANCES utterances, None after them).
    """
    out_dir, speaker, seed, utterances, data_dir = job
    engine = Espeak(speaker_seed(seed, speaker.id), data_dir)
    rng = random.Random(speaker_seed(seed, speaker.id + "/prosody"))
    folder = Path(out_dir) / "audio" / speaker.id
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (utt_id, text) in enumerate(utterances):
        prosody = speaker.prosody(rng)
        samples = to_16k(engine.speak(text, speaker.voice, prosody), engine.sample_rate)
        if samples.size == 0:
            raise RuntimeError(f"espeak-ng produced no audio for {utt_id} ({text!r})")
        data = wav_bytes(samples)
        with atomic_open(folder / f"{utt_id}.wav", "wb") as f:
            f.write(data)
        rows.append({"id": utt_id, "num_samples": int(samples.size), "pitch": prosody.pitch,
                     "rate": prosody.rate, "range": prosody.range,
                     "sha256": hashlib.sha256(data).hexdigest(),
                     "f0": median_f0(samples) if i < F0_UTTERANCES else None})
    return speaker.id, rows
