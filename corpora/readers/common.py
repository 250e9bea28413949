"""What every corpus reader shares: speaker->gender files, and `finish_table`, which turns
parsed rows into a checked utterance table (text files are read by corpora.base.textfile).

A reader parses its metadata into plain row dicts (the table's columns plus ``gender_raw``,
``tgt_text_<lang>`` and extras). Each row also carries ``_src`` / ``_line``: the metadata file
and line it came from, so any problem found later (missing audio, a segment past the end of
its recording, a duplicate id) is reported where the user can fix it. ``_gender_src`` names
the file the gender label came from, for the unknown-label warning.
"""
from __future__ import annotations

import itertools
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from corpora.audio_info import AudioInfo, HeaderError, probe_headers
from corpora.base.errors import UserError
from corpora.base.textfile import MAX_LABEL_BYTES, read_lines
from corpora.table import GENDERS, new_table, normalise_gender, normalise_genders, validate_table

log = logging.getLogger(__name__)

DEFAULT_SAMPLE_RATES = (16000,)

# A release's name for its validation split -> the name the study's tasks read (their `splits:`
# default is train/valid/test). Readers write the tasks' name, so a corpus indexed as released needs
# no `splits:` mapping; `--split` still takes the release's file or folder name (dev.tsv, dev/).
TASK_SPLIT_NAMES = {"dev": "valid", "validation": "valid"}


def task_split(release_name: str) -> str:
    """The split column's value for a release's split name: ``dev`` -> ``valid``, others as named."""
    return TASK_SPLIT_NAMES.get(release_name, release_name)


@dataclass(frozen=True)
class AudioCheck:
    """What audio a table accepts, and how headers are read.

    sample_rates: accepted rates in Hz, or None for any (Common Voice mp3 is 48/32 kHz,
    WinoST 48 kHz: resample them, or accept their rate on purpose).
    max_channels: 1 = mono only.
    tolerance: seconds a segment may run past the end of its recording (rounded metadata).
    strict: True turns every row a reader would skip, trim or guess (a zero-byte clip, a
    segment past the end of its recording, a speaker missing from a gender list) into a
    UserError instead of a counted, summarised warning (``--strict``).
    gender_map: the user's gender labels -> F/M/U (``--gender-map``, corpora.table.parse_gender_map),
    as (label, code) pairs; finish_table looks them up before the built-in spellings.
    """
    sample_rates: tuple[int, ...] | None = DEFAULT_SAMPLE_RATES
    max_channels: int = 1
    workers: int | None = None
    progress: bool = True
    tolerance: float = 0.05
    strict: bool = False
    gender_map: tuple[tuple[str, str], ...] = ()


# --------------------------------------------------------------------------- text files

def require_file(path: Path, what: str, fix: str) -> Path:
    if not path.is_file():
        raise UserError(f"{what} not found", path=path, fix=fix)
    return path


def clean_text(s: str) -> str:
    """One line of text: tabs/newlines/odd spaces collapsed (the table is a TSV)."""
    return " ".join(str(s).split())


# --------------------------------------------------------------------------- speaker genders

_HEADER_WORDS = {"gender", "sex", "spk_gender", "speaker_gender", "genre", "ted-pronoun", "pronoun"}
# Column names a header may give the key and the label (MuST-Speakers: TALK-ID, TED-PRONOUN).
_KEY_COLUMNS = ("talk-id", "talk_id", "talkid", "talk", "speaker_id", "spk_id", "speaker", "spk", "id")
_LABEL_COLUMNS = ("ted-pronoun", "pronoun", "gender", "sex", "spk_gender", "speaker_gender", "genre")


def _fields(line: str) -> list[str]:
    if "\t" in line:
        fields = line.split("\t")
    elif "," in line:
        fields = line.split(",")
    else:
        fields = line.split()
    return [f.strip() for f in fields]


