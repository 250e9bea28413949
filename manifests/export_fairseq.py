"""fairseq wav2vec 2.0 manifests (task ``audio_pretraining``): ``train.tsv``, ``valid.tsv``.

The format fairseq's ``FileAudioDataset`` reads: the first line is a root directory, then one
line per file ``relpath<TAB>num_samples``. It reads whole files only (its ``path:offset:length``
form addresses byte ranges inside uncompressed zips, not time ranges of a wav), so rows that are
segments of a longer recording are cut into wav files under ``<out>/audio/<split>/``. Whole-file
rows are referenced where they lie. ``num_samples`` is the header's frame count of the file
fairseq will open (soundfile's ``frames``), never ``duration * sample_rate``.

fairseq reads ``task.sample_rate`` (16 kHz) mono audio only and does not resample: other rates
are refused here, at build time, in one line with the rates and their counts, unless
``resample`` is given; then every file fairseq cannot take as it lies (another rate, stereo,
mp3/opus, ``.wav.gz``) is read from the prepared-audio cache (corpora.prepared_audio), which
writes 16 kHz mono copies once; the manifest points at them, the corpus stays untouched.

    info = export_wav2vec({"train": train_df, "valid": valid_df}, out_dir)
    info = export_wav2vec(splits, out_dir, resample=16000, audio_cache="runs/prepared-audio", jobs=4)
"""
from __future__ import annotations

import hashlib
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from corpora.base.atomic import atomic_open
from corpora.base.boundary import is_special, regular_file
from corpora.base.errors import UserError
from corpora.prepared_audio import (
    AudioCache,
    Source,
    Target,
    convert,
    default_cache_dir,
    engine_readable,
    rate_counts,
    read_header,
    run_parallel,
)

FAIRSEQ_RATE = 16000   # task.sample_rate of every preset (ssl_pretrain/presets/*.yaml)

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


MAX_NAME = 120   # characters: with the '.<name>.XXXXXXXX.tmp' of its atomic write, well under 255 bytes


def safe_name(utt_id: str) -> str:
    """A file name for an utterance id (ids may hold '/', spaces, ...; a long one keeps its first
    characters and a digest of the whole, so distinct ids stay distinct)."""
    name = _UNSAFE.sub("_", str(utt_id)).strip("._") or "utt"
    if len(name) > MAX_NAME:
        name = f"{name[:MAX_NAME - 17]}-{hashlib.sha256(str(utt_id).encode()).hexdigest()[:16]}"
    return name


def _headers(paths) -> dict:
    """soundfile headers of each distinct file. Threads: libsndfile's open releases the GIL and
    on network storage the per-file latency, not the CPU, is what a big corpus waits for."""
    paths = sorted(set(paths))
    with ThreadPoolExecutor(max_workers=min(16, 4 * (os.cpu_count() or 1))) as pool:
        infos = list(tqdm(pool.map(read_header, paths), total=len(paths), desc="audio headers", unit="file",
                          leave=False, disable=None))
    return dict(zip(paths, infos))


def segment_bounds(row, sample_rate: int) -> tuple[int, int]:
    """First sample and number of samples of a row's segment in its file."""
    start = int(round(float(row["offset"]) * sample_rate))
    return start, int(round(float(row["duration"]) * sample_rate))


def export_wav2vec(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, *,
                   root: str | os.PathLike | None = None, materialise: str = "auto",
                   final_dir: str | os.PathLike | None = None, sample_rate: int | None = None,
                   resample: int | None = None, audio_cache: str | os.PathLike | None = None,
                   audio_format: str = "flac", jobs: int | None = None) -> dict:
    """Write ``<split>.tsv`` per split (fairseq's default subsets are ``train`` and ``valid``).

    ``splits`` hold utterance-table rows with ABSOLUTE audio paths (``corpora.utterances.UtteranceTable``).
    ``materialise``: 'auto' cuts segments only, 'always' cuts every row into its own wav,
    'never' refuses segments. ``root``: the manifest's root line (default: the deepest common
    directory); every file must lie under it. ``final_dir``: where ``out_dir`` will be moved
    once complete (the cut files' root must name that place). ``sample_rate``: the model's rate
    (fairseq's ``task.sample_rate``, default 16000): other rates are refused unless ``resample``
    (that rate) is given; then the rows fairseq cannot read as they lie are prepared into
    ``audio_cache`` (default: corpora.prepared_audio.default_cache_dir) as ``audio_format``
    with ``jobs`` threads. Returns a summary (root, rows per split, files cut and prepared).
    """
    if materialise not in ("auto", "always", "never"):
        raise UserError(f"unknown materialise mode {materialise!r}", fix="use auto, always or never")
    if resample and sample_rate and int(resample) != int(sample_rate):
        raise UserError(f"--resample {resample} but the model reads {sample_rate} Hz",
                        fix=f"use --resample {sample_rate}")
    want = int(resample or sample_rate or FAIRSEQ_RATE)
    out_dir = Path(out_dir)
    final_dir = Path(final_dir or out_dir).resolve()
    info = _audio_headers(pd.concat(list(splits.values())), want, bool(resample))
    cache = AudioCache(audio_cache or default_cache_dir(), Target(want, audio_format)) if resample else None
    # plan: for each row, (final absolute path, num_samples, what to cut or None, what to prepare or None)
    names: dict[str, str] = {}
    plan = {split: [_plan_row(row, split, info[row["audio"]], materialise, final_dir, names, cache)
                    for row in df.to_dict("records")] for split, df in splits.items()}
    sources = [i[3] for items in plan.values() for i in items if i[3]]
    prepared = cache.prepare(sources, jobs) if sources else {}
    plan = {split: [(prepared[i[3]].path, prepared[i[3]].frames, None, i[3]) if i[3] else i for i in items]
                for split, items in plan.items()}
    root = _manifest_root([p for items in plan.values() for p, *_ in items], root)
    n_cut = sum(_write_split(split, items, root, out_dir, jobs) for split, items in plan.items())
    return {"root": root, "rows": {s: len(i) for s, i in plan.items()}, "cut": n_cut, "sample_rate": want,
            "prepared": len(set(sources)), "audio_cache": str(cache.root) if cache else None}


