"""The voice's own measures per utterance: pitch, speaking rate, length and level.

The mixed model (analysis.mixed_model) adjusts the gender gap for what differs between voices
besides the gender label. Per utterance:

- ``f0_median_hz``, ``f0_p10_hz``, ``f0_p90_hz``, ``f0_range_st`` (p90 over p10 in semitones),
  ``voiced_frac``: Praat's autocorrelation pitch tracker (Boersma 1993) through praat-parselmouth,
  the tracker of phonetics and sociophonetics and of the ASR-fairness regressions on F0; its
  voicing decision, octave costs and path search are tuned on speech, where a frame-wise pYIN
  or a plain autocorrelation peak jumps octaves on creak. One search range for every voice
  (``PITCH_FLOOR``-``PITCH_CEILING``): a range chosen per gender would let the label the measure
  is meant to explain choose the measure.
- ``duration_s``: the segment; ``speech_s``: from the first to the last frame within
  ``SPEECH_DB`` dB of the loudest (leading and trailing silence left out, pauses kept);
- ``words``, ``rate_wps``: words of the ``text`` column (tokens with a letter or digit) per second
  of speech -- speaking rate in words, as the text gives no syllables;
- ``level_dbfs``: mean power of the speech frames; ``snr_db``: that over the mean power of the
  quietest tenth of the frames, capped at ``SNR_CAP_DB`` (digital silence has no noise to measure).

Measures are cached content-keyed, like the features: a row's key is the sha256 of its audio
file with its first sample and length (corpora.segment_content) and ``MEASURES_VERSION``,
so the same segment under two corpora or ids is measured once, and an edited file again.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from corpora.base.atomic import atomic_open
from corpora.base.boundary import locked
from corpora.base.errors import UserError
from corpora.segment_audio import read_native
from corpora.segment_content import segment_keys
from corpora.table import PIPE_FIX, absolute_audio, is_pipe

MEASURES_VERSION = 1
SAMPLE_RATE = 16_000          # the rate a segment's content key counts samples at (the feature store's)
PITCH_FLOOR = 60.0            # Hz: below the lowest adult male voices' median (~85 Hz) with room for creak
PITCH_CEILING = 500.0         # Hz: above the highest adult female voices' median (~260 Hz) with room for rises
PITCH_STEP = 0.01             # s between pitch frames (Praat's default for a 60 Hz floor is 0.0125)
SPEECH_DB = 35.0              # a frame within this many dB of the loudest is speech
SNR_CAP_DB = 60.0
FRAME_S, HOP_S = 0.025, 0.010
COLUMNS = ("duration_s", "speech_s", "f0_median_hz", "f0_p10_hz", "f0_p90_hz", "f0_range_st", "voiced_frac",
           "words", "rate_wps", "level_dbfs", "snr_db")
CACHE_NAME = f"voice-measures-v{MEASURES_VERSION}.tsv"
_WORD = re.compile(r"\w", re.UNICODE)


def count_words(text) -> float:
    """Tokens with at least one letter or digit; NaN when the row has no text."""
    if not isinstance(text, str) or not text.strip():
        return math.nan
    return float(sum(1 for t in text.split() if _WORD.search(t)))


def _frames_db(x: np.ndarray, sr: int) -> np.ndarray:
    frame, hop = int(FRAME_S * sr), int(HOP_S * sr)
    if len(x) < frame:
        x = np.pad(x, (0, frame - len(x)))
    n = 1 + (len(x) - frame) // hop
    idx = np.arange(frame)[None, :] + hop * np.arange(n)[:, None]
    power = np.mean(np.square(x[idx].astype(np.float64)), axis=1)
    return 10 * np.log10(np.maximum(power, 1e-12))


def measure_samples(x: np.ndarray, sr: int = SAMPLE_RATE) -> dict:
    """The measures of one utterance's samples (float, -1..1) but words and rate (they need its text)."""
    import parselmouth  # imported here: only this function needs Praat

    x = np.asarray(x, dtype=np.float64)
    out = {"duration_s": len(x) / sr}
    db = _frames_db(x, sr)
    speech = np.flatnonzero(db > db.max() - SPEECH_DB)
    out["speech_s"] = ((speech[-1] - speech[0]) * HOP_S + FRAME_S) if len(speech) else 0.0
    out["level_dbfs"] = float(10 * np.log10(np.mean(10 ** (db[speech] / 10)))) if len(speech) else -120.0
    quiet = np.sort(db)[:max(1, len(db) // 10)]
    noise = 10 * np.log10(np.mean(10 ** (quiet / 10)))
    out["snr_db"] = float(min(out["level_dbfs"] - noise, SNR_CAP_DB))
    if len(x) < int(3 / PITCH_FLOOR * sr) + 1:   # Praat needs three periods of the floor
        f0 = np.zeros(0)
    else:
        pitch = parselmouth.Sound(x, sampling_frequency=sr).to_pitch_ac(
            time_step=PITCH_STEP, pitch_floor=PITCH_FLOOR, pitch_ceiling=PITCH_CEILING)
        f0 = pitch.selected_array["frequency"]
    voiced = f0[f0 > 0]
    out["voiced_frac"] = float(len(voiced) / len(f0)) if len(f0) else 0.0
    if len(voiced):
        p10, p50, p90 = np.percentile(voiced, [10, 50, 90])
        out.update(f0_median_hz=float(p50), f0_p10_hz=float(p10), f0_p90_hz=float(p90),
                   f0_range_st=float(12 * np.log2(p90 / p10)))
    else:
        out.update(f0_median_hz=math.nan, f0_p10_hz=math.nan, f0_p90_hz=math.nan, f0_range_st=math.nan)
    return out


def _read_cache(path: Path) -> dict[str, dict]:
    """The cache's rows by key; a row that does not parse is left out (it is measured again)."""
    if not path.is_file():
        return {}
    try:
        df = pd.read_csv(path, sep="\t", dtype={"key": str}, keep_default_na=True)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError):
        return {}
    if "key" not in df.columns or not set(COLUMNS) - {"words", "rate_wps"} <= set(df.columns):
        return {}
    cols = [c for c in COLUMNS if c not in ("words", "rate_wps")]
    values = df[cols].apply(pd.to_numeric, errors="coerce")
    return {k: dict(zip(cols, v)) for k, v in zip(df["key"], values.itertuples(index=False, name=None))}


def _write_cache(path: Path, rows: dict[str, dict]) -> None:
    cols = [c for c in COLUMNS if c not in ("words", "rate_wps")]
    df = pd.DataFrame([{"key": k, **{c: v[c] for c in cols}} for k, v in rows.items()])
    with atomic_open(path) as f:   # full precision: a measure served from the cache is the one computed
        df.to_csv(f, sep="\t", index=False)


def measure_table(table: pd.DataFrame, table_path: str | os.PathLike, cache_dir: str | os.PathLike,
                  progress: bool = True) -> pd.DataFrame:
    """One row per utterance of ``table`` (an utterance table read from ``table_path``): id, speaker,
    gender, and COLUMNS. Segments already in the cache under ``cache_dir`` are not measured again."""
    if len(table) == 0:
        raise UserError("no utterances to measure", path=table_path, fix="choose a split that has rows (--split)")
    rows = table.copy()
    rows["audio"] = absolute_audio(rows["audio"], table_path)
    piped = rows.index[rows["audio"].map(is_pipe)]
    if len(piped):
        raise UserError(f"utterance {rows.loc[piped[0], 'id']} reads its audio through a command", path=table_path,
                        fix=PIPE_FIX)
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    keys = [f"{k}|v{MEASURES_VERSION}" for k in segment_keys(rows, SAMPLE_RATE, cache_dir, progress)]
    with locked(cache_dir / "voice-measures.lock"):
        cache = _read_cache(cache_dir / CACHE_NAME)
        todo = [i for i, k in enumerate(keys) if k not in cache]
        offsets = rows["offset"].astype(float).tolist() if "offset" in rows else [0.0] * len(rows)
        durations = pd.to_numeric(rows["duration"], errors="coerce").fillna(-1).tolist()
        audio = rows["audio"].tolist()
        for i in tqdm(todo, desc="voice measures", unit="utt", disable=not progress or len(todo) < 50):
            x, rate = read_native(audio[i], offsets[i], durations[i])
            cache[keys[i]] = measure_samples(x, rate)
        if todo:
            _write_cache(cache_dir / CACHE_NAME, cache)
    out = pd.DataFrame([cache[k] for k in keys])
    out.insert(0, "gender", rows["gender"].astype(str).values)
    out.insert(0, "speaker", rows["speaker"].astype(str).values)
    out.insert(0, "id", rows["id"].astype(str).values)
    texts = rows["text"] if "text" in rows.columns else pd.Series([None] * len(rows))
    out["words"] = [count_words(t) for t in texts]
    out["rate_wps"] = np.where(out["speech_s"] > 0, out["words"] / out["speech_s"].where(out["speech_s"] > 0), np.nan)
    return out[["id", "speaker", "gender", *COLUMNS]]


def speaker_medians(measures: pd.DataFrame) -> pd.DataFrame:
    """Per speaker: gender, utterances, and the median over its utterances of each measure."""
    g = measures.groupby("speaker", sort=True)
    out = g[list(COLUMNS)].median()
    out.insert(0, "utterances", g.size())
    out.insert(0, "gender", g["gender"].first())
    return out.reset_index()


def write_measures(measures: pd.DataFrame, path: str | os.PathLike) -> Path:
    with atomic_open(path) as f:
        measures.to_csv(f, sep="\t", index=False, float_format="%.6g")
    return Path(path)


def read_measures(path: str | os.PathLike) -> pd.DataFrame:
    """A measures table written by write_measures (``gendergap corpus measure``), checked as data."""
    try:
        df = pd.read_csv(path, sep="\t", dtype={"id": str, "speaker": str, "gender": str}, keep_default_na=True)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read the voice measures ({str(e).splitlines()[0][:100]})", path=path,
                        fix="write it again with `gendergap corpus measure`") from None
    missing = [c for c in ("id", "speaker", "gender", *COLUMNS) if c not in df.columns]
    if missing:
        raise UserError(f"the voice measures lack column(s) {', '.join(missing)}", path=path,
                        fix="write it again with `gendergap corpus measure`")
    for c in COLUMNS:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    return df
