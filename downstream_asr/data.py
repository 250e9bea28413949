"""SpeechBrain CSVs (manifests/export_speechbrain.py) -> checked rows -> DynamicItemDatasets.

Columns read: ``ID, duration, wav, wrd`` (required), ``start, stop`` (sample indices of a
segment; whole file without them), ``spk_id, gender`` (for per-gender scoring). ``$data_root``
in ``wav`` is replaced by ``data_root`` (default: the CSV's directory).

Bad rows are UserErrors naming the CSV line (header = line 1): a missing column, a duplicate
or empty ID, a missing audio file, a duration that is not a positive number, and -- in a
training CSV -- a transcript that is empty after normalisation.
"""
from __future__ import annotations

import csv
import logging
import os
from collections import Counter
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from downstream_asr.text import TextNorm, encode, normalise_text

log = logging.getLogger(__name__)

REQUIRED = ("ID", "duration", "wav", "wrd")


def read_csv(path: str | os.PathLike, norm: TextNorm, *, training: bool, data_root: str | None = None,
             check_audio: bool = True) -> pd.DataFrame:
    """Rows of a SpeechBrain CSV with a ``text`` column (the normalised ``wrd``) and ``line``."""
    path = Path(path)
    if not path.is_file():
        raise UserError("no such CSV", path=path, fix="export one with `gendergap manifest build --format speechbrain`")
    header, records = read_delimited(path, ",", csv.QUOTE_MINIMAL, what="SpeechBrain CSV")
    df = pd.DataFrame([r for _, r in records], columns=list(dict.fromkeys(header)), dtype=str)
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise UserError(f"missing column(s) {', '.join(missing)}", path=path, line=1,
                        fix="a SpeechBrain CSV needs ID, duration, wav, wrd (and start, stop for segments)")
    if df.empty:
        raise UserError("the CSV has no rows", path=path, line=2, fix="export a non-empty split")
    df["line"] = [line for line, _ in records]

    def fail(mask, what, fix):
        row = df[mask].iloc[0]
        raise UserError(f"row ID={row['ID']!r}: {what}", path=path, line=int(row["line"]), fix=fix)

    if (df["ID"].str.strip() == "").any():
        fail(df["ID"].str.strip() == "", "empty ID", "give every row an ID")
    if df["ID"].duplicated().any():
        fail(df["ID"].duplicated(), "duplicate ID", "IDs must be unique")
    dur = pd.to_numeric(df["duration"], errors="coerce")
    if (dur.isna() | (dur <= 0)).any():
        fail(dur.isna() | (dur <= 0), f"duration {df['duration'][dur.isna() | (dur <= 0)].iloc[0]!r} is not > 0",
             "write the duration in seconds (from the audio header)")
    df["duration"] = dur.astype(float)
    root = os.path.abspath(data_root) if data_root else str(path.resolve().parent)
    df["wav"] = df["wav"].map(lambda w: w.replace("$data_root", root))
    if check_audio:
        exists = {w: os.path.isfile(w) for w in df["wav"].unique()}
        bad = ~df["wav"].map(exists)
        if bad.any():
            fail(bad, f"audio file not found: {df['wav'][bad].iloc[0]}", "fix the path or pass --data-root")
    for col in ("start", "stop"):
        if col in df.columns:
            num = pd.to_numeric(df[col], errors="coerce")
            if num.isna().any():
                fail(num.isna(), f"{col} is not a sample index", f"write {col} as an integer sample index")
            df[col] = num.astype(int)
    df["text"] = df["wrd"].map(lambda t: normalise_text(t, norm))
    empty = df["text"] == ""
    if empty.any():
        if training:
            fail(empty, f"empty transcript after normalisation ({empty.sum()} row(s) in all)",
                 "drop untranscribed rows from the training CSV, or fill in wrd")
        log.warning("%s: %d row(s) with an empty transcript (first: line %d); kept, every word the model "
                    "outputs there counts as an insertion", path, int(empty.sum()), int(df["line"][empty].iloc[0]))
    return df


def oov_report(df: pd.DataFrame, enc) -> dict:
    """Characters of the normalised texts that the vocabulary lacks: {char: count}, plus totals."""
    counts = Counter(ch for t in df["text"] for ch in t if ch not in enc.lab2ind)
    n_chars = int(df["text"].str.len().sum())
    return {"unknown_chars": dict(counts.most_common()), "n_unknown": int(sum(counts.values())),
            "n_chars": n_chars,
            "utts_with_unknown": int(df["text"].map(lambda t: any(c not in enc.lab2ind for c in t)).sum())}


