"""A Hugging Face ``datasets`` folder on disk, read with ``datasets`` itself.

``--root`` is a folder written by ``DatasetDict.save_to_disk`` (``dataset_dict.json`` and one
folder per split) or ``Dataset.save_to_disk`` (``state.json``, one split), or a folder of parquet
files as the Hub lays them out (``<split>-00000-of-00001.parquet``, or the same under ``data/``).
Folders are read as data only: ``load_from_disk`` reads Arrow and JSON, parquet is streamed by the
packaged ``parquet`` builder (nothing cached in the user's home), and no dataset script or remote
code is ever run (``datasets`` 4+ has none to run; nothing here asks for one).

Columns (``--audio-column`` etc.; the defaults are the Hub's common names):
    audio    ``audio``: an ``Audio`` feature or a plain path; embedded bytes (the Hub's parquet,
             ``save_to_disk`` of a cast dataset) are written once to ``--audio-dir`` as
             ``<id>.<ext>`` (atomically; a file already there with the same bytes is kept, a
             different one is an error), never into the dataset folder unasked. Paths are
             relative to the dataset folder.
    gender   ``gender``; a ``ClassLabel`` gives its label name (FLEURS: 0 male, 1 female, 2 other).
    speaker  ``speaker_id``, ``client_id`` (Common Voice) or ``speaker``, the first present.
    text     ``text``, ``sentence`` (Common Voice), ``raw_transcription`` (FLEURS), ``transcription``,
             ``raw_text``, ``normalized_text``, the first present (else empty).
    id       ``id`` when its values are unique, else the stem of a ``path`` column's file names when
             those are (FLEURS repeats its ``id`` per sentence; its ``path`` names each clip), else
             ``<split>-<row>``.
Other scalar columns are kept as extra columns (``orig_<name>`` when the name is a table
column's); ``locale`` fills ``lang`` when ``--lang`` is not given. Split names go through
``task_split`` (``validation`` -> ``valid``); a one-split folder records ``--split`` or its own
split name.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
from pathlib import Path

import pandas as pd

from corpora.base.atomic import atomic_open
from corpora.base.boundary import is_special
from corpora.base.errors import UserError, printable
from corpora.readers.common import AudioCheck, finish_table, task_split
from corpora.table import COLUMNS

log = logging.getLogger(__name__)

SPEAKER_COLUMNS = ("speaker_id", "client_id", "speaker")
TEXT_COLUMNS = ("text", "sentence", "raw_transcription", "transcription", "raw_text", "normalized_text")
LANG_COLUMNS = ("locale",)
PARQUET_SPLIT = re.compile(r"^(?P<split>.+?)(?:-\d+-of-\d+)?(?:-[0-9a-f]{4,})?\.parquet$")
AUDIO_EXTS = (".wav", ".flac", ".mp3", ".ogg", ".opus")
LAYOUT_FIX = ("--root is a folder written by save_to_disk (dataset_dict.json or state.json) or a folder of "
              "<split>-*.parquet files (or data/<split>-*.parquet)")


def read_hf(root, *, splits: list[str] | None = None, lang: str | None = None, audio_dir=None,
            audio_column: str = "audio", gender_column: str | None = None, speaker_column: str | None = None,
            text_column: str | None = None, id_column: str | None = None,
            check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of a Hugging Face dataset folder (see the module docstring)."""
    root = Path(root).absolute()
    if not root.is_dir():
        raise UserError("not a folder" if os.path.lexists(root) else "no such folder", path=root, fix=LAYOUT_FIX)
    _refuse_special_files(root)
    names = dict(audio=audio_column, gender=gender_column, speaker=speaker_column, text=text_column, id=id_column)
    with _quiet_datasets(), _library_errors(root), tempfile.TemporaryDirectory(prefix="gendergap-hf-") as cache:
        parts = _select(_load(root, cache), splits, root)
        cols = _columns(parts, names, root)
        ids, id_from, id_note = _ids(parts, cols, root)
        _unique(ids, id_from, root)   # before any audio is written under an id
        used = {cols[k] for k in ("audio", "gender", "speaker", "text", "lang")}
        # the id column is not kept twice; a path column the ids are the stems of is (it names the file)
        cols["extra"] = [c for c in cols["have"] if c not in used and (c != id_from or id_from == "path")]
        writer = _AudioWriter(Path(audio_dir).absolute() if audio_dir else None, root)
        rows = [row for split, ds, src in parts for row in _rows(ds, split, src, cols, ids[split], writer, lang or "")]
    df = finish_table(rows, source=root, check=check)
    # said once the table stands, so a refused index prints its one error line only
    if id_note:
        log.info("%s", id_note)
    if writer.written or writer.kept:
        log.info("%s: embedded audio: %d file(s) written, %d already there", writer.folder, writer.written, writer.kept)
    if cols["gender"] is None:
        log.warning("%s: no %r column: every row is U -- name the gender column with --gender-column", root, "gender")
    return df


