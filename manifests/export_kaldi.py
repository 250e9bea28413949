"""Kaldi data directories (``wav.scp, segments, text, utt2spk, spk2utt, spk2gender, utt2dur``)
and ``validate_kaldi_dir``, the checks of Kaldi's ``utils/validate_data_dir.sh`` in Python.

Kaldi sorts with ``LC_ALL=C`` (byte order) and wants ``utt2spk`` sorted both by utterance and by
speaker, which holds when speaker ids prefix utterance ids: ids that do not start with their
speaker are written as ``<speaker>-<id>`` (the file ``utt2table_id`` maps them back).
Every row becomes a segment of its recording, so long recordings need no cutting; Kaldi reads
RIFF wav itself, other formats go through a ``sox ... |`` pipe in ``wav.scp``.

Kaldi recipes read 16 kHz audio (the mTEDx and Common Voice recipes' ``conf/mfcc.conf``:
``--sample-frequency=16000``; ``compute-mfcc-feats`` stops at another rate), so ``export_kaldi``
refuses other rates at build time unless ``resample`` is given: then each recording not
already 16 kHz mono wav is prepared once as a 16 kHz mono wav in the prepared-audio cache
(corpora.prepared_audio, whole recordings: ``segments`` keeps its times) and ``wav.scp``
points at it -- no sox pipe, the corpus untouched.

    export_kaldi({"train": df}, "data")       # writes data/train/{wav.scp,...}, validated
    export_kaldi({"train": df}, "data", resample=16000, audio_cache="runs/prepared-audio")
    validate_kaldi_dir("data/train")           # raises UserError naming the file and line
"""
from __future__ import annotations

import logging
import math
import os
import re
from pathlib import Path

import pandas as pd

from corpora.base.atomic import write_text
from corpora.base.boundary import regular_file
from corpora.base.errors import UserError
from corpora.base.textfile import MAX_LABEL_BYTES
from corpora.prepared_audio import (
    AudioCache,
    Source,
    Target,
    default_cache_dir,
    engine_readable,
    rate_counts,
    read_header,
    run_parallel,
)
from corpora.table import MAX_SECONDS

KALDI_RATE = 16000   # conf/mfcc.conf --sample-frequency of the recipes (mTEDx, Common Voice)
MAX_FRAMES = int(MAX_SECONDS * 1000)   # utt2num_frames: 1 ms frames over the longest segment a table holds

log = logging.getLogger(__name__)
_WS = re.compile(r"\s+")


def _kaldi_id(x: str) -> str:
    # Kaldi ids are whitespace-free tokens.
    return _WS.sub("_", str(x).strip())


def shared_speaker_ids(df: pd.DataFrame) -> bool:
    """True when one speaker id occurs in two corpora (both numbering speakers from 1, say)."""
    return bool((df.groupby(df["speaker"].map(_kaldi_id))["corpus"].nunique() > 1).any())


def kaldi_speakers(df: pd.DataFrame, qualify: bool | None = None) -> pd.Series:
    """Kaldi speaker ids: the table's, or ``<corpus>-<speaker>`` for every row when ``qualify``
    (default: when ids are shared across corpora). Otherwise speaker 1 of two corpora would be
    one Kaldi speaker: one spk2utt entry, one CMVN, and spk2gender keeping either gender."""
    if qualify is None:
        qualify = shared_speaker_ids(df)
    spk = df["speaker"].map(_kaldi_id)
    return df["corpus"].map(_kaldi_id) + "-" + spk if qualify else spk


def kaldi_utt_ids(df: pd.DataFrame, qualify: bool | None = None) -> pd.Series:
    """Utterance ids prefixed by their speaker (unless they already are)."""
    spk = kaldi_speakers(df, qualify)
    utt = df["id"].map(_kaldi_id)
    return pd.Series([u if u.startswith(s + "-") or u.startswith(s + "_") else f"{s}-{u}" for s, u in zip(spk, utt)],
                     index=df.index)


def _recording_ids(paths: pd.Series) -> dict[str, str]:
    """One readable, unique id per audio file (its stem; a counter when stems repeat)."""
    out, seen = {}, {}
    for p in sorted(set(paths)):
        stem = _kaldi_id(Path(p).stem) or "rec"
        n = seen.get(stem, 0)
        seen[stem] = n + 1
        out[p] = stem if n == 0 else f"{stem}-{n}"
    return out