def audio_dataset(df: pd.DataFrame, enc, sample_rate: int = 16000):
    """A DynamicItemDataset yielding ``id, sig, tokens, text`` (sig mono, at ``sample_rate``).
    ``start``/``stop`` are sample indices at the file's own rate (manifests.export_speechbrain writes
    them so); a file at another rate than the model's is resampled after the cut
    (ssl_pretrain.features.to_model_rate), one at the model's rate is not touched."""
    import speechbrain as sb

    from ssl_pretrain.features import to_model_rate

    data = {}
    for r in df.itertuples(index=False):
        item = {"wav": r.wav, "duration": float(r.duration), "text": r.text}
        item["start"] = int(getattr(r, "start", 0) or 0) if "start" in df.columns else 0
        item["stop"] = int(r.stop) if "stop" in df.columns else -1
        data[r.ID] = item
    ds = sb.dataio.dataset.DynamicItemDataset(data)

    @sb.utils.data_pipeline.takes("wav", "start", "stop")
    @sb.utils.data_pipeline.provides("sig")
    def audio_pipeline(wav, start, stop):
        sig, rate = read_samples(wav, start, stop)
        return to_model_rate(sig.mean(-1) if sig.dim() > 1 else sig, rate, sample_rate)

    sb.dataio.dataset.add_dynamic_item([ds], audio_pipeline)
    add_tokens_pipeline(ds, enc)
    sb.dataio.dataset.set_output_keys([ds], ["id", "sig", "tokens", "text"])
    return ds


def read_samples(path: str, start: int = 0, stop: int = -1):
    """Samples ``start:stop`` of an audio file at its own rate (stop < 0: to the end), as float32
    ([time] mono, [time, channels] otherwise), and that rate. Read with soundfile through
    corpora.prepared_audio.open_audio, as the feature extractors read audio, so a ``.wav.gz``
    (WinoST as downloaded) is read from its decompressed bytes; the samples equal SpeechBrain's
    read_audio's for wav and flac. A corrupt or cut file is a UserError naming it."""
    import soundfile as sf
    import torch

    from corpora.prepared_audio import open_audio

    try:
        with open_audio(path) as src:
            wav, rate = sf.read(src, start=start, stop=stop if stop >= 0 else None, dtype="float32",
                                always_2d=True)
    except (RuntimeError, OSError, ValueError, EOFError) as e:  # libsndfile's or gzip's: a corrupt or cut file
        raise UserError(f"cannot read the audio ({str(e).splitlines()[0][:120]})", path=path,
                        fix="replace the file, or leave its row out of the CSV") from None
    return torch.from_numpy(wav[:, 0] if wav.shape[1] == 1 else wav), int(rate)


def add_tokens_pipeline(ds, enc) -> None:
    """Add the ``tokens`` item to a DynamicItemDataset: its ``text`` as the vocabulary's indices
    (``enc``, a CTCTextEncoder). Shared by the audio datasets here and the frozen-feature
    datasets (downstream_asr.frozen), so both encode text the same way."""
    import speechbrain as sb
    import torch

    @sb.utils.data_pipeline.takes("text")
    @sb.utils.data_pipeline.provides("tokens")
    def text_pipeline(text):
        return torch.LongTensor(encode(text, enc))

    sb.dataio.dataset.add_dynamic_item([ds], text_pipeline)


def length_batch_sampler(ds, max_batch_seconds: float, *, shuffle: bool, seed: int, length_key: str = "duration",
                         num_buckets: int = 10, max_batch_size: int | None = None):
    """SpeechBrain's DynamicBatchSampler: batches of similar length, at most ``max_batch_seconds`` each
    (padded) and at most ``max_batch_size`` utterances. Deterministic for a seed; reshuffled per epoch
    through ``set_epoch``."""
    from speechbrain.dataio.sampler import DynamicBatchSampler
    n = len(ds)
    longest = max(float(ds.data[i][length_key]) for i in ds.data_ids)
    if longest > max_batch_seconds:
        # the sampler has no bucket for an utterance longer than a batch (IndexError): such an
        # utterance gets a batch of its own instead
        log.warning("the longest utterance (%.1f s) exceeds the batch size (%.1f s): batches grow to %.1f s",
                    longest, max_batch_seconds, longest)
        max_batch_seconds = longest * 1.001
    return DynamicBatchSampler(ds, max_batch_length=max_batch_seconds, num_buckets=max(1, min(num_buckets, n)),
                               length_func=lambda x: x[length_key], shuffle=shuffle,
                               batch_ordering="random" if shuffle else "ascending", seed=seed,
                               max_batch_ex=max_batch_size)


def loader_kwargs(batch_sampler, seed: int) -> dict:
    """DataLoader options: the batch sampler, and a generator of its own. Without one, every
    new DataLoader iterator draws its base seed from torch's GLOBAL generator, so a resumed
    run (one more iterator created) would draw different dropout masks than an uninterrupted one."""
    import torch
    return {"batch_sampler": batch_sampler, "generator": torch.Generator().manual_seed(int(seed))}