@contextlib.contextmanager
def _quiet_datasets():
    """datasets draws progress bars and logs its own errors on stderr while it loads; a refused index prints
    one line only."""
    import datasets  # pyarrow, pandas: only when such a folder is read

    was_on = not datasets.are_progress_bars_disabled()
    library = logging.getLogger("datasets")   # its own error lines repeat what the UserError says
    level = library.level
    datasets.disable_progress_bars()
    library.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        library.setLevel(level)
        if was_on:
            datasets.enable_progress_bars()


@contextlib.contextmanager
def _library_errors(root: Path):
    """datasets' and pyarrow's errors on a damaged or foreign folder (while loading, or while streaming
    its rows) as one UserError line."""
    try:
        yield
    except UserError:
        raise
    except Exception as e:   # chained: --debug shows where
        detail = printable(f"{type(e).__name__}: {e}")[:200]
        raise UserError(f"cannot read this folder as a Hugging Face dataset ({detail})", path=root,
                        fix="give the folder save_to_disk or the Hub wrote, as written") from e


def _refuse_special_files(root: Path) -> None:
    """The files datasets opens lie in --root, its split folders or data/: a FIFO there would block it."""
    for folder in [root] + [p for p in sorted(root.iterdir()) if p.is_dir()]:
        for p in sorted(folder.iterdir()):
            if p.is_file() or p.is_dir():
                continue
            if is_special(p):
                raise UserError("the dataset folder holds a FIFO, device or socket", path=p,
                                fix="give a regular file there")


# --------------------------------------------------------------------------- loading

def _load(root: Path, cache: str) -> list[tuple[str | None, object, Path]]:
    """[(release split name or None, dataset, folder it came from)] through datasets' own loaders."""
    import datasets

    if (root / "dataset_dict.json").is_file():
        dd = datasets.load_from_disk(str(root))
        return [(name, dd[name], root / name) for name in dd]
    if (root / "state.json").is_file():
        return [(None, datasets.load_from_disk(str(root)), root)]
    files = _parquet_files(root)
    if files:
        # streamed: read where it lies, no Arrow copy in a cache (cache_dir: a temporary folder for its lock file)
        dd = datasets.load_dataset("parquet", data_files={s: [str(f) for f in fs] for s, fs in files.items()},
                                   streaming=True, cache_dir=cache)
        return [(name, dd[name], files[name][0].parent) for name in files]
    raise UserError("not a Hugging Face dataset folder", path=root, fix=LAYOUT_FIX)


def _parquet_files(root: Path) -> dict[str, list[Path]]:
    """{release split: its parquet shards}, from --root or its data/ folder (the Hub's layout)."""
    for folder in (root, root / "data"):
        found: dict[str, list[Path]] = {}
        if folder.is_dir():
            for p in sorted(folder.glob("*.parquet")):
                m = PARQUET_SPLIT.match(p.name)
                found.setdefault(m["split"] if m else p.stem, []).append(p)
        if found:
            return found
    return {}


