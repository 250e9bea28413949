"""fairseq wav2vec 2.0 manifests (task ``audio_pretraining``): ``train.tsv``, ``valid.tsv``.

The format fairseq's ``FileAudioDataset`` reads: the first line is a root directory, then one
line per file ``relpath<TAB>num_samples``. It reads whole files only (its ``path:offset:length``
form addresses byte ranges inside uncompressed zips, not time ranges of a wav), so rows that are
segments of a longer recording are cut into wav files under ``<out>/audio/<split>/``. Whole-file
rows are referenced where they lie. ``num_samples`` is the header's frame count of the file
fairseq will open (soundfile's ``frames``), never ``duration * sample_rate``.

    info = export_wav2vec({"train": train_df, "valid": valid_df}, out_dir)
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import soundfile as sf
from tqdm.auto import tqdm

from corpora.base.atomic import atomic_open
from corpora.base.errors import UserError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(utt_id: str) -> str:
    """A file name for an utterance id (ids may hold '/', spaces, ...)."""
    return _UNSAFE.sub("_", str(utt_id)).strip("._") or "utt"


def _header(path: str):
    try:
        return sf.info(path)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise UserError(f"cannot read the audio header of {path} ({str(e).strip().splitlines()[-1]})",
                        fix="check the table's audio paths (re-index the corpus if files moved)") from None


def _headers(paths) -> dict:
    """soundfile headers of each distinct file. Threads: libsndfile's open releases the GIL and
    on network storage the per-file latency, not the CPU, is what a big corpus waits for."""
    paths = sorted(set(paths))
    with ThreadPoolExecutor(max_workers=min(16, 4 * (os.cpu_count() or 1))) as pool:
        infos = list(tqdm(pool.map(_header, paths), total=len(paths), desc="audio headers", unit="file",
                          leave=False, disable=None))
    return dict(zip(paths, infos))


def segment_bounds(row, sample_rate: int) -> tuple[int, int]:
    """First sample and number of samples of a row's segment in its file."""
    start = int(round(float(row["offset"]) * sample_rate))
    return start, int(round(float(row["duration"]) * sample_rate))


def export_wav2vec(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, *,
                   root: str | os.PathLike | None = None, materialise: str = "auto",
                   final_dir: str | os.PathLike | None = None, sample_rate: int | None = None) -> dict:
    """Write ``<split>.tsv`` per split (fairseq's default subsets are ``train`` and ``valid``).

    ``splits`` hold utterance-table rows with ABSOLUTE audio paths (``corpora.table.resolve_audio``).
    ``materialise``: 'auto' cuts segments only, 'always' cuts every row into its own wav,
    'never' refuses segments. ``root``: the manifest's root line (default: the deepest common
    directory); every file must lie under it. ``final_dir``: where ``out_dir`` will be moved
    once complete (the cut files' root must name that place). ``sample_rate``: required rate
    (fairseq's ``task.sample_rate``); default: whatever single rate the files share.
    Returns a summary (root, rows per split, files cut).
    """
    if materialise not in ("auto", "always", "never"):
        raise UserError(f"unknown materialise mode {materialise!r}", fix="use auto, always or never")
    out_dir = Path(out_dir)
    final_dir = Path(final_dir or out_dir).resolve()
    info, rates = _audio_headers(pd.concat(list(splits.values())), sample_rate)
    # plan: for each row, (final absolute path, num_samples, source to cut or None)
    names: dict[str, str] = {}
    plan = {split: [_plan_row(row, split, info[row["audio"]], materialise, final_dir, names)
                    for row in df.to_dict("records")] for split, df in splits.items()}
    root = _manifest_root([p for items in plan.values() for p, _, _ in items], root)
    n_cut = sum(_write_split(split, items, root, out_dir, info) for split, items in plan.items())
    return {"root": root, "rows": {s: len(i) for s, i in plan.items()}, "cut": n_cut,
            "sample_rate": rates[0] if rates else None}


