"""Manifests written by lhotse (https://github.com/lhotse-speech/lhotse), read with lhotse itself.

``--root`` is one of:

* a CutSet file (``cuts.jsonl.gz``, ``.jsonl``, ``.json``, ``.yaml``);
* a RecordingSet file, with its SupervisionSet given as ``--supervisions``;
* a folder of lhotse recipe output, ``<corpus>_recordings_<split>.jsonl.gz`` beside
  ``<corpus>_supervisions_<split>.jsonl.gz`` (or ``<corpus>_cuts_<split>.jsonl.gz``), as
  ``lhotse prepare`` writes them;
* a folder of ``<split>/recordings.jsonl.gz`` + ``supervisions.jsonl.gz`` (+ ``cuts.jsonl.gz``),
  as ``gendergap manifest build --format lhotse`` writes them, or one such split folder.

Where the layout names splits, the release's name goes through ``task_split`` (dev -> valid) and
``--split`` picks among them; where it does not (one file), ``--split`` is the name recorded.

One row per supervision: its id, the recording's file, ``offset`` = supervision start (+ the
cut's start), ``duration`` = supervision duration, its speaker, text, language (else ``--lang``)
and scalar ``custom`` fields as extra columns (``corpus`` and ``tgt_text_<lang>`` fill those
columns; a field named like another table column becomes ``orig_<name>``). Gender is looked for
in ``supervision.gender``, then ``custom["gender"]``, then the cut's ``custom["gender"]``, then
``--speaker-genders`` (lhotse has no speaker records of its own); a supervision with none is U,
and how many were is said in one warning line.

Only what the table can point at is accepted: a recording must be one audio file. Several sources
(one file per channel), a URL, a command, in-memory audio or a Shar placeholder, a mixed cut, and
a recording with transforms other than resampling (speed perturbation: the file is not the audio
the manifest describes) are each a UserError naming the recording or cut. Relative source paths
are relative to the folder lhotse ran in, as lhotse itself reads them: the working directory, or
``--audio-dir``. Audio headers are then checked as for every corpus (``finish_table``).
"""
from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pandas as pd

from corpora.base.boundary import regular_file
from corpora.base.errors import UserError, printable
from corpora.readers.common import AudioCheck, finish_table, lookup_gender, read_speaker_genders, task_split
from corpora.table import COLUMNS

log = logging.getLogger(__name__)

_EXT = r"\.(?:jsonl|json|yaml)(?:\.gz)?"
# lhotse recipes: <corpus>_<role>_<split>.jsonl.gz (the corpus part may hold '_': the first role word splits)
RECIPE_NAME = re.compile(rf"^(?P<corpus>.+?)_(?P<role>recordings|supervisions|cuts)_(?P<split>.+?){_EXT}$")
PLAIN_NAME = re.compile(rf"^(?P<role>recordings|supervisions|cuts){_EXT}$")
ROLES = ("recordings", "supervisions", "cuts")
LOAD_FIX = "give a manifest lhotse wrote (lhotse prepare, CutSet.to_file): it may be cut short or edited"
SOURCE_FIX = {
    "url": "download the audio and point the sources at the files",
    "command": "run each command once into a file (lhotse: cuts.save_audios(DIR)) and index that manifest",
    "memory": "write the audio to files first (lhotse: cuts.save_audios(DIR)) and index that manifest",
    "shar": "export the Shar shards back to files (lhotse: CutSet.from_shar(...).save_audios(DIR))",
}


