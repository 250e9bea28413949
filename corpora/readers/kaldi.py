"""A Kaldi data directory, as recipes (Kaldi ``egs/*/s5``, ESPnet ``egs2/*/asr1``) write it::

    <recipe>/data/train/wav.scp     <recording> <path>   or   <recording> <command> |
    <recipe>/data/train/segments    <utt> <recording> <start> <end>   (optional: without it, utt = recording)
    <recipe>/data/train/text        <utt> <words ...>
    <recipe>/data/train/utt2spk     <utt> <speaker>
    <recipe>/data/train/spk2gender  <speaker> m|f     (optional)
    <recipe>/data/train/utt2dur     <utt> <seconds>   (optional; utils/data/get_utt2dur.sh)

Relative paths in wav.scp are relative to the recipe's working directory -- the directory
the scripts run from, i.e. the parent of ``data/`` -- or to ``kaldi_root`` when given.

Piped entries (``sox x.sph -t wav -r 16000 - |``, ``flac -c -d -s x.flac |``) are kept in the
table as given (``audio`` ends with ``|``; ``audio_cwd`` names the directory to run them in).
Indexing never runs them unless ``allow_pipes`` (``--allow-pipes``): their duration comes
from ``segments`` (end - start) or ``utt2dur``, their sample rate from the command (sox
``-r N`` / ``rate N``) or, failing that, the one accepted rate (``--sample-rates``; said in the
log). With ``allow_pipes`` an entry whose duration is not known that way is run once (in
``audio_cwd``) and its output's header read. A piped recording is not checked for a segment
past its end (that needs its audio).

A speaker missing from spk2gender (or a data dir without one) gets U with a warning that
counts them; ``--strict`` makes it an error. The split defaults to the directory's name.
"""
from __future__ import annotations

import io
import logging
import math
import re
import subprocess
from pathlib import Path

import pandas as pd
import soundfile as sf

from corpora.base.boundary import rate
from corpora.base.errors import UserError
from corpora.base.textfile import MAX_LABEL_BYTES, read_lines
from corpora.readers.common import AudioCheck, finish_table, require_file, resolve_under

log = logging.getLogger(__name__)


def _kv(path: Path, what: str, max_bytes: int | None = None) -> dict[str, tuple[str, int]]:
    """{key: (rest of line, line number)}; a repeated key is a UserError; a file over ``max_bytes``
    (a label file) is refused before it is read."""
    out: dict[str, tuple[str, int]] = {}
    for i, line in enumerate(read_lines(path, path.name, max_bytes=max_bytes), start=1):
        if not line.strip():
            continue
        parts = line.split(None, 1)  # Kaldi separates with spaces or tabs
        key, rest = parts[0], (parts[1].strip() if len(parts) > 1 else "")
        if key in out:
            raise UserError(f"duplicate id {key!r} (first on line {out[key][1]})", path=path, line=i,
                            fix=f"one line per {what}; sort and deduplicate with utils/fix_data_dir.sh")
        out[key] = (rest, i)
    return out


_SOX_RATE = re.compile(r"(?:^|\s)(?:-r|--rate)\s*(\d+(?:\.\d+)?)(k?)\b|(?:^|\s)rate(?:\s+-\w+)*\s+(\d+)(k?)\b")


def pipe_sample_rate(command: str, path=None, line: int | None = None) -> int | None:
    """The output rate a sox command line names (``-r 16000``, ``-r 16k``, ``rate 16000``), else None;
    a rate outside boundary.MIN_RATE..MAX_RATE (``-r 100000000000000000000``) is a UserError naming
    ``path`` and ``line`` (the wav.scp line), as a table's sample_rate would be."""
    m = _SOX_RATE.search(command)
    if not m:
        return None
    value, kilo = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    hz = float(value) * (1000 if kilo else 1)
    return rate(round(hz) if math.isfinite(hz) else hz, "the sample rate the piped command names", path=path,
                line=line, fix="write the rate the command outputs (e.g. -r 16000), or dump the audio to files")


