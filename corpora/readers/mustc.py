"""MuST-C (English TED talks translated into 8+ languages), one pair as distributed::

    MUSTC_v1.0/en-de/data/train/txt/train.yaml   - {duration: 3.5, offset: 16.09, rW: 9, uW: 0,
                                                    speaker_id: spk.1, wav: ted_1.wav}
    MUSTC_v1.0/en-de/data/train/txt/train.en     line-aligned English transcript
    MUSTC_v1.0/en-de/data/train/txt/train.de     line-aligned German translation
    MUSTC_v1.0/en-de/data/train/wav/ted_1.wav    one long recording per talk
    splits: train, dev, tst-COMMON, tst-HE

MuST-C carries no gender: pass a speaker list (``--speaker-genders``) keyed by speaker_id
(``spk.1``), talk (``ted_1``) or bare talk number (``1``) -- FBK's MuST-Speakers list is read as
distributed (header, TALK-ID, TED-PRONOUN). How many talks matched is logged, with a warning
when some or none did. Segments running past the end of their talk are trimmed (``--strict``
refuses them), as for mTEDx.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from corpora.readers.common import AudioCheck
from corpora.readers.mtedx import find_pair_dir, read_ted_pair


def read_mustc(root, *, tgt_lang: str | None = None, splits: list[str] | None = None,
               speaker_genders=None, check: AudioCheck = AudioCheck()) -> pd.DataFrame:
    """Utterance table of one MuST-C pair ``en-<tgt_lang>``; the translation goes in
    ``tgt_text_<tgt_lang>``. ``root``: the MuST-C root or the pair directory."""
    pair, src, tgt = find_pair_dir(Path(root), "en" if tgt_lang else None, tgt_lang, "en")
    return read_ted_pair(pair, corpus="mustc", src=src, tgt=tgt, splits=splits,
                         speaker_genders=speaker_genders, check=check)