def read_lhotse(root, *, supervisions=None, splits: list[str] | None = None, lang: str | None = None,
                audio_dir=None, speaker_genders=None, check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of lhotse manifests (see the module docstring for the layouts)."""
    root = Path(root).absolute()   # absolute: lhotse opens "pipe:..." and URL names specially, a path never
    genders = read_speaker_genders(speaker_genders) if speaker_genders else None
    ctx = dict(lang=lang or "", base=Path(audio_dir).absolute() if audio_dir else Path.cwd(), genders=genders,
               genders_src=Path(speaker_genders) if speaker_genders else None, notes=[])
    rows: list[dict] = []
    for corpus, split, manifests in _groups(root, supervisions, splits):
        rows += _group_rows(manifests, corpus=corpus, split=split, ctx=ctx)
    rows = _dedupe(rows, ctx["notes"])
    unlabelled = sum(1 for r in rows if r["_no_gender"])
    df = finish_table(rows, source=root, check=check)
    for note in ctx["notes"]:   # said once the table stands, so a refused index prints its one error line only
        log.warning("%s", note)
    if unlabelled:
        log.warning("%s: %d of %d supervision(s) carry no gender (supervision.gender, custom['gender'], the cut's "
                    "custom['gender']%s): they are U", root, unlabelled, len(rows),
                    ", --speaker-genders" if genders else "; --speaker-genders FILE can give them per speaker")
    return df


# --------------------------------------------------------------------------- which files

def _groups(root: Path, supervisions, splits: list[str] | None) -> list[tuple[str, str, dict]]:
    """[(corpus, split, {role: path})] to read, in a stable order."""
    if supervisions is not None or not root.is_dir():
        if not os.path.lexists(root):
            raise UserError("no such lhotse manifest or folder", path=root,
                            fix="--root is a CutSet/RecordingSet file or a folder of lhotse manifests")
        return [("", _one_split(splits, root), {"single": root, "supervisions": supervisions})]
    found = _folder_groups(root)
    if not found:
        raise UserError("no lhotse manifests in this folder", path=root,
                        fix="expected <corpus>_recordings_<split>.jsonl.gz + <corpus>_supervisions_<split>.jsonl.gz "
                            "(lhotse prepare), <split>/recordings.jsonl.gz + supervisions.jsonl.gz, or a cuts file")
    named = {s for _c, s, _m in found if s}
    if not named:   # recordings.jsonl.gz right in --root: no split in the layout
        return [(c, _one_split(splits, root), m) for c, _s, m in found]
    if splits:
        missing = [s for s in splits if s not in named]
        if missing:
            raise UserError(f"split(s) {', '.join(missing)} not found (the folder has: {', '.join(sorted(named))})",
                            path=root, fix="--split takes the release's names, as in the file names")
        found = [g for g in found if g[1] in splits]
    return [(c, task_split(s), m) for c, s, m in found]


def _one_split(splits: list[str] | None, where: Path) -> str:
    if splits and len(splits) > 1:
        raise UserError("this layout holds one split: --split names it", path=where,
                        fix="give one name, e.g. --split train")
    return task_split(splits[0]) if splits else ""


def _folder_groups(root: Path) -> list[tuple[str, str, dict]]:
    """The manifests of a folder: recipe files in it, or split subfolders of plain names, or plain names in it."""
    groups: dict[tuple[str, str], dict] = {}
    for entry in sorted(os.listdir(root)):
        m = RECIPE_NAME.match(entry)
        if m:
            groups.setdefault((m["corpus"], m["split"]), {})[m["role"]] = root / entry
            continue
        sub = root / entry
        if sub.is_dir():
            for name in sorted(os.listdir(sub)):
                p = PLAIN_NAME.match(name)
                if p:
                    groups.setdefault(("", entry), {})[p["role"]] = sub / name
        elif PLAIN_NAME.match(entry):
            groups.setdefault(("", ""), {})[PLAIN_NAME.match(entry)["role"]] = sub
    return [(corpus, split, files) for (corpus, split), files in groups.items()]


# --------------------------------------------------------------------------- loading with lhotse

def _load(path: Path, kind: str):
    """One manifest through lhotse: ``kind`` is recordings, supervisions, cuts, or any (lhotse guesses)."""
    from lhotse import CutSet, RecordingSet, SupervisionSet, load_manifest  # torch: only when a manifest is read

    regular_file(path, "lhotse manifest")
    loader = {"recordings": RecordingSet.from_file, "supervisions": SupervisionSet.from_file,
              "cuts": CutSet.from_file, "any": load_manifest}[kind]
    try:
        return loader(path)
    except Exception as e:   # the library's own errors on a damaged or foreign file: KeyError, JSON, assertion...
        if kind == "any":    # load_manifest only says "unknown type": read it as cuts for the reason
            return _load(path, "cuts")
        detail = printable(f"{type(e).__name__}: {e}")[:200]
        raise UserError(f"cannot read this file as lhotse {kind} ({detail})", path=path, fix=LOAD_FIX) from e


def _group_rows(manifests: dict, *, corpus: str, split: str, ctx: dict) -> list[dict]:
    """The rows of one (corpus, split): recordings + supervisions when both are there, else cuts."""
    from lhotse import CutSet, RecordingSet, SupervisionSet

    if "single" in manifests:
        single, sups = manifests["single"], manifests["supervisions"]
        if sups is not None:
            return _pair_rows(_load(single, "recordings"), _load(Path(sups).absolute(), "supervisions"),
                              Path(sups).absolute(), corpus, split, ctx)
        loaded = _load(single, "any")
        if isinstance(loaded, RecordingSet):
            raise UserError("this is a RecordingSet: its supervisions are in another file", path=single,
                            fix="give that SupervisionSet as --supervisions FILE")
        if isinstance(loaded, SupervisionSet):
            raise UserError("this is a SupervisionSet: the recordings are in another file", path=single,
                            fix="give the RecordingSet as --root and this file as --supervisions")
        if not isinstance(loaded, CutSet):
            raise UserError(f"this is a lhotse {type(loaded).__name__}, not cuts or recordings", path=single,
                            fix="give a CutSet, or a RecordingSet with --supervisions")
        return _cut_rows(loaded, single, corpus, split, ctx)
    if "recordings" in manifests and "supervisions" in manifests:
        return _pair_rows(_load(manifests["recordings"], "recordings"),
                          _load(manifests["supervisions"], "supervisions"),
                          manifests["supervisions"], corpus, split, ctx)
    if "cuts" in manifests:
        return _cut_rows(_load(manifests["cuts"], "cuts"), manifests["cuts"], corpus, split, ctx)
    lone = next(iter(manifests.values()))
    ctx["notes"].append(f"{lone}: skipped, no {'supervisions' if 'recordings' in manifests else 'recordings'} beside "
                        "it (a noise or music set has recordings only)")
    return []


def _pair_rows(recordings, supervisions, src: Path, corpus: str, split: str, ctx: dict) -> list[dict]:
    recs = {r.id: r for r in recordings}
    rows = []
    for line, sup in enumerate(supervisions, start=1):
        rec = recs.get(sup.recording_id)
        if rec is None:
            raise UserError(f"supervision {sup.id!r} names recording {sup.recording_id!r}, not in the recordings",
                            path=src, line=_line(src, line), fix="give the RecordingSet these supervisions belong to")
        rows.append(_row(sup, rec, 0.0, None, src=src, line=_line(src, line), corpus=corpus, split=split, ctx=ctx))
    return rows


def _cut_rows(cuts, src: Path, corpus: str, split: str, ctx: dict) -> list[dict]:
    rows = []
    for line, cut in enumerate(cuts, start=1):
        if not cut.supervisions:
            continue   # padding, or a cut of silence: nothing to index
        if not getattr(cut, "has_recording", False) or not hasattr(cut, "recording"):
            raise UserError(f"cut {cut.id!r} is a {type(cut).__name__} with no single recording (a mix, or features "
                            "only)", path=src, line=_line(src, line),
                            fix="index the cuts before mixing, or the recordings + supervisions they came from")
        for sup in cut.supervisions:
            rows.append(_row(sup, cut.recording, float(cut.start), cut.custom, src=src, line=_line(src, line),
                             corpus=corpus, split=split, ctx=ctx))
    return rows


def _line(src: Path, item: int) -> int | None:
    """A JSONL manifest holds one item per line: the item's line; other formats have no such line."""
    return item if ".jsonl" in src.name else None


# --------------------------------------------------------------------------- one row

def _row(sup, rec, shift: float, cut_custom, *, src: Path, line, corpus: str, split: str, ctx: dict) -> dict:
    custom = dict(sup.custom or {})
    raw, gsrc = _gender(sup, custom, cut_custom, ctx)
    row = dict(id=sup.id, audio=_audio_path(rec, src, line, ctx["base"]), offset=shift + float(sup.start),
               duration=float(sup.duration), speaker=sup.speaker or "", gender_raw=raw or "",
               corpus=str(custom.pop("corpus", "") or corpus or "lhotse"), lang=sup.language or ctx["lang"],
               split=split, text=sup.text or "", _src=src, _line=line, _gender_src=gsrc, _no_gender=raw is None)
    custom.pop("gender", None)
    for key, value in custom.items():
        if isinstance(value, (str, int, float, bool)) and "\t" not in str(key) and "\n" not in str(key):
            name = f"orig_{key}" if key in COLUMNS or key == "gender_raw" else str(key)
            row[name] = str(value)   # text, as every table cell: a field some rows lack stays text, not a float
    return row


def _gender(sup, custom: dict, cut_custom, ctx: dict) -> tuple[str | None, Path | None]:
    """(raw label, the file it came from when not the manifest) from the first place that has one."""
    for value in (sup.gender, custom.get("gender"), (cut_custom or {}).get("gender")):
        if value is not None and str(value).strip():
            return str(value), None
    listed = lookup_gender(ctx["genders"], sup.speaker or "")
    return (listed, ctx["genders_src"]) if listed is not None else (None, None)


def _audio_path(rec, src: Path, line, base: Path) -> str:
    """The one file a recording reads, or a UserError saying why the table cannot point at it."""
    where = dict(path=src, line=line)
    if len(rec.sources) != 1:
        raise UserError(f"recording {rec.id!r} reads {len(rec.sources)} audio sources (one per channel)",
                        fix="the table points at one file per row: merge the channels into one file (sox -M), or "
                            "index one channel's recordings", **where)
    source = rec.sources[0]
    if source.type != "file":
        raise UserError(f"recording {rec.id!r} is a {source.type!r} source, not a file",
                        fix=SOURCE_FIX.get(source.type, "point the recording at an audio file"), **where)
    other = [t for t in (rec.transforms or []) if _transform_name(t) != "Resample"]
    if other:   # resampling leaves the seconds as they are; the table records the file's own rate
        raise UserError(f"recording {rec.id!r} has the transform {_transform_name(other[0])}: its audio is not the "
                        "file's", fix="index the manifests from before augmentation (lhotse prepare's output)", **where)
    path = Path(source.source)
    if not path.is_absolute():
        path = base / path
        if not path.exists():
            raise UserError(f"recording {rec.id!r}: relative audio path {source.source!r} not found under {base}",
                            fix="give --audio-dir the folder lhotse ran in (relative sources start there)", **where)
    return os.path.normpath(path)


def _transform_name(t) -> str:
    return str(t.get("name", "?")) if isinstance(t, dict) else type(t).__name__


def _dedupe(rows: list[dict], notes: list[str]) -> list[dict]:
    """One row per supervision when overlapping cuts carry the same one whole (same id, file, offset and
    duration); a different segment under a seen id stays, for finish_table to refuse as a duplicate."""
    seen: dict[str, tuple] = {}
    out, dropped = [], 0
    for r in rows:
        key = (r["audio"], round(r["offset"], 6), round(r["duration"], 6))
        if seen.get(r["id"]) == key:
            dropped += 1
            continue
        seen.setdefault(r["id"], key)
        out.append(r)
    if dropped:
        notes.append(f"{dropped} supervision(s) held whole by several overlapping cuts: one row each")
    return out