def _c_sorted(lines: list[str]) -> list[str]:
    return sorted(lines, key=lambda s: s.encode("utf-8"))


def _wav_entry(path: str, sample_rate: int) -> str:
    if path.lower().endswith(".wav"):
        return path
    return f"sox {path} -t wav -r {sample_rate} -c 1 - |"


def export_kaldi_dir(df: pd.DataFrame, out_dir: str | os.PathLike, text_column: str = "text",
                     qualify: bool | None = None, prepared: dict[str, str] | None = None,
                     prepared_rate: int | None = None) -> dict:
    """Write one Kaldi data dir for the rows (absolute audio paths); validate it; return a summary.
    ``qualify``: speaker ids as ``<corpus>-<speaker>`` (kaldi_speakers). ``prepared``: audio path
    -> its prepared wav (at ``prepared_rate``), which wav.scp then names instead."""
    out_dir = Path(out_dir)
    if text_column not in df.columns:
        raise UserError(f"no column {text_column!r} for text", fix="pick the transcript column with --text-column")
    utt = kaldi_utt_ids(df, qualify)
    if utt.duplicated().any():
        raise UserError(f"two rows map to the Kaldi utterance id {utt[utt.duplicated()].iloc[0]!r}",
                        fix="make ids unique after replacing whitespace with '_'")
    spk = kaldi_speakers(df, qualify)
    rec = _recording_ids(df["audio"])
    rows = pd.DataFrame({"utt": utt, "spk": spk, "rec": df["audio"].map(rec), "audio": df["audio"],
                         "sr": df["sample_rate"].astype(int), "start": df["offset"].astype(float),
                         "end": df["offset"].astype(float) + df["duration"].astype(float),
                         "dur": df["duration"].astype(float),
                         "text": df[text_column].astype(str).map(lambda t: _WS.sub(" ", t).strip()),
                         "gender": df["gender"]})
    rows = rows.iloc[sorted(range(len(rows)), key=lambda i: rows["utt"].iloc[i].encode("utf-8"))]
    files = {
        "utt2spk": [f"{u} {s}" for u, s in zip(rows["utt"], rows["spk"])],
        "text": [f"{u} {t}".rstrip() for u, t in zip(rows["utt"], rows["text"])],
        "segments": [f"{u} {r} {a:.3f} {b:.3f}"
                     for u, r, a, b in zip(rows["utt"], rows["rec"], rows["start"], rows["end"])],
        "utt2dur": [f"{u} {d:.3f}" for u, d in zip(rows["utt"], rows["dur"])],
        "utt2table_id": [f"{u} {_kaldi_id(i)}" for u, i in zip(rows["utt"], df.loc[rows.index, "id"])],
    }
    recs = rows.drop_duplicates("rec")
    prepared = prepared or {}
    files["wav.scp"] = _c_sorted([f"{r} {prepared[a]}" if a in prepared else f"{r} {_wav_entry(a, s)}"
                                  for r, a, s in zip(recs["rec"], recs["audio"], recs["sr"])])
    by_spk = rows.groupby("spk", sort=False)["utt"].agg(list)
    files["spk2utt"] = _c_sorted([f"{s} {' '.join(us)}" for s, us in by_spk.items()])
    genders = rows.groupby("spk")["gender"].first()
    if genders.isin(["F", "M"]).all():
        files["spk2gender"] = _c_sorted([f"{s} {g.lower()}" for s, g in genders.items()])
    else:
        # spk2gender must list every speaker as m or f: with unknown genders it is left out.
        log.warning("%s: %d speaker(s) of unknown gender: no spk2gender written", out_dir,
                    int((~genders.isin(["F", "M"])).sum()))
    for name, lines in files.items():
        write_text(out_dir / name, "".join(line + "\n" for line in lines))
    validate_kaldi_dir(out_dir)
    return {"utterances": len(rows), "speakers": len(by_spk), "recordings": len(recs),
            "spk2gender": "spk2gender" in files, "prepared": int(recs["audio"].isin(list(prepared)).sum())}