def _select(parts, splits: list[str] | None, root: Path) -> list[tuple[str, object, Path]]:
    """The splits asked for, with the table's split names. A lone Dataset (state.json) is one split:
    --split names it, else the split it recorded, else none."""
    if parts[0][0] is None:
        name, ds, src = parts[0]
        if splits and len(splits) > 1:
            raise UserError("this folder holds one split: --split names it", path=root,
                            fix="give one name, e.g. --split train")
        recorded = str(ds.split) if getattr(ds, "split", None) else ""
        return [(task_split(splits[0] if splits else recorded), ds, src)]
    have = [p[0] for p in parts]
    if splits:
        missing = [s for s in splits if s not in have]
        if missing:
            raise UserError(f"split(s) {', '.join(missing)} not found (the dataset has: {', '.join(have)})", path=root,
                            fix="--split takes the dataset's own split names, e.g. train,validation,test")
        parts = [p for p in parts if p[0] in splits]
    return [(task_split(name), ds, src) for name, ds, src in parts]


# --------------------------------------------------------------------------- columns

def _features(ds) -> dict:
    return dict(ds.features or {})


def _columns(parts, names: dict, root: Path) -> dict:
    """Which column is which, checked against the columns every split has."""
    have = list(_features(parts[0][1]) or parts[0][1].column_names or [])
    for _s, ds, _src in parts[1:]:
        have = [c for c in have if c in _features(ds)]

    def pick(key: str, defaults: tuple[str, ...], required: bool) -> str | None:
        given = names[key]
        if given is not None:
            if given not in have:
                raise UserError(f"no column {given!r} (the dataset has: {', '.join(have)})", path=root,
                                fix=f"name the {key} column with --{key}-column")
            return given
        found = next((c for c in defaults if c in have), None)
        if found is None and required:
            raise UserError(f"no {key} column ({' / '.join(defaults)}) among {', '.join(have)}", path=root,
                            fix=f"name it with --{key}-column"
                            + ("; with no speaker ids (FLEURS), a column unique per "
                               "row (--speaker-column path) makes each utterance its "
                               "own speaker" if key == "speaker" else ""))
        return found

    cols = dict(audio=pick("audio", (names["audio"],), True), gender=pick("gender", ("gender",), False),
                speaker=pick("speaker", SPEAKER_COLUMNS, True), text=pick("text", TEXT_COLUMNS, False),
                id=pick("id", (), False), lang=next((c for c in LANG_COLUMNS if c in have), None), have=have)
    return cols


def _values(ds, column: str) -> list:
    """One column's values, without reading the others (audio bytes stay on disk)."""
    import datasets

    picked = ds.select_columns([column])
    return list(picked[column]) if isinstance(ds, datasets.Dataset) else [r[column] for r in picked]


def _ids(parts, cols: dict, root: Path) -> tuple[dict[str, list | None], str | None, str | None]:
    """({split: each row's id, or None for <split>-<row>}, the column they came from, a line saying which
    when it was not an id column): --id-column, else the first scheme whose ids are unique over every split."""
    feature = _features(parts[0][1]).get(cols["audio"])
    audio_paths = (cols["audio"],) if getattr(feature, "dtype", None) == "string" else ()   # paths, not bytes
    schemes = [(cols["id"], False)] if cols["id"] else [(c, c != "id") for c in ("id", "path") + audio_paths
                                                         if c in cols["have"]]
    for column, stem in schemes:
        ids = {s: [Path(str(v)).stem if stem else _plain(v, _features(ds).get(column)) for v in _values(ds, column)]
               for s, ds, _src in parts}
        every = [i for v in ids.values() for i in v]
        if cols["id"] or (len(set(every)) == len(every) and all(every)):
            why = "'id' repeats" if "id" in cols["have"] else "no 'id' column"
            note = None if column == "id" or cols["id"] else f"{root}: ids are the file names in {column!r} ({why})"
            return ids, column, note
    return {s: None for s, _ds, _src in parts}, None, f"{root}: no column of unique ids: rows are named <split>-<row>"


def _unique(ids: dict[str, list | None], column: str | None, root: Path) -> None:
    seen: set = set()
    for values in ids.values():
        for uid in values or ():
            if uid in seen or not uid:
                raise UserError(f"{'empty' if not uid else 'duplicate'} id {uid!r} in column {column!r}", path=root,
                                fix="name a column of unique ids with --id-column (FLEURS: path)")
            seen.add(uid)


def _plain(value, feature) -> str:
    """A cell as text; a ClassLabel's integer as its label name (-1, no label, as empty)."""
    if value is None:
        return ""
    names = getattr(feature, "names", None)
    if names is not None and isinstance(value, int):
        return names[value] if 0 <= value < len(names) else ""
    return str(value)