def read_speaker_genders(path: str | os.PathLike) -> dict[str, tuple[str, int]]:
    """A user-given speaker -> gender list: ``{key: (raw label, line)}``.

    One speaker per line, ``KEY<sep>GENDER`` with a tab, comma or spaces between; when a line
    has more fields the first is the key and the last the gender (e.g. ``talk, name, gender``).
    The key may be a speaker id, a talk/recording id, or a bare TED talk number (``767`` for
    ``ted_767`` / ``spk.767``). ``#`` starts a comment line. A header line is recognised by a
    label column name (``gender``, ``sex``, ``TED-PRONOUN``, ...): the label is then read from
    that column, the key from ``TALK-ID``/``speaker``/... (else the first column) -- this reads
    FBK's MuST-Speakers list as distributed (``TALK-ID``, ``TED-PRONOUN``: She, He, They,
    Multi-She, Multi-He, Mix, Na). Labels are normalised later (``corpora.table.normalise_gender``:
    Multi-She/Multi-He count as She/He, as FBK's own script does; They/Mix/Na are U).
    """
    path = Path(path)
    require_file(path, "speaker->gender file", "give a file with one `speaker<TAB>gender` per line")
    out: dict[str, tuple[str, int]] = {}
    key_col, label_col, header_seen = 0, -1, False
    for i, line in enumerate(read_lines(path, "speaker->gender file", max_bytes=MAX_LABEL_BYTES), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = _fields(line)
        if not header_seen and not out:
            header_seen = True
            names = [f.lower() for f in fields]
            if any(n in _HEADER_WORDS for n in names):
                label_col = next(names.index(c) for c in _LABEL_COLUMNS if c in names)
                key_col = next((names.index(c) for c in _KEY_COLUMNS if c in names), 0)
                continue
        if len(fields) < 2 or max(key_col, label_col) >= len(fields):
            raise UserError("expected `speaker<TAB>gender`" if len(fields) < 2 else
                            f"{len(fields)} fields, fewer than the header's", path=path, line=i,
                            fix="one speaker per line: its id, a tab (or comma), its gender")
        key, raw = fields[key_col], fields[label_col]
        if key in out and out[key][0].lower() != raw.lower():
            raise UserError(f"speaker {key!r} listed twice with different genders "
                            f"({out[key][0]!r} on line {out[key][1]}, {raw!r} here)", path=path, line=i,
                            fix="keep one line per speaker")
        out[key] = (raw, i)
    if not out:
        raise UserError("no speakers listed", path=path, fix="one `speaker<TAB>gender` per line")
    return out


_TED_NUMBER = re.compile(r"^(?:ted|spk)[._-]?(\d+)$", re.IGNORECASE)


def ted_number(name: str) -> str | None:
    """``ted_767`` / ``spk.767`` -> ``767``: the bare talk number MuST-Speakers is keyed by."""
    m = _TED_NUMBER.match(name or "")
    return m.group(1) if m else None


def lookup_gender(genders: dict[str, tuple[str, int]] | None, *keys: str) -> str | None:
    """The raw label for the first key found (speaker id, then talk id, ...), else None."""
    if not genders:
        return None
    for k in keys:
        if k and k in genders:
            return genders[k][0]
    return None


def resolve_speaker_genders(rows: list[dict], source, *, speaker_name: str = "client_id",
                            evidence: Iterable[tuple[str, str]] = ()) -> str | None:
    """One gender per speaker, for corpora that label each row rather than each speaker (Common
    Voice's client_id, VoxPopuli's speaker_id).

    A contributor fills in a profile once, so rows recorded before it carry an empty label. A
    speaker whose non-empty labels agree gets that label on all their rows; a speaker whose labels
    disagree (male on one row, female on another) gets U on all, since no side can be chosen. Rewrites
    ``gender_raw`` in place and records in ``gender_source`` where each row's label came from:
    ``row`` (its own), ``speaker`` (its speaker's other rows), ``conflict`` (labels disagree), or
    empty. ``evidence``: (speaker, raw label) of rows outside the table whose labels count too
    (CoVoST reads a speaker's every validated.tsv row, not only the rows it translates).
    Returns the one line that says what was resolved, or None.
    """
    labels: dict[str, dict[str, str]] = {}   # speaker -> {code: first raw label with that code}
    codes: dict[str, str] = {}                # raw label -> code, so a large evidence list costs one lookup each
    for speaker, raw in itertools.chain(((r["speaker"], r["gender_raw"]) for r in rows), evidence):
        raw = (raw or "").strip()
        if raw:
            if raw not in codes:
                codes[raw] = normalise_gender(raw)[0]
            code = codes[raw]
            labels.setdefault(speaker, {}).setdefault(code, raw)
    borrowed, conflicts = [], []
    for r in rows:
        found = labels.get(r["speaker"])
        r["gender_source"] = "row" if r["gender_raw"].strip() else ""
        if not found:
            continue
        if len(found) > 1:
            r["gender_raw"] = "/".join(sorted(found.values()))
            r["gender_source"] = "conflict"
            conflicts.append(r)
        elif not r["gender_raw"].strip():
            r["gender_raw"] = next(iter(found.values()))
            r["gender_source"] = "speaker"
            borrowed.append(r)
    if not (borrowed or conflicts):
        return None
    return (f"{source}: gender resolved per {speaker_name}: {len(borrowed)} row(s) with an empty gender took their "
            f"speaker's label from other rows (gender_source=speaker); {len(conflicts)} row(s) of "
            f"{len({r['speaker'] for r in conflicts})} speaker(s) with conflicting labels are U "
            "(gender_source=conflict)")


# --------------------------------------------------------------------------- the table

def _check_duplicates(rows: Sequence[dict]) -> None:
    first: dict[str, dict] = {}
    for r in rows:
        prev = first.get(r["id"])
        if prev is not None:
            where = f"{prev['_src']}" + (f":{prev['_line']}" if prev.get("_line") else "")
            raise UserError(f"duplicate id {r['id']!r} (first seen at {where})", path=r["_src"],
                            line=r.get("_line"),
                            fix="ids must be unique: do not index overlapping files (e.g. Common Voice "
                                "validated.tsv with train.tsv) or fix the metadata")
        first[r["id"]] = r


def _rate_text(rates: Iterable[int]) -> str:
    return ", ".join(f"{r} Hz" for r in rates)


class Tally:
    """Rows a reader skipped, trimmed or guessed, with where the first of each kind came from.

    Nothing is dropped or altered silently: ``summary()`` is one line for the log; with
    ``--strict`` the reader raises at the first such row instead (``note`` is then not reached).
    """

    def __init__(self) -> None:
        self.kinds: dict[str, list] = {}   # what -> [count, first "file:line" or id]

    def note(self, what: str, where: str, n: int = 1) -> None:
        entry = self.kinds.setdefault(what, [0, where])
        entry[0] += n

    def summary(self, source) -> str | None:
        if not self.kinds:
            return None
        parts = [f"{n} {what} (first: {where})" for what, (n, where) in self.kinds.items()]
        return f"{os.fspath(source)}: " + "; ".join(parts) + " -- --strict makes these errors"


def _where(r: dict) -> str:
    return f"{os.fspath(r['_src'])}" + (f":{r['_line']}" if r.get("_line") else "")


def finish_table(rows: list[dict], *, source: str | os.PathLike, check: AudioCheck,
                 skip_empty_audio: bool = False, trim_past_end: bool = False,
                 tally: Tally | None = None) -> pd.DataFrame:
    """Read audio headers, fill ``sample_rate``/``duration``, check everything, build the table.

    ``offset`` defaults to 0 and ``duration`` (None) to "to the end of the file". Raises the
    first problem, in metadata order, as a UserError naming the metadata file and line.

    Two known defects of released corpora are handled when the reader asks for it, counted in
    one summary line, and made errors by ``check.strict``:
    ``skip_empty_audio`` -- a zero-byte / zero-sample file drops its row (Common Voice ships some);
    ``trim_past_end`` -- a segment that starts inside its recording but ends past it is cut at
    the end of the file, as lhotse's ``trim_supervisions_to_recordings`` does (mTEDx, MuST-C).
    A row with ``_pipe`` set (a Kaldi ``cmd |`` entry) is not opened: its ``duration`` and
    ``sample_rate`` must already be filled in by the reader.
    """
    tally = tally if tally is not None else Tally()
    _check_ids_and_speakers(rows, source)
    infos = probe_headers([r["audio"] for r in rows if not r.get("_pipe")], workers=check.workers,
                          progress=check.progress)
    accepted = None if check.sample_rates is None else set(check.sample_rates)
    kept = []
    for r in rows:
        where = dict(path=r["_src"], line=r.get("_line"))
        if r.get("_pipe"):
            _check_rate(r, int(r["sample_rate"]), accepted, where, what=f"the command {r['audio']!r} gives")
            kept.append(_finish_row(r))
            continue
        info = infos[os.fspath(r["audio"])]
        if isinstance(info, HeaderError):
            if info.kind == "empty" and skip_empty_audio and not check.strict:
                tally.note("row(s) skipped: zero-byte or empty audio", _where(r))
                continue
            fix = info.fix() + (" (or leave --strict out to skip such rows)" if info.kind == "empty"
                                and skip_empty_audio else "")
            raise UserError(f"row {r['id']!r}: {info.message()}", fix=fix, **where)
        assert isinstance(info, AudioInfo)
        _check_rate(r, info.sample_rate, accepted, where, what=f"{info.path} is")
        _fit_segment(r, info, where, check=check, trim_past_end=trim_past_end, tally=tally)
        kept.append(_finish_row(r))
    if not kept:
        raise UserError("no utterances left: every row was skipped", path=source,
                        fix="; ".join(tally.kinds) or "check the corpus")
    _assign_genders(kept, check)
    clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in kept]
    df = new_table(clean)
    validate_table(df, source)
    line = tally.summary(source)
    if line:
        log.warning("%s", line)
    return df