def export_kaldi(splits: dict[str, pd.DataFrame], out_dir: str | os.PathLike, text_column: str = "text", *,
                 resample: int | None = None, audio_cache: str | os.PathLike | None = None,
                 jobs: int | None = None) -> dict:
    """One validated data dir per split: ``<out>/<split>/``. Speaker ids are corpus-qualified in
    every split when any split's speaker ids are shared across corpora, so train and valid name
    the same speakers alike. Rates other than 16 kHz are refused unless ``resample`` (then
    recordings are prepared into ``audio_cache`` with ``jobs`` threads; see the module doc)."""
    qualify = shared_speaker_ids(pd.concat(list(splits.values()))) if splits else False
    if qualify:
        log.info("%s: speaker ids shared across corpora: Kaldi speakers are written <corpus>-<speaker>", out_dir)
    prepared = _prepare_recordings(splits, resample, audio_cache, jobs)
    return {split: export_kaldi_dir(df, Path(out_dir) / split, text_column, qualify, prepared, resample)
            for split, df in splits.items()}


def _prepare_recordings(splits: dict[str, pd.DataFrame], resample: int | None, audio_cache, jobs) -> dict[str, str]:
    """Refuse recordings at another rate than Kaldi's (without ``resample``), or prepare every
    recording Kaldi cannot read as it lies (another rate, stereo, not RIFF wav) as a 16 kHz
    mono wav; returns {audio path: prepared wav}."""
    if not splits:
        return {}
    rates = pd.concat([df[["audio", "sample_rate"]] for df in splits.values()]).drop_duplicates("audio")
    if not resample:
        other = rates[rates["sample_rate"].astype(int) != KALDI_RATE]
        if len(other):
            raise UserError(f"Kaldi recipes read {KALDI_RATE} Hz audio (conf/mfcc.conf --sample-frequency); of "
                            f"{len(rates)} recordings, {rate_counts(other['sample_rate'])} "
                            f"(e.g. {other['audio'].iloc[0]})",
                            fix=f"add `--resample {KALDI_RATE}` to `gendergap manifest build` ({KALDI_RATE} Hz wav "
                                "copies are written once into the prepared-audio cache; the corpus is not modified)")
        return {}
    cache = AudioCache(audio_cache or default_cache_dir(), Target(int(resample), "wav"))
    paths = list(rates["audio"])   # files: pipes never get here (UtteranceTable.audio_rows refuses them)
    headers = run_parallel(read_header, paths, jobs, "audio headers")
    todo = [a for a, h in zip(paths, headers)   # Kaldi reads RIFF wav of integer PCM itself
            if not (engine_readable(a, h, cache.target.sample_rate) and str(h.format) == "WAV"
                    and str(h.subtype).startswith("PCM"))]
    done = cache.prepare([Source(a) for a in todo], jobs)
    return {s.path: p.path for s, p in done.items()}


# --------------------------------------------------------------------------- validation

def _lines(path: Path, max_bytes: int | None = None) -> list[bytes]:
    """A data dir file's lines: a regular file (a FIFO would block the read) of at most ``max_bytes``
    (a label file: MAX_LABEL_BYTES), newline-terminated."""
    data = regular_file(path, path.name, max_bytes=max_bytes,
                        fix="re-export the data dir, or run utils/fix_data_dir.sh").read_bytes()
    if data and not data.endswith(b"\n"):
        raise UserError("last line has no newline", path=path, line=data.count(b"\n") + 1,
                        fix="end every line with \\n")
    return data.split(b"\n")[:-1] if data else []


def _fail(path: Path, line: int | None, msg: str, fix: str = "re-export the data dir, or run utils/fix_data_dir.sh"):
    raise UserError(msg, path=path, line=line, fix=fix)


def _keys_sorted_unique(path: Path, lines: list[bytes]) -> list[bytes]:
    """``check_sorted_and_uniq``: first fields in LC_ALL=C order, no duplicates."""
    keys = [ln.split()[0] if ln.split() else b"" for ln in lines]
    for i in range(1, len(keys)):
        if keys[i] <= keys[i - 1]:
            what = "duplicate key" if keys[i] == keys[i - 1] else "not in sorted order (LC_ALL=C)"
            _fail(path, i + 1, f"{what}: {keys[i].decode(errors='replace')!r}")
    return keys


