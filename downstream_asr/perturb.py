"""Speed perturbation of a TRAINING set (Kaldi / Ko et al. 2015 style), for the frozen recipe.

A copy at speed factor ``f`` is the waveform read as if sampled at ``f * sr`` and resampled
to ``sr`` (torchaudio's windowed-sinc resampler): duration x 1/f, pitch and formants x f --
to the model a new, faster or slower voice. The reference study augments its hybrid ASR
this way ("Speed and volume perturbations have been applied"). On the built-in corpus, whose
test voices are unseen, more training voices is what the frozen model lacks (notes in
hparams/frozen_ctc.yaml).

Only training data is perturbed; the recipes never call this on valid or test CSVs.

    df_sp, csv_sp = speed_perturbed(train_df, "train.csv", 0.9, Path("cache"), 16000)
"""
from __future__ import annotations

import csv
import logging
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import soundfile as sf

from corpora.base.atomic import atomic_open, write_text
from corpora.base.errors import UserError
from corpora.base.provenance import config_hash, file_fingerprint
from downstream_asr.data import read_samples
from ssl_pretrain.features import to_model_rate

log = logging.getLogger(__name__)


def check_factors(factors) -> list[float]:
    """The speed factors as floats; 1.0 (the original data) must be one of them."""
    if isinstance(factors, (int, float)):
        factors = [factors]
    try:
        out = [float(f) for f in factors]
    except (TypeError, ValueError):
        raise UserError(f"speed_perturb={factors!r} is not a list of numbers",
                        fix="e.g. speed_perturb=[0.9,1.0,1.1], or speed_perturb=[1.0] for none") from None
    if not out or any(not 0.5 <= f <= 2.0 for f in out) or 1.0 not in out or len(set(out)) != len(out):
        raise UserError(f"speed_perturb={factors!r}: factors must be distinct, in [0.5, 2], and include 1.0",
                        fix="e.g. speed_perturb=[0.9,1.0,1.1], or speed_perturb=[1.0] for none")
    return out


def change_speed(wav: np.ndarray, factor: float, sample_rate: int) -> np.ndarray:
    """``wav`` played ``factor`` times faster (length / factor), with torchaudio's resampler."""
    import torch
    import torchaudio
    if factor == 1.0:
        return wav
    # integer rates with the exact ratio (0.9 -> 9:10), so the resampler's kernel stays small
    ratio = Fraction(factor).limit_denominator(100)
    y = torchaudio.functional.resample(torch.from_numpy(np.ascontiguousarray(wav, dtype=np.float32)),
                                       orig_freq=ratio.numerator, new_freq=ratio.denominator)
    return y.numpy()


def speed_perturbed(df: pd.DataFrame, csv_path, factor: float, cache_root: Path,
                    sample_rate: int) -> tuple[pd.DataFrame, Path]:
    """A speed-perturbed copy of the rows of a training CSV: new wavs (one per row, whole
    segment) and a CSV under ``cache_root``, reused when already written for the same CSV
    file. Row IDs get a ``-sp<factor>`` suffix; text, speaker and gender are kept."""
    csv_path = Path(csv_path).resolve()
    # keyed on the CSV's content (size + mtime), so an edited CSV is perturbed again
    key = config_hash({"csv": str(csv_path), "file": file_fingerprint(csv_path), "factor": factor,
                       "sr": sample_rate})[:10]
    out = Path(cache_root) / "speed" / f"{csv_path.stem}-sp{factor:g}-{key}"
    out_csv = out / f"{csv_path.stem}-sp{factor:g}.csv"
    suffix = f"-sp{factor:g}"
    rows = df.copy()
    rows["ID"] = rows["ID"] + suffix
    rows["wav"] = [str(out / "wav" / f"{i}.wav") for i in rows["ID"]]
    if not out_csv.is_file() or not all(Path(w).is_file() for w in rows["wav"]):
        (out / "wav").mkdir(parents=True, exist_ok=True)
        durations = []
        for r, dst in zip(df.itertuples(index=False), rows["wav"]):
            start = int(getattr(r, "start", 0) or 0) if "start" in df.columns else 0
            stop = int(r.stop) if "stop" in df.columns else -1
            sig, sr = read_samples(r.wav, start, stop)   # as the training datasets read it (.wav.gz too)
            mono = (sig.mean(-1) if sig.dim() > 1 else sig).numpy()
            # audio at another rate is resampled first, as everywhere audio is read for a model
            y = change_speed(to_model_rate(mono, sr, sample_rate), factor, sample_rate)
            with atomic_open(dst, "wb") as f:
                sf.write(f, y, sample_rate, format="WAV", subtype="FLOAT")
            durations.append(len(y) / sample_rate)
        rows["duration"] = durations
        cols = [c for c in ("ID", "duration", "wav", "wrd", "spk_id", "gender", "corpus") if c in rows.columns]
        write_text(out_csv, rows[cols].to_csv(index=False, quoting=csv.QUOTE_MINIMAL))
        log.info("speed %g: %d utterances written to %s", factor, len(rows), out)
    else:
        saved = pd.read_csv(out_csv, dtype=str, keep_default_na=False)
        rows["duration"] = saved.set_index("ID").loc[rows["ID"], "duration"].astype(float).to_numpy()
    # whole files now: no segment bounds
    rows = rows.drop(columns=[c for c in ("start", "stop") if c in rows.columns])
    return rows.reset_index(drop=True), out_csv