def _check_ids_and_speakers(rows: list[dict], source) -> None:
    """Every row has an id (stripped here), ids are unique, and every row names a speaker."""
    if not rows:
        raise UserError("no utterances found", path=source,
                        fix="check --root, --split and --lang against the corpus layout (see --help)")
    for r in rows:
        r["id"] = str(r["id"]).strip()
        if not r["id"]:
            raise UserError("empty utterance id", path=r["_src"], line=r.get("_line"), fix="give every row an id")
    _check_duplicates(rows)
    for r in rows:
        if not clean_text(r.get("speaker", "")):
            raise UserError(f"row {r['id']!r} has no speaker id", path=r["_src"], line=r.get("_line"),
                            fix="give every row a speaker (per-gender CIs resample speakers); with no ids "
                                "at all, one speaker per recording is the usual stand-in")


def _fit_segment(r: dict, info: AudioInfo, where: dict, *, check: AudioCheck, trim_past_end: bool,
                 tally: Tally) -> None:
    """Check the row's channels and segment against its recording's header; fill ``offset``,
    ``duration`` (trimmed at the end of the file where allowed) and ``sample_rate``."""
    if info.channels > check.max_channels:
        raise UserError(
            f"row {r['id']!r}: {info.path} has {info.channels} channels, accepted: at most {check.max_channels}",
            fix=f"accept it with --max-channels {info.channels}: `manifest build --resample 16000` writes mono "
                "copies for the engines that need them (the corpus is never modified)", **where)
    offset = float(r.get("offset") or 0.0)
    duration = r.get("duration")
    if offset < 0:
        raise UserError(f"row {r['id']!r}: negative offset {offset}", fix="offsets are seconds >= 0", **where)
    if duration is None or duration == "":
        duration = info.duration - offset
    duration = float(duration)
    end = offset + duration
    if offset >= info.duration or (end > info.duration + check.tolerance
                                   and (not trim_past_end or check.strict)):
        raise UserError(
            f"row {r['id']!r}: segment {offset:.2f}-{end:.2f} s runs past the end of {info.path} "
            f"({info.duration:.2f} s)",
            fix="fix the offset/duration in the metadata, or remove the segment"
                + (" (without --strict it is trimmed to the end of the file)"
                   if trim_past_end and offset < info.duration else ""), **where)
    if end > info.duration + check.tolerance:
        tally.note("segment(s) trimmed at the end of their recording", _where(r))
    if duration <= 0:
        raise UserError(f"row {r['id']!r}: segment duration {duration:.3f} s", fix="drop empty segments", **where)
    r["offset"] = round(offset, 6)
    r["duration"] = round(min(duration, info.duration - offset), 6)
    r["sample_rate"] = info.sample_rate