def _same_keys(path: Path, keys: list[bytes], ref: list[bytes], ref_name: str) -> None:
    if keys != ref:
        a, b = set(keys), set(ref)
        extra, missing = sorted(a - b)[:1], sorted(b - a)[:1]
        detail = (f"{extra[0].decode()!r} is not in {ref_name}" if extra else
                  f"{missing[0].decode()!r} from {ref_name} is missing" if missing else "order differs")
        _fail(path, None, f"its ids differ from {ref_name}'s ({len(keys)} vs {len(ref)}): {detail}")


def validate_kaldi_dir(data_dir: str | os.PathLike, *, no_text: bool = False, no_wav: bool = False,
                       no_feats: bool = True, no_spk_sort: bool = False) -> dict:
    """Apply ``utils/validate_data_dir.sh``'s rules; raise UserError at the first violation.

    Checked: utt2spk/spk2utt present and non-empty, two fields per utt2spk line, every file
    newline-terminated with LC_ALL=C-sorted unique keys, utt2spk sorted by speaker too (unless
    ``no_spk_sort``), spk2utt the exact inverse of utt2spk, text (UTF-8 whitespace rules, no
    ``<s>``, ``</s>``, ``#0``) over the same utterances, wav.scp (no ``~`` paths) and segments
    (4 fields, end > start, same utterances, recordings = wav.scp keys), feats.scp, cmvn.scp,
    spk2gender (m/f, same speakers), utt2dur / utt2num_frames (> 0). The ``no_*`` flags are
    the script's (``no_feats`` defaults to True here: features come later). Returns counts.
    """
    d = Path(data_dir)
    if not d.is_dir():
        raise UserError("no such Kaldi data directory", path=d, fix="export it first")
    utts, speakers = _check_speaker_maps(d, no_spk_sort)
    _check_text(d, utts, no_text)
    _check_audio(d, utts, no_wav)
    _check_keyed_files(d, utts, speakers, no_feats)
    _check_utterance_values(d, utts)
    return {"utterances": len(utts), "speakers": len(speakers)}


def _check_speaker_maps(d: Path, no_spk_sort: bool) -> tuple[list, list]:
    """utt2spk and spk2utt: present, well-formed, sorted, each the other inverted; their keys."""
    for name in ("spk2utt", "utt2spk"):
        if not (d / name).is_file():
            _fail(d / name, None, "missing")
        if (d / name).stat().st_size == 0:
            _fail(d / name, None, "empty")
    u2s_path = d / "utt2spk"
    u2s = _lines(u2s_path)
    for i, ln in enumerate(u2s):
        if len(ln.split()) != 2:
            _fail(u2s_path, i + 1, "wrong format: need 'utt spk'")
    utts = _keys_sorted_unique(u2s_path, u2s)
    if not no_spk_sort:
        # `sort -k2` with LC_ALL=C: key = from the first blank on, then the whole line.
        by_spk = sorted(u2s, key=lambda ln: (ln[len(ln.split()[0]):], ln))
        if by_spk != u2s:
            i = next(k for k, (a, b) in enumerate(zip(by_spk, u2s)) if a != b)
            _fail(u2s_path, i + 1, "not in sorted order when sorted on speaker-id",
                  fix="make speaker-ids prefixes of utterance-ids")
    s2u_path = d / "spk2utt"
    s2u = _lines(s2u_path)
    speakers = _keys_sorted_unique(s2u_path, s2u)
    inverse = [b" ".join([u, f[0]]) for f in (ln.split() for ln in s2u) for u in f[1:]]
    if inverse != [b" ".join(ln.split()) for ln in u2s]:
        _fail(s2u_path, None, "spk2utt and utt2spk do not match (spk2utt must be utt2spk inverted)")
    if len(speakers) == 1:
        log.warning("%s: only one speaker (see 'bold' in http://kaldi-asr.org/doc/data_prep.html)", d)
    return utts, speakers