def run_pipe(command: str, cwd: Path, src: Path, line: int) -> tuple[int, float]:
    """(sample rate, seconds) of what a wav.scp command writes: run it once, read its output.

    Only reached with --allow-pipes. The whole output is decoded, since a wav streamed to a pipe
    has no valid length in its header.
    """
    cmd = command.rstrip()[:-1].strip()
    try:
        proc = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"the command failed to run ({e})", path=src, line=line,
                        fix="run it by hand to see why") from None
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise UserError(f"the command exited with {proc.returncode}" + (f" ({err[-1]})" if err else ""),
                        path=src, line=line, fix="run it by hand in " + str(cwd))
    try:
        data, sr = sf.read(io.BytesIO(proc.stdout), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise UserError(f"the command's output is not audio soundfile can read ({e})", path=src, line=line,
                        fix="make it write wav to stdout (e.g. sox ... -t wav - |)") from None
    hz = rate(sr, "the sample rate of the command's output", path=src, line=line,
              fix="make it write audio at a real rate")
    return hz, len(data) / hz


def read_kaldi(root, *, split: str | None = None, lang: str = "", corpus: str = "kaldi", kaldi_root=None,
               allow_pipes: bool = False, check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of a Kaldi data directory (see the module docstring for relative paths,
    piped wav.scp entries and missing spk2gender speakers)."""
    root = Path(root)
    wav_scp = require_file(root / "wav.scp", "wav.scp", "--root must be a Kaldi data dir (wav.scp, text, utt2spk)")
    utt2spk_f = require_file(root / "utt2spk", "utt2spk", "every Kaldi data dir needs utt2spk")
    # Kaldi scripts run from the recipe dir (the parent of data/); wav.scp paths are relative to it.
    cwd = Path(kaldi_root) if kaldi_root else (root.parent.parent if root.parent.name == "data" else root.parent)
    wavs = _kv(wav_scp, "recording")
    utt2spk = _kv(utt2spk_f, "utterance")
    text = _kv(root / "text", "utterance") if (root / "text").is_file() else {}
    utt2dur = _kv(root / "utt2dur", "utterance") if (root / "utt2dur").is_file() else {}
    spk2gender_f = root / "spk2gender"
    spk2gender = _kv(spk2gender_f, "speaker", MAX_LABEL_BYTES) if spk2gender_f.is_file() else None
    assumed_rate: list[str] = []
    ran: list[str] = []
    entries = _utterance_entries(root / "segments", wav_scp, wavs)
    rows = []
    unlisted: dict[str, tuple[Path, int]] = {}
    for utt, rec, start, dur, src, line in entries:
        if utt not in utt2spk:
            raise UserError(f"utterance {utt!r} has no speaker in utt2spk", path=src, line=line,
                            fix="add it to utt2spk (utils/fix_data_dir.sh drops such utterances)")
        spk = utt2spk[utt][0]
        raw = ""
        if spk2gender is not None and spk in spk2gender:
            raw = spk2gender[spk][0]
        else:
            unlisted.setdefault(spk, (src, line))
        row = dict(id=utt, audio=_audio_of(wavs, cwd, rec, src, line), offset=start, duration=dur, speaker=spk,
                   gender_raw=raw, corpus=corpus, lang=lang, split=split or root.name,
                   text=text.get(utt, ("", 0))[0], recording=rec, _src=src, _line=line,
                   _gender_src=spk2gender_f if spk2gender is not None else src)
        if row["audio"].endswith("|"):
            _fill_pipe(row, utt2dur, wavs[rec][1], wav_scp, cwd, allow_pipes, check, assumed_rate, ran)
        rows.append(row)
    unlisted_note = _report_unlisted(unlisted, spk2gender_f if spk2gender is not None else None, root, check)
    n_pipes = sum(1 for r in rows if r.get("_pipe"))
    df = finish_table(rows, source=root, check=check)
    # Said once the table stands, so a refused index prints its one error line only.
    if unlisted_note:
        log.warning("%s", unlisted_note)
    _log_pipes(wav_scp, n_pipes=n_pipes, assumed_rate=assumed_rate, ran=ran, check=check)
    return df


def _audio_of(wavs: dict[str, tuple[str, int]], cwd: Path, rec: str, src: Path, line: int) -> str:
    """The table's ``audio`` of a recording: its path under ``cwd``, or its piped command as given."""
    if rec not in wavs:
        raise UserError(f"recording {rec!r} is not in wav.scp", path=src, line=line,
                        fix="add it to wav.scp or remove the segment")
    path, _wline = wavs[rec]
    return path if path.endswith("|") else str(resolve_under(cwd, path))


def _utterance_entries(seg_f: Path, wav_scp: Path, wavs: dict[str, tuple[str, int]]
                       ) -> list[tuple[str, str, float, float | None, Path, int]]:
    """(utt, recording, start, duration or None, source file, line) per utterance: from
    ``segments`` when there is one, else one utterance per wav.scp recording."""
    if not seg_f.is_file():
        return [(rec, rec, 0.0, None, wav_scp, line) for rec, (_p, line) in wavs.items()]
    entries: list[tuple[str, str, float, float | None, Path, int]] = []
    for i, line in enumerate(read_lines(seg_f), start=1):
        f = line.split()
        if not f:
            continue
        try:
            utt, rec, start, end = f[0], f[1], float(f[2]), float(f[3])
        except (IndexError, ValueError):
            raise UserError("expected `<utt> <recording> <start> <end>`", path=seg_f, line=i,
                            fix="times in seconds") from None
        if end != -1 and end <= start:
            raise UserError(f"segment ends ({end}) before it starts ({start})", path=seg_f, line=i,
                            fix="end must be > start")
        entries.append((utt, rec, start, None if end == -1 else end - start, seg_f, i))
    return entries


def _log_pipes(wav_scp: Path, *, n_pipes: int, assumed_rate: list[str], ran: list[str], check: AudioCheck) -> None:
    """What was assumed or run for piped wav.scp entries, said once the table stands."""
    if assumed_rate:
        log.warning("%s: %d piped recording(s) name no rate (e.g. %s): assumed %d Hz, the rate --sample-rates "
                    "accepts", wav_scp, len(set(assumed_rate)), assumed_rate[0], check.sample_rates[0])
    if n_pipes:
        log.info("%s: %d row(s) read from piped commands, kept as given in the audio column (%s); commands "
                 "that read audio for a model refuse them: dump them to files first (format_wav_scp.sh)", wav_scp,
                 n_pipes, f"{len(set(ran))} command(s) run (--allow-pipes)" if ran else "none run")


def _fill_pipe(row, utt2dur, wline, wav_scp, cwd, allow_pipes, check, assumed_rate, ran) -> None:
    """Duration and rate of a piped recording without running it, if the data dir says them."""
    command = row["audio"]
    row.update(_pipe=True, audio_cwd=str(cwd.resolve()))
    if row["duration"] is None and row["id"] in utt2dur:
        try:
            row["duration"] = float(utt2dur[row["id"]][0])
        except ValueError:
            raise UserError(f"utt2dur: {utt2dur[row['id']][0]!r} is not a number", path=wav_scp.parent / "utt2dur",
                            line=utt2dur[row["id"]][1], fix="seconds as a decimal number") from None
    hz = pipe_sample_rate(command, wav_scp, wline)
    if row["duration"] is None or (hz is None and allow_pipes):
        if not allow_pipes:
            raise UserError(f"recording {row['recording']!r} is a piped command and its duration is not known "
                            "without running it", path=wav_scp, line=wline,
                            fix="add utt2dur (utils/data/get_utt2dur.sh) or segments, or pass --allow-pipes to "
                                "run the command once")
        hz, seconds = run_pipe(command, cwd, wav_scp, wline)
        ran.append(command)
        if row["duration"] is None:
            row["duration"] = seconds - float(row["offset"] or 0.0)
    if hz is None:
        if not check.sample_rates:
            raise UserError(f"recording {row['recording']!r}: the piped command names no sample rate", path=wav_scp,
                            line=wline, fix="pass --sample-rates RATE (the rate it writes) or --allow-pipes to run it")
        hz = check.sample_rates[0]
        assumed_rate.append(row["recording"])
    row["sample_rate"] = hz


def _report_unlisted(unlisted, spk2gender_f, root, check) -> str | None:
    """Speakers with no spk2gender line get U: counted in one warning line, returned (an error
    with --strict)."""
    if not unlisted:
        return None
    spk, (src, line) = next(iter(unlisted.items()))
    if check.strict:
        raise UserError(f"speaker {spk!r} is not in spk2gender" if spk2gender_f else "no spk2gender file",
                        path=src, line=line, fix="add `<speaker> m|f` lines to spk2gender, or leave --strict out "
                        "to index such speakers as U")
    if spk2gender_f is None:
        return f"{root}: no spk2gender file: all {len(unlisted)} speaker(s) get U"
    return f"{spk2gender_f}: {len(unlisted)} speaker(s) not listed (e.g. {spk}): their rows get U"
