"""Mozilla Common Voice, one locale directory as distributed::

    cv-corpus-17.0-2024-03-15/fr/
      train.tsv dev.tsv test.tsv validated.tsv other.tsv invalidated.tsv
      clips/common_voice_fr_17299384.mp3

TSV columns (tab-separated, header first): client_id, path, sentence, up_votes, down_votes,
age, gender, accents (``accent`` before v8), variant, locale, segment (+ sentence_id,
sentence_domain in recent releases). The speaker is ``client_id``.

Quirks handled: gender in the old spelling (``male``/``female``/``other``) and the new one
(``male_masculine``/``female_feminine``/``intersex``/``transgender``/``non-binary``/
``do_not_wish_to_say``; the column is ``sex`` in some releases); sentences hold raw quotes
(read with no quoting); the oldest releases give ``path`` without ``.mp3``; ``validated.tsv``
overlaps train/dev/test (indexing both is a duplicate-id error).

Gender is resolved per speaker (``client_id``), not per row: contributors fill in their
profile once, and rows recorded before that carry an empty gender. A speaker whose non-empty
labels agree gets that label on all their rows (``gender_source`` says ``speaker`` on the rows
that borrowed it, ``row`` where the row had it); a speaker
whose labels disagree (e.g. ``male`` and ``female``) gets U on all rows; both are counted in
one warning line. Only a speaker with no label anywhere is U for lack of data.

Clips are mp3 at 48 kHz (32 kHz in some old clips): every rate is accepted by default and
recorded in ``sample_rate`` (models resample where they read audio). ``clips/x.wav`` (a clip
converted with the same stem) is used when ``clips/x.mp3`` is absent. A zero-byte clip (some
releases ship a few) skips its row, counted in the summary line; ``--strict`` makes it an error.
"""
from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import soundfile as sf

from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from corpora.readers.common import AudioCheck, find_audio_by_stem, finish_table, resolve_speaker_genders, task_split

log = logging.getLogger(__name__)

DEFAULT_SPLITS = ("train", "dev", "test")
EXTRA_COLUMNS = ("age", "accents", "accent", "variant", "up_votes", "down_votes", "segment", "sentence_domain")


def read_commonvoice(root, *, splits: list[str] | None = None, lang: str | None = None,
                     check: AudioCheck = AudioCheck(sample_rates=None)) -> pd.DataFrame:
    """Utterance table of one Common Voice locale directory (train/dev/test by default; any
    of validated/other/invalidated on request)."""
    root = Path(root)
    clips = root / "clips"
    if not clips.is_dir():
        raise UserError("no clips/ directory", path=root,
                        fix="--root must be one locale directory of a Common Voice release (e.g. cv-corpus-17.0/fr)")
    finder = ClipFinder(clips)
    splits = list(splits) if splits else [s for s in DEFAULT_SPLITS if (root / f"{s}.tsv").is_file()]
    rows: list[dict] = []
    for split in splits:
        tsv = root / f"{split}.tsv"
        if not tsv.is_file():
            raise UserError(f"split {split!r} not found", path=tsv, fix="--split names a TSV file of the release: "
                            "train, dev, test, validated, other, invalidated")
        header, recs = read_delimited(tsv, "\t")
        gcol = "gender" if "gender" in header else "sex" if "sex" in header else None
        missing = [c for c in ("client_id", "path", "sentence") if c not in header]
        if missing:
            raise UserError(f"missing column(s) {', '.join(missing)}", path=tsv, line=1,
                            fix="expected a Common Voice TSV (client_id, path, sentence, ..., gender, ...)")
        for line, rec in recs:
            uid, audio = finder.find(rec["path"], tsv, line)
            row = dict(id=uid, audio=str(audio), offset=0.0, duration=None,
                       speaker=rec["client_id"], gender_raw=rec.get(gcol, "") if gcol else "",
                       corpus="commonvoice", lang=lang or rec.get("locale") or root.name, split=task_split(split),
                       text=rec["sentence"], style="read", _src=tsv, _line=line)
            for col in EXTRA_COLUMNS:
                if col in rec:
                    row["accents" if col == "accent" else col] = rec[col]
            rows.append(row)
    note = resolve_speaker_genders(rows, root)
    df = finish_table(rows, source=root, check=check, skip_empty_audio=True)
    if note:  # said once the table stands, so a refused index prints its one error line only
        log.warning("%s", note)
    return df


class ClipFinder:
    """A locale's clips/ folder: a TSV row's ``path`` -> (utterance id, audio file). The id is the
    clip's stem; the file is ``clips/<path>`` when present, else a clip converted with the same stem
    (x.wav, x.flac), found with one directory scan made at the first miss. CoVoST 2 reads its
    clips through this too."""

    def __init__(self, clips: Path):
        self.clips = clips
        self.mp3_ok = "MP3" in sf.available_formats()  # libsndfile < 1.1 cannot open mp3
        self._by_stem: dict[str, Path] | None = None

    def find(self, path: str, tsv: Path, line: int) -> tuple[str, Path]:
        name = path.strip()
        if not Path(name).suffix:
            name += ".mp3"  # oldest releases omit the extension
        audio = self.clips / name
        if not audio.exists():
            if self._by_stem is None:
                self._by_stem = find_audio_by_stem(self.clips)
            audio = self._by_stem.get(Path(name).stem, audio)
        if audio.suffix.lower() == ".mp3" and not self.mp3_ok:
            raise UserError(f"this libsndfile ({sf.__libsndfile_version__}) cannot read mp3 headers", path=tsv,
                            line=line, fix="upgrade soundfile (>= 0.12 bundles libsndfile 1.1+) or convert the "
                            "clips to wav/flac with the same stem")
        return Path(name).stem, audio
