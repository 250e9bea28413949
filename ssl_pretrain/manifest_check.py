"""Check a fairseq wav2vec manifest directory before spending GPU hours on it.

fairseq's own errors for a bad manifest arrive late (inside a data-loader worker, after the
model is built) and name neither the file nor the line. These checks run first and raise one
UserError naming the manifest, the line and the fix.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import soundfile as sf

from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from corpora.prepared_audio import rate_counts

FIX_REBUILD = "rebuild the manifest with `gendergap manifest build ... --format fairseq`"
FIX_RESAMPLE = ("rebuild with `gendergap manifest build ... --format fairseq --resample {rate}` ({rate} Hz mono "
                "copies in the prepared-audio cache; the corpus is not modified)")


def read_wav2vec_manifest(path: str | os.PathLike) -> tuple[Path, list[tuple[str, int, int]]]:
    """Parse ``root`` then ``relpath<TAB>num_samples`` lines; returns (root, [(relpath, n, line)])."""
    path = Path(path)
    if not path.is_file():
        raise UserError("manifest file not found", path=path, fix=FIX_REBUILD)
    lines = read_lines(path, "manifest file")
    if not lines or not lines[0].strip():
        raise UserError("empty manifest: the first line must be the audio root directory", path=path, line=1,
                        fix=FIX_REBUILD)
    root = Path(lines[0].strip())
    if not root.is_absolute():
        root = (path.parent / root).resolve()
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[1].strip().isdigit():
            raise UserError(f"expected `relpath<TAB>num_samples`, got {line[:80]!r}", path=path, line=lineno,
                            fix=FIX_REBUILD)
        rows.append((parts[0], int(parts[1]), lineno))
    if not rows:
        raise UserError("manifest lists no audio files", path=path, fix=FIX_REBUILD)
    return root, rows


def check_manifest_dir(manifest_dir: str | os.PathLike, sample_rate: int = 16000, check_audio: str = "sample",
                       n_checked: int = 200, seed: int = 0) -> dict:
    """Validate train.tsv (and valid.tsv if present): files exist; headers say mono, the
    expected rate and the listed length. ``check_audio``: "all", "sample" (n_checked files
    drawn with ``seed``; existence is still checked for every file) or "none".

    Returns {"train": {"files": n, "hours": h}, "valid": {...}}.
    """
    manifest_dir = Path(manifest_dir)
    if not manifest_dir.is_dir():
        raise UserError("manifest directory not found", path=manifest_dir,
                        fix="give the directory holding train.tsv (and valid.tsv)")
    if not (manifest_dir / "train.tsv").is_file():
        raise UserError("no train.tsv in the manifest directory", path=manifest_dir, fix=FIX_REBUILD)
    stats = {}
    for split in ("train", "valid"):
        tsv = manifest_dir / f"{split}.tsv"
        if not tsv.is_file():
            continue
        root, rows = read_wav2vec_manifest(tsv)
        for rel, _n, lineno in rows:
            if not (root / rel).is_file():
                raise UserError(f"audio file {root / rel} does not exist", path=tsv, line=lineno,
                                fix="fix the root directory on line 1 or remove the missing files from the manifest")
        if check_audio == "all":
            picked = rows
        elif check_audio == "sample":
            picked = random.Random(seed).sample(rows, min(n_checked, len(rows)))
        else:
            picked = []
        infos = []
        for rel, n, lineno in picked:
            try:
                infos.append((rel, n, lineno, sf.info(str(root / rel))))
            except RuntimeError as e:
                raise UserError(f"cannot read audio header of {root / rel}: {e}", path=tsv, line=lineno,
                                fix=FIX_RESAMPLE.format(rate=sample_rate)) from None
        _check_rates(tsv, root, infos, sample_rate, len(rows))
        for rel, n, lineno, info in infos:
            if info.channels != 1:
                raise UserError(f"{root / rel} has {info.channels} channels; wav2vec 2.0 takes mono audio",
                                path=tsv, line=lineno, fix=FIX_RESAMPLE.format(rate=sample_rate))
            if info.frames != n:
                raise UserError(f"manifest says {n} samples, the file has {info.frames}", path=tsv, line=lineno,
                                fix=FIX_REBUILD)
        stats[split] = {"files": len(rows), "hours": round(sum(n for _, n, _ in rows) / sample_rate / 3600, 4)}
    return stats


def _check_rates(tsv: Path, root: Path, infos: list, sample_rate: int, n_rows: int) -> None:
    """One line for every checked file at another rate than the model's: the rates with their
    counts, the first such file's line. The model's rate is ``sample_rate`` (task.sample_rate),
    whatever rate most files have."""
    other = [(rel, lineno, int(info.samplerate)) for rel, _, lineno, info in infos if info.samplerate != sample_rate]
    if not other:
        return
    checked = "" if len(infos) == n_rows else f" (of {len(infos)} checked)"
    rel, lineno, _ = other[0]
    raise UserError(f"fairseq's audio_pretraining reads {sample_rate} Hz audio; "
                    f"{rate_counts(r for _, _, r in other)}{checked}, e.g. {root / rel}",
                    path=tsv, line=lineno, fix=FIX_RESAMPLE.format(rate=sample_rate))