def _check_text(d: Path, utts: list, no_text: bool) -> None:
    """text: present unless ``no_text``, Kaldi's whitespace rules, no reserved symbols, every utterance."""
    text = d / "text"
    if not text.is_file() and not no_text:
        _fail(text, None, "missing (pass no_text=True if by design)")
    if not text.is_file():
        return
    lines = _lines(text)
    if not lines:
        _fail(text, None, "empty")
    for i, ln in enumerate(lines):
        try:
            s = ln.decode("utf-8")
        except UnicodeDecodeError:
            break   # validate_text.pl only checks whitespace in UTF-8 files
        if "\r" in s:
            _fail(text, i + 1, "contains CR (0x0D)")
        if re.search(r"\s", re.sub(r"[\t\n ]", ".", s)):
            _fail(text, i + 1, "contains disallowed Unicode whitespace")
    for i, ln in enumerate(lines):
        bad = {b"<s>", b"</s>", b"#0"} & set(ln.split()[1:])
        if bad:
            _fail(text, i + 1, f"illegal symbol {sorted(bad)[0].decode()}", fix="remove it from the transcript")
    _same_keys(text, _keys_sorted_unique(text, lines), utts, "utt2spk")


def _check_audio(d: Path, utts: list, no_wav: bool) -> None:
    """wav.scp (no ``~`` paths) and segments: the recordings and which utterances they hold."""
    text, wav, seg = d / "text", d / "wav.scp", d / "segments"
    if seg.is_file() and not wav.is_file():
        _fail(seg, None, "segments file exists but no wav.scp")
    if not wav.is_file() and not no_wav:
        _fail(wav, None, "missing (pass no_wav=True if by design)")
    if not wav.is_file():
        return
    wav_lines = _lines(wav)
    wav_keys = _keys_sorted_unique(wav, wav_lines)
    for i, ln in enumerate(wav_lines):
        if re.match(rb"^\S+\s+~", ln):
            _fail(wav, i + 1, "a path starts with ~ (fopen does no tilde expansion)", fix="write the full path")
    if not seg.is_file():
        _same_keys(wav, wav_keys, utts, "utt2spk")
        return
    seg_lines = _lines(seg)
    seg_keys = _keys_sorted_unique(seg, seg_lines)
    for i, ln in enumerate(seg_lines):
        f = ln.split()
        try:
            ok = len(f) == 4 and float(f[3]) > float(f[2])
        except ValueError:
            ok = False
        if not ok:
            _fail(seg, i + 1, "bad line: need 'utt rec start end' with end > start")
    if text.is_file():
        _same_keys(seg, seg_keys, utts, "utt2spk")
    recs = sorted({ln.split()[1] for ln in seg_lines})
    _same_keys(wav, wav_keys, recs, "segments' recordings")


def _check_keyed_files(d: Path, utts: list, speakers: list, no_feats: bool) -> None:
    """feats.scp, cmvn.scp and spk2gender cover exactly the utterances / speakers."""
    feats = d / "feats.scp"
    if not feats.is_file() and not no_feats:
        _fail(feats, None, "missing (pass no_feats=True if by design)")
    for name, ref, ref_name in (("feats.scp", utts, "utt2spk"), ("cmvn.scp", speakers, "spk2utt")):
        if (d / name).is_file():
            _same_keys(d / name, _keys_sorted_unique(d / name, _lines(d / name)), ref, ref_name)
    s2g = d / "spk2gender"
    if s2g.is_file():
        lines = _lines(s2g, MAX_LABEL_BYTES)
        keys = _keys_sorted_unique(s2g, lines)
        for i, ln in enumerate(lines):
            f = ln.split()
            if len(f) != 2 or f[1] not in (b"m", b"f"):
                _fail(s2g, i + 1, "mal-formed: need 'spk m' or 'spk f'")
        _same_keys(s2g, keys, speakers, "spk2utt")


def _check_utterance_values(d: Path, utts: list) -> None:
    """utt2dur and utt2num_frames: one positive value (whole for frames) per utterance."""
    for name, integer in (("utt2dur", False), ("utt2num_frames", True)):
        p = d / name
        if p.is_file():
            lines = _lines(p)
            _same_keys(p, _keys_sorted_unique(p, lines), utts, "utt2spk")
            for i, ln in enumerate(lines):
                f = ln.split()
                try:   # bounded: an "inf" duration passed, and int(inf) frames traced back
                    x = float(f[1]) if len(f) == 2 else math.nan
                except ValueError:
                    x = math.nan
                ok = 0 < x <= (MAX_FRAMES if integer else MAX_SECONDS) and (not integer or x == int(x))
                if not ok:
                    _fail(p, i + 1, f"bad line: need 'utt value' with value > 0{' and whole' if integer else ''}, "
                                    f"at most {MAX_FRAMES if integer else MAX_SECONDS:g}")