def _assign_genders(rows: list[dict], check: AudioCheck) -> None:
    """Each row's ``gender`` (F/M/U) from its raw label."""
    raw = pd.Series([r["gender_raw"] for r in rows], dtype=object)
    gsrc = pd.Series([os.fspath(r.get("_gender_src") or r["_src"]) for r in rows], dtype=object)
    # One call for all rows: every unknown label is listed in one warning line, with its file.
    codes = normalise_genders(raw, gsrc, dict(check.gender_map))
    for r, code in zip(rows, codes):
        r["gender"] = code
        assert code in GENDERS


def _check_rate(r: dict, rate: int, accepted, where: dict, what: str) -> None:
    if accepted is not None and rate not in accepted:
        raise UserError(
            f"row {r['id']!r}: {what} {rate} Hz, accepted: {_rate_text(sorted(accepted))}",
            fix=f"accept it with --sample-rates {rate} (or `any`): the rate is recorded, models resample where "
                f"they read audio, and `manifest build --resample {min(accepted)}` writes copies for fairseq and "
                "Kaldi (the corpus is never modified)", **where)


def _finish_row(r: dict) -> dict:
    r.setdefault("gender_raw", "")
    r["gender_raw"] = "" if r["gender_raw"] is None else str(r["gender_raw"]).strip()
    for key, value in r.items():
        # The table is a TSV: no tab or line break may survive in any text field.
        if isinstance(value, str) and not key.startswith("_") and key != "audio":
            r[key] = clean_text(value)
    return r