def _audio_headers(all_rows: pd.DataFrame, want: int, resample: bool) -> dict:
    """The headers of every (absolute) audio file. Without ``resample``, files fairseq cannot
    read (another rate, several channels, gzip) are refused here, at build time, in one line:
    fairseq's audio_pretraining opens the files itself and raises on any rate but
    task.sample_rate (the feature store and the SpeechBrain pipelines resample as they read)."""
    rel = [a for a in all_rows["audio"] if not os.path.isabs(a)]
    if rel:
        raise UserError(f"audio path {rel[0]!r} is relative",
                        fix="read the table with corpora.utterances.UtteranceTable.load (audio absolute)")
    # a FIFO blocks the header read for ever (in a worker thread Ctrl-C cannot reach): refuse it first
    special = next((a for a in sorted(set(all_rows["audio"])) if is_special(a)), None)
    if special is not None:
        regular_file(special, "audio file")
    info = _headers(all_rows["audio"])
    if resample:
        return info
    other = {p: int(i.samplerate) for p, i in sorted(info.items()) if int(i.samplerate) != want}
    multi = [p for p, i in sorted(info.items()) if int(i.channels) != 1]
    gz = [p for p in sorted(info) if p.lower().endswith(".gz")]
    problems = ([rate_counts(other.values())] if other else []) + \
        ([f"{len(multi)} {'has' if len(multi) == 1 else 'have'} several channels"] if multi else []) + \
        ([f"{len(gz)} {'is' if len(gz) == 1 else 'are'} gzipped"] if gz else [])
    if problems:
        example = next(iter(other), None) or (multi + gz)[0]
        raise UserError(f"fairseq's audio_pretraining reads mono audio at one sample rate, {want} Hz "
                        f"(task.sample_rate), "
                        f"and does not resample; of {len(info)} files, {'; '.join(problems)} (e.g. {example})",
                        fix=f"add `--resample {want}` to `gendergap manifest build` ({want} Hz mono copies are "
                            "written once into the prepared-audio cache; the corpus is not modified)")
    return info


def _plan_row(row: dict, split: str, hdr, materialise: str, final_dir: Path, names: dict[str, str],
              cache: AudioCache | None) -> tuple:
    """(final absolute path, num_samples, what to cut or None, what to prepare or None) for one row:
    a whole file is used where it lies, a segment (or every row with 'always') becomes its own
    wav under final_dir, and a file fairseq cannot read is prepared in the cache (whole, or the segment)."""
    sr = int(hdr.samplerate)
    start, n = segment_bounds(row, sr)
    whole = start == 0 and abs(n - hdr.frames) <= 1
    if start + n > hdr.frames + 1:
        raise UserError(f"row {row['id']!r}: segment {row['offset']}+{row['duration']} s runs past the end "
                        f"of {row['audio']} ({hdr.frames / sr:.3f} s)", fix="re-index the corpus")
    if materialise == "never" and not whole:
        raise UserError(f"row {row['id']!r} is a segment ({row['offset']} s + {row['duration']} s of "
                        f"{row['audio']}) and fairseq reads whole files", fix="use materialise='auto'")
    n = min(n, hdr.frames - start)
    if cache is not None and not engine_readable(row["audio"], hdr, cache.target.sample_rate):
        return None, None, None, Source(row["audio"]) if whole else Source(row["audio"], start, n)
    if whole and materialise != "always":
        return row["audio"], int(hdr.frames), None, None
    name = safe_name(row["id"])
    key = f"{split}/{name}"
    if names.setdefault(key, row["id"]) != row["id"]:
        raise UserError(f"ids {names[key]!r} and {row['id']!r} give the same file name {name}.wav",
                        fix="make ids differ in letters, digits, '.', '_' or '-'")
    return str(final_dir / "audio" / split / f"{name}.wav"), n, (row["audio"], start, n, key), None


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


def _write_split(split: str, items: list[tuple], root: str, out_dir: Path, jobs: int | None) -> int:
    """Cut the split's segments into out_dir/audio (at their own rate, 16-bit sources bit-exact:
    corpora.prepared_audio.convert), then write ``<split>.tsv``; returns the files cut."""
    cuts = [i[2] for i in items if i[2]]

    def cut(c):
        path, start, frames, key = c
        return convert(path, out_dir / "audio" / f"{key}.wav", start=start, frames=frames)

    run_parallel(cut, cuts, jobs, f"cut {split} segments", unit="seg")
    bad = [p for p, *_ in items if re.search(r"[\t\n\r]", os.path.relpath(p, root))]
    if bad:
        raise UserError(f"audio path {bad[0]!r} holds a tab or newline, which the manifest format cannot carry",
                        fix="rename the file")
    with atomic_open(out_dir / f"{split}.tsv") as f:
        f.write(root + "\n")
        for p, n, *_ in items:
            f.write(f"{os.path.relpath(p, root)}\t{n}\n")
    return len(cuts)


def read_wav2vec_manifest(path: str | os.PathLike) -> tuple[str, list[tuple[str, int]]]:
    """(root, [(relpath, num_samples)]) -- the way fairseq's FileAudioDataset reads it."""
    with open(path, encoding="utf-8") as f:
        root = f.readline().strip()
        rows = []
        for line in f:
            rel, n = line.rstrip("\n").split("\t")
            rows.append((rel, int(n)))
    return root, rows
