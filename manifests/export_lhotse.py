"""lhotse manifests: ``<split>/recordings.jsonl.gz``, ``supervisions.jsonl.gz`` and ``cuts.jsonl.gz``
per split (one folder per split, as the Kaldi export), written through lhotse's own classes:

    from lhotse import CutSet
    cuts = CutSet.from_file("m/lhotse/train/cuts.jsonl.gz").trim_to_supervisions()
    [(s.speaker, s.gender) for c in cuts for s in c.supervisions]      # ('spk1', 'F'), ...

One Recording per audio file, built from its header (rate, frames, channels; the file is not
decoded), id = the file's stem (with a digest of its path when two files share a stem). One
SupervisionSegment per table row: id, start = offset, duration, text (``--text-column``),
language, speaker, and gender as lhotse's own examples spell it: ``"F"`` or ``"M"``, and no
gender (None) for the table's U -- lhotse's way of saying "not known". ``custom`` holds the
corpus and each non-empty ``tgt_text_<lang>``. The cuts are ``CutSet.from_manifests``: one cut per
recording with its supervisions (``trim_to_supervisions()`` gives one per segment).
``gendergap corpus index --kind lhotse --root OUT`` reads the folder back into the same rows.
"""
from __future__ import annotations

import hashlib
import os
import re
import sys
from collections import Counter
from pathlib import Path

import pandas as pd

from corpora.audio_info import AudioInfo, probe_headers
from corpora.base.errors import UserError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def export_lhotse(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, *, text_column: str = "text") -> dict:
    """Write the three manifests of each split under ``out_dir/<split>/`` (rows with absolute audio
    paths); returns supervisions and recordings per split."""
    from lhotse import CutSet, RecordingSet, SupervisionSet  # torch: only when this format is built

    out_dir = Path(out_dir)
    summary: dict = {"supervisions": {}, "recordings": {}}
    for split, df in splits.items():
        if text_column not in df.columns:
            raise UserError(f"no column {text_column!r} for the supervisions' text",
                            fix="pick the transcript column with --text-column")
        recordings = _recordings(df)
        supervisions = [_supervision(row, recordings[row["audio"]], text_column) for row in df.to_dict("records")]
        recs = RecordingSet.from_recordings(recordings.values())
        sups = SupervisionSet.from_segments(supervisions)
        folder = out_dir / split
        folder.mkdir(parents=True, exist_ok=True)
        # plain writes: the build writes into a staging folder that becomes --out whole (manifests.build)
        recs.to_file(folder / "recordings.jsonl.gz")
        sups.to_file(folder / "supervisions.jsonl.gz")
        CutSet.from_manifests(recordings=recs, supervisions=sups).to_file(folder / "cuts.jsonl.gz")
        summary["supervisions"][split] = len(supervisions)
        summary["recordings"][split] = len(recordings)
    return summary


def _recordings(df: pd.DataFrame) -> dict:
    """{audio path: Recording} from each file's header, in first-seen order."""
    from lhotse import AudioSource, Recording

    paths = list(dict.fromkeys(df["audio"].astype(str)))
    infos = probe_headers(paths, progress=sys.stderr.isatty())
    ids = _recording_ids(paths)
    out = {}
    for path in paths:
        info = infos[path]
        if not isinstance(info, AudioInfo):   # moved or changed since the table was indexed
            raise UserError(info.message(), fix=info.fix() + "; then index the corpus again")
        out[path] = Recording(id=ids[path], sources=[AudioSource(type="file", channels=list(range(info.channels)),
                                                                 source=path)],
                              sampling_rate=info.sample_rate, num_samples=info.frames, duration=info.duration)
    return out


def _recording_ids(paths: list[str]) -> dict[str, str]:
    """The file stem, made a plain name; a stem two files share gets a digest of each path."""
    stems = {p: _UNSAFE.sub("_", Path(p).stem).strip("._") or "rec" for p in paths}
    counts = Counter(stems.values())
    return {p: s if counts[s] == 1 else f"{s}-{hashlib.sha256(p.encode('utf-8')).hexdigest()[:10]}"
            for p, s in stems.items()}


def _supervision(row: dict, recording, text_column: str):
    from lhotse import SupervisionSegment

    custom = {"corpus": row["corpus"]}
    custom.update({k: v for k, v in row.items() if k.startswith("tgt_text_") and str(v).strip()})
    channels = recording.sources[0].channels
    return SupervisionSegment(id=str(row["id"]), recording_id=recording.id, start=float(row["offset"]),
                              duration=float(row["duration"]), channel=channels[0] if len(channels) == 1 else channels,
                              text=str(row[text_column]), language=str(row["lang"]) or None,
                              speaker=str(row["speaker"]),
                              gender=row["gender"] if row["gender"] in ("F", "M") else None,
                              custom=custom)