def resolve_under(base: Path, name: str) -> Path:
    """``name`` if absolute, else relative to ``base``."""
    p = Path(name)
    return p if p.is_absolute() else Path(os.path.normpath(base / p))


def is_macos_litter(name: str) -> bool:
    """Archives zipped on a Mac carry ``__MACOSX/`` and ``._<name>`` AppleDouble files: resource
    forks of a few hundred bytes with the audio file's name, never audio."""
    return name == "__MACOSX" or name.startswith("._") or name == ".DS_Store"


def walk_files(directory: Path):
    """(dirpath, filename) under ``directory``, sorted, macOS archive litter left out."""
    for dirpath, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not is_macos_litter(d))
        for f in sorted(files):
            if not is_macos_litter(f):
                yield dirpath, f


def find_audio_by_stem(directory: Path,
                       exts: Sequence[str] = (".wav", ".flac", ".mp3", ".opus", ".ogg")) -> dict[str, Path]:
    """{file stem: path} for the audio files under ``directory`` (recursively, in sorted order,
    ``__MACOSX``/``._*`` left out), one scan."""
    out: dict[str, Path] = {}
    if not directory.is_dir():
        return out
    wanted = {e.lower() for e in exts}
    for dirpath, f in walk_files(directory):
        stem, ext = os.path.splitext(f)
        if ext.lower() in wanted:
            out.setdefault(stem, Path(dirpath) / f)
    return out


def refuse_gzipped_audio(directory: Path, exts: Sequence[str] = (".wav", ".flac")) -> None:
    """A UserError when ``directory`` holds gzipped audio (``x.wav.gz``, as WinoST downloads).

    They are refused rather than read: every engine downstream (fairseq, SpeechBrain, Kaldi
    export) opens the table's audio path with libsndfile, which cannot read gzip, so a table
    pointing at .gz files would fail later and further from the cause; unpacking them to a
    hidden cache would copy the corpus behind the user's back.
    """
    if not directory.is_dir():
        return
    wanted = tuple(e + ".gz" for e in exts)
    gz = [Path(d) / f for d, f in walk_files(directory) if f.lower().endswith(wanted)]
    if gz:
        raise UserError(f"{len(gz)} gzipped audio file(s) (e.g. {gz[0].name}): libsndfile cannot read gzip",
                        path=gz[0].parent, fix=f"unpack them first: find {directory} -name '*.gz' -exec gunzip {{}} +")


_INT = re.compile(r"(\d+)")


def first_int(s: str) -> int | None:
    m = _INT.search(s)
    return int(m.group(1)) if m else None
