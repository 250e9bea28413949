"""SpeechBrain CSV: ``ID, duration, wav, start, stop, spk_id, wrd`` (+ gender, corpus) per split.

``DynamicItemDataset.from_csv`` reads it (``duration`` becomes a float, used for sorting and
batching); ``start`` / ``stop`` are sample indices in ``wav``, the form
``speechbrain.dataio.dataio.read_audio({"file": wav, "start": start, "stop": stop})`` takes,
so segments of long recordings need no cutting:

    @sb.utils.data_pipeline.takes("wav", "start", "stop")
    @sb.utils.data_pipeline.provides("sig")
    def audio_pipeline(wav, start, stop):
        return sb.dataio.dataio.read_audio({"file": wav, "start": int(start), "stop": int(stop)})

With ``data_root`` the wav paths under it are written as ``$data_root/...`` (SpeechBrain's
``replacements={"data_root": ...}`` fills it in), so a CSV moves with its data.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from corpora.base.atomic import atomic_open
from corpora.base.errors import UserError
from corpora.utterances import UtteranceTable


def speechbrain_frame(df: pd.DataFrame, text_column: str = "text", data_root: str | None = None) -> pd.DataFrame:
    """The CSV's rows for one split (audio paths must be absolute)."""
    if text_column not in df.columns:
        raise UserError(f"no column {text_column!r} for wrd", fix="pick the transcript column with --text-column")
    sr = df["sample_rate"].astype(int)
    start = (df["offset"].astype(float) * sr).round().astype(int)
    stop = start + (df["duration"].astype(float) * sr).round().astype(int)
    wav = df["audio"].astype(str)
    if data_root:
        root = os.path.abspath(data_root)
        inside = wav.map(lambda p: os.path.commonpath([root, p]) == root)
        if not inside.all():
            raise UserError(f"{wav[~inside].iloc[0]} is outside data_root {root}",
                            fix="give a data_root that holds every audio file, or none (absolute paths)")
        wav = wav.map(lambda p: "$data_root/" + os.path.relpath(p, root).replace(os.sep, "/"))
    return pd.DataFrame({"ID": df["id"].to_numpy(), "duration": df["duration"].round(4).to_numpy(),
                         "wav": wav.to_numpy(), "start": start.to_numpy(), "stop": stop.to_numpy(),
                         "spk_id": df["speaker"].to_numpy(), "wrd": df[text_column].to_numpy(),
                         "gender": df["gender"].to_numpy(), "corpus": df["corpus"].to_numpy()})


def export_speechbrain(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, *,
                       text_column: str = "text", data_root: str | None = None) -> dict:
    """Write ``<split>.csv`` per split; returns rows per split."""
    out_dir = Path(out_dir)
    rows = {}
    for split, df in splits.items():
        frame = speechbrain_frame(df, text_column, data_root)
        with atomic_open(out_dir / f"{split}.csv") as f:
            frame.to_csv(f, index=False, lineterminator="\n")
        rows[split] = len(frame)
    return {"rows": rows}


def export_table_splits(table: str | os.PathLike, corpus: str, splits: dict[str, str], out: str | os.PathLike) -> None:
    """SpeechBrain CSVs of one corpus of an utterance table: ``splits`` maps each CSV (train,
    valid, test) to the table's split label. Audio paths are made absolute, so the CSVs work
    from any working directory."""
    df = UtteranceTable.load(table).select(corpus=corpus).audio_rows()
    parts = {}
    for role, split in splits.items():
        rows = df[df["split"] == split]
        if rows.empty:
            raise UserError(f"corpus {corpus!r} has no rows in split {split!r}", path=table,
                            fix="check the task's corpus and splits in the study config")
        parts[role] = rows
    export_speechbrain(parts, out)
