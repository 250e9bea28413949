"""One utterance's samples from its file, at the file's own rate: what the feature store reads (then
resampled to the model's rate, ssl_pretrain.features.read_segment) and what the voice measures
read (corpora.voice_measures: Praat takes any rate)."""
from __future__ import annotations

import numpy as np
import soundfile as sf

from corpora.base.boundary import MAX_RATE, MIN_RATE  # the sample rates a model folder's preprocessor may name, too
from corpora.base.errors import UserError
from corpora.prepared_audio import open_audio  # a .wav.gz (WinoST) is read from its decompressed bytes

MAX_UTTERANCE_SECONDS = 3600.0           # ~460 MB as float32 at 16 kHz, before any model sees it


def read_native(path: str, offset: float, duration: float) -> tuple[np.ndarray, int]:
    """(mono float32 samples, the file's rate) of one utterance, by offset/duration in seconds (a
    duration <= 0 or None: to the end of the file). The segment is cut at the file's own rate
    (seconds x native rate) and its channels averaged."""
    with open_audio(path) as src:
        try:
            info = sf.info(src)
        except (RuntimeError, OSError, EOFError) as e:  # libsndfile's errors for a corrupt or cut file
            raise UserError(f"cannot read the audio ({str(e).splitlines()[0][:120]})", path=path,
                            fix="replace the file, or leave its row out of the table") from None
        native = int(info.samplerate)
        start = int(round(offset * native))
        frames = int(round(duration * native)) if duration and duration > 0 else -1
        # bounded before any sample is decoded: a 1 Hz header would make resampling allocate
        # 16,000 samples per stored one, and a segment hours long is no utterance
        if not MIN_RATE <= native <= MAX_RATE:
            raise UserError(f"the audio's sample rate {native} Hz is outside {MIN_RATE}-{MAX_RATE} Hz", path=path,
                            fix="resample the file (e.g. sox IN -r 16000 OUT), or leave its row out of the table")
        seconds = (frames if frames >= 0 else max(info.frames - start, 0)) / native
        if seconds > MAX_UTTERANCE_SECONDS:
            raise UserError(f"one utterance of {seconds:,.0f} s (at most {MAX_UTTERANCE_SECONDS:,.0f} s are read at "
                            "once)", path=path,
                            fix="segment the recording: give each utterance its offset and duration")
        if hasattr(src, "seek"):
            src.seek(0)
        wav, _ = sf.read(src, start=start, frames=frames, dtype="float32", always_2d=True)
    return (wav.mean(axis=1) if wav.shape[1] > 1 else wav[:, 0]), native
