"""WinoST (the spoken WinoMT: 3,888 English sentences read by one American female speaker,
48 kHz wav), as distributed next to WinoMT's ``en.txt``::

    winost/en.txt        gender<TAB>entity index<TAB>sentence<TAB>entity   (WinoMT, one per line)
    winost/wav/1.wav     line 1 of en.txt (the number in the file name is the line number;
                         ``first_index=0`` when the files count from 0); searched recursively

``gender`` in en.txt is the gender of the *entity* (male/female/neutral), not the speaker's:
it goes in ``entity_gender`` (with ``entity_index`` and ``entity``) for the WinoMT scorer.
The speaker is one person, female per the WinoST paper (``speaker_gender`` to override).
The recordings are 48 kHz: ``gendergap corpus index --kind winost`` accepts any rate by default
and records it in ``sample_rate`` (the reader's own ``check`` default is 16 kHz only, as for
every reader: pass ``AudioCheck(sample_rates=None)``).

As downloaded, the archive was zipped on a Mac: ``__MACOSX/`` and ``._0001.wav`` resource-fork
files are ignored (they carry the audio files' names but are not audio). The wavs come
gzipped (``0001.wav.gz``) and are indexed as they are: the table points at the ``.wav.gz``,
its duration comes from the header of the decompressed bytes (corpora.audio_info), and
whatever reads samples decompresses in memory (ssl_pretrain.features.read_segment for the
feature store; fairseq/Kaldi manifests with ``--resample`` write a prepared copy through
corpora.prepared_audio). Nothing is unpacked beside the corpus. A plain ``N.wav`` wins over
``N.wav.gz`` when both are there.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from corpora.readers.common import AudioCheck, finish_table, first_int, walk_files

AUDIO_EXTS = (".wav", ".flac", ".wav.gz", ".flac.gz")  # plain first: preferred when both are there


def read_winost(root, *, winomt_file=None, audio_dir=None, first_index: int = 1, speaker_gender: str = "female",
                check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of WinoST: one row per en.txt line, matched to its wav by number."""
    root = Path(root)
    en = Path(winomt_file) if winomt_file else root / "en.txt"
    if not en.is_file():
        raise UserError("WinoMT en.txt not found", path=en, fix="put en.txt (from mt_gender's data/aggregates) in "
                        "--root or pass --winomt-file")
    wav_dir = Path(audio_dir) if audio_dir else root
    numbered = _numbered_audio(wav_dir)
    rows = []
    for i, line in enumerate(read_lines(en), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise UserError(f"{len(fields)} tab-separated fields, expected 4", path=en, line=i,
                            fix="WinoMT lines are gender<TAB>entity index<TAB>sentence<TAB>entity")
        gender, index, sentence, entity = (f.strip() for f in fields)
        n = i - 1 + first_index
        audio = numbered.get(n, wav_dir / f"{n}.wav")
        rows.append(dict(id=f"winost_{i:04d}", audio=str(audio), offset=0.0, duration=None, speaker="winost_speaker",
                         gender_raw=speaker_gender, corpus="winost", lang="en", split="test", text=sentence,
                         style="read", entity_gender=gender, entity_index=index, entity=entity,
                         _src=en, _line=i, _gender_src="--speaker-gender"))
    return finish_table(rows, source=en, check=check)


def _numbered_audio(wav_dir: Path) -> dict[int, Path]:
    """{number in the file name: path} of the audio under ``wav_dir`` (macOS litter left out)."""
    found: dict[int, tuple[int, Path]] = {}
    if not wav_dir.is_dir():
        return {}
    for dirpath, name in walk_files(wav_dir):
        low = name.lower()
        rank = next((k for k, ext in enumerate(AUDIO_EXTS) if low.endswith(ext)), None)
        if rank is None:
            continue
        n = first_int(name[:-len(AUDIO_EXTS[rank])])
        if n is not None and (n not in found or rank < found[n][0]):
            found[n] = (rank, Path(dirpath) / name)
    return {n: path for n, (_, path) in found.items()}