def _audio_headers(all_rows: pd.DataFrame, sample_rate: int | None) -> tuple[dict, list[int]]:
    """The headers of every (absolute) audio file, and their one sample rate (as a list)."""
    rel = [a for a in all_rows["audio"] if not os.path.isabs(a)]
    if rel:
        raise UserError(f"audio path {rel[0]!r} is relative", fix="resolve paths first (corpora.table.resolve_audio)")
    info = _headers(all_rows["audio"])
    rates = sorted({int(i.samplerate) for i in info.values()})
    if len(rates) > 1 or (sample_rate and rates != [sample_rate]):
        # Refused, not resampled: fairseq's audio_pretraining opens the files itself and raises on
        # any rate but task.sample_rate (the feature store and SpeechBrain pipelines resample).
        want = sample_rate or (16000 if 16000 in rates else rates[-1])
        odd = next(p for p, i in sorted(info.items()) if int(i.samplerate) != want)
        raise UserError(f"{odd} has sample rate {int(info[odd].samplerate)} Hz (rates here: {rates}); fairseq's "
                        f"audio_pretraining reads {want} Hz files only (task.sample_rate) and does not resample",
                        fix=f"resample the corpus to {want} Hz (e.g. `sox in.wav -r {want} out.wav`) "
                            "and index it again")
    return info, rates


def _plan_row(row: dict, split: str, hdr, materialise: str, final_dir: Path, names: dict[str, str]) -> tuple:
    """(final absolute path, num_samples, what to cut or None) for one row: a whole file is used
    where it lies, a segment (or every row with 'always') becomes its own wav under final_dir."""
    sr = int(hdr.samplerate)
    start, n = segment_bounds(row, sr)
    whole = start == 0 and abs(n - hdr.frames) <= 1
    if start + n > hdr.frames + 1:
        raise UserError(f"row {row['id']!r}: segment {row['offset']}+{row['duration']} s runs past the end "
                        f"of {row['audio']} ({hdr.frames / sr:.3f} s)", fix="re-index the corpus")
    if whole and materialise != "always":
        return row["audio"], int(hdr.frames), None
    if materialise == "never":
        raise UserError(f"row {row['id']!r} is a segment ({row['offset']} s + {row['duration']} s of "
                        f"{row['audio']}) and fairseq reads whole files", fix="use materialise='auto'")
    name = safe_name(row["id"])
    key = f"{split}/{name}"
    if names.setdefault(key, row["id"]) != row["id"]:
        raise UserError(f"ids {names[key]!r} and {row['id']!r} give the same file name {name}.wav",
                        fix="make ids differ in letters, digits, '.', '_' or '-'")
    n = min(n, hdr.frames - start)
    return str(final_dir / "audio" / split / f"{name}.wav"), n, (row["audio"], start, n, key)


def _manifest_root(finals: list[str], root) -> str:
    """The manifest's root line: ``root`` or the deepest common directory; it must hold every file."""
    if root is None:
        root = os.path.commonpath([os.path.dirname(p) for p in finals])
    root = os.path.abspath(root)
    for p in finals:
        if os.path.commonpath([root, p]) != root:
            raise UserError(f"{p} is outside the manifest root {root}", fix="leave --root out (the common "
                            "directory is used), or give a root that holds every audio file and --out")
    return root


def _write_split(split: str, items: list[tuple], root: str, out_dir: Path, info: dict) -> int:
    """Cut the split's segments into out_dir/audio, then write ``<split>.tsv``; returns the files cut."""
    n_cut = 0
    for _, n, src in tqdm([i for i in items if i[2]], desc=f"cut {split} segments", unit="seg", disable=None):
        path, start, frames, key = src
        x, sr = sf.read(path, start=start, frames=frames, dtype="int16" if _is_pcm16(info[path]) else "float32",
                        always_2d=False)
        dest = out_dir / "audio" / f"{key}.wav"
        dest.parent.mkdir(parents=True, exist_ok=True)
        sf.write(dest, x, sr, subtype="PCM_16" if x.dtype == np.int16 else "FLOAT")
        n_cut += 1
    bad = [p for p, _, _ in items if re.search(r"[\t\n\r]", os.path.relpath(p, root))]
    if bad:
        raise UserError(f"audio path {bad[0]!r} holds a tab or newline, which the manifest format cannot carry",
                        fix="rename the file")
    with atomic_open(out_dir / f"{split}.tsv") as f:
        f.write(root + "\n")
        for p, n, _ in items:
            f.write(f"{os.path.relpath(p, root)}\t{n}\n")
    return n_cut


def _is_pcm16(info) -> bool:
    # Keep 16-bit sources bit-exact in the cut files; anything else is written as float.
    return str(info.subtype) == "PCM_16"


def read_wav2vec_manifest(path: str | os.PathLike) -> tuple[str, list[tuple[str, int]]]:
    """(root, [(relpath, num_samples)]) -- the way fairseq's FileAudioDataset reads it."""
    with open(path, encoding="utf-8") as f:
        root = f.readline().strip()
        rows = []
        for line in f:
            rel, n = line.rstrip("\n").split("\t")
            rows.append((rel, int(n)))
    return root, rows