# --------------------------------------------------------------------------- rows

def _rows(ds, split: str, src: Path, cols: dict, ids: list | None, writer, lang: str):
    from datasets import Audio

    feats = _features(ds)
    if isinstance(feats.get(cols["audio"]), Audio):
        ds = ds.cast_column(cols["audio"], Audio(decode=False))   # the file's bytes or path, never decoded
    for n, rec in enumerate(ds):
        uid = ids[n] if ids is not None else f"{split or 'row'}-{n:06d}"
        row = dict(id=uid, audio=writer.audio(rec[cols["audio"]], uid, src), offset=0.0, duration=None,
                   speaker=_plain(rec[cols["speaker"]], feats.get(cols["speaker"])),
                   gender_raw=_plain(rec[cols["gender"]], feats.get(cols["gender"])) if cols["gender"] else "",
                   corpus="hf", lang=lang or (str(rec[cols["lang"]] or "") if cols["lang"] else ""), split=split,
                   text=_plain(rec[cols["text"]], None) if cols["text"] else "", _src=src, _line=None)
        for c in cols["extra"]:
            value = rec[c]
            if isinstance(value, (str, int, float, bool)) or value is None:
                row[f"orig_{c}" if c in COLUMNS or c == "gender_raw" else c] = _plain(value, feats.get(c))
        yield row


class _AudioWriter:
    """Embedded audio -> one file per row under ``folder``, written once; paths resolved under the dataset."""

    def __init__(self, folder: Path | None, root: Path):
        self.folder, self.root, self.written, self.kept = folder, root, 0, 0

    def audio(self, value, uid: str, src: Path) -> str:
        data, path = (value.get("bytes"), value.get("path")) if isinstance(value, dict) else (None, value)
        if data:
            return self._write(bytes(data), uid, path, src)
        if path:
            p = Path(str(path))
            return os.path.normpath(p if p.is_absolute() else self.root / p)
        raise UserError(f"row {uid!r} has no audio (neither bytes nor a path)", path=src,
                        fix="drop the row, or give --audio-column the column holding the audio")

    def _write(self, data: bytes, uid: str, name, src: Path) -> str:
        if self.folder is None:
            raise UserError(f"the audio is embedded in the dataset (row {uid!r} holds {len(data):,} bytes)", path=src,
                            fix="give --audio-dir DIR: each clip is written there once, as <id>.<ext>")
        target = self.folder / (_file_stem(uid) + _extension(name, data))
        if target.is_file():
            if target.stat().st_size == len(data) and target.read_bytes() == data:
                self.kept += 1
                return str(target)
            raise UserError(f"{target} already holds other audio than row {uid!r}", path=src,
                            fix="give another --audio-dir (or remove the old file): audio of another dataset is never "
                                "overwritten")
        try:
            with atomic_open(target, "wb") as f:
                f.write(data)
        except OSError as e:
            raise UserError(f"cannot write {target} ({e.strerror})", path=src,
                            fix="give --audio-dir a folder you can write to, with room for the audio") from None
        self.written += 1
        return str(target)


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def _file_stem(uid: str) -> str:
    """The id as a file name: as it is when it is a plain name, else its plain characters plus a digest,
    so that two ids never share a file."""
    if _SAFE.match(uid):
        return uid
    plain = re.sub(r"[^A-Za-z0-9._-]+", "_", uid).strip("._")[:80]
    return f"{plain or 'utt'}-{hashlib.sha256(uid.encode('utf-8')).hexdigest()[:12]}"


def _extension(name, data: bytes) -> str:
    """The embedded file's extension, from its recorded name or else from its first bytes."""
    suffix = Path(str(name or "")).suffix.lower()
    if suffix in AUDIO_EXTS:
        return suffix
    magic = {b"RIFF": ".wav", b"fLaC": ".flac", b"OggS": ".ogg", b"ID3": ".mp3"}
    found = next((ext for head, ext in magic.items() if data.startswith(head)), None)
    return found or (".mp3" if data[:1] == b"\xff" and data[1:2] and data[1] & 0xE0 == 0xE0 else ".wav")
