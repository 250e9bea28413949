"""Transcript normalisation and the character vocabulary of the CTC models.

The reference study's end-to-end ASR predicts "the lower-case symbols contained in the
normalized manual transcriptions of the training dataset". What "normalised" means here is
explicit and configurable (``TextNorm``), and the SAME normalisation is applied to the
training targets, to the test references written next to the hypotheses and nowhere else,
so WER compares like with like:

NFC, one apostrophe, lower-case, punctuation to spaces (keeping ' and -), whitespace collapsed:
the steps are in corpora/text_norm.py, which WER scoring's ``lc-nopunct`` also calls.

The vocabulary is SpeechBrain's ``CTCTextEncoder`` over characters (the space is a symbol),
with ``<blank>`` at index 0 and ``<unk>`` for characters never seen in training: a test
character outside the vocabulary is mapped to ``<unk>`` and counted, never a crash.
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from corpora.base.atomic import atomic_path
from corpora.base.boundary import listed_file
from corpora.base.errors import UserError
from corpora.text_norm import normalise_transcript

BLANK = "<blank>"
UNK = "<unk>"


@dataclass(frozen=True)
class TextNorm:
    """Which normalisation makes the transcripts (recorded with every model and hypothesis file)."""
    lowercase: bool = True
    strip_punctuation: bool = True
    keep_apostrophe: bool = True
    keep_hyphen: bool = True

    @classmethod
    def from_dict(cls, d: dict | None) -> "TextNorm":
        d = dict(d or {})
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise UserError(f"unknown text normalisation option(s) {sorted(unknown)}",
                            fix=f"use {', '.join(cls.__dataclass_fields__)}")
        return cls(**d)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def name(self) -> str:
        """A short tag for signatures, e.g. ``lc-nopunct-apos-hyph``."""
        parts = ["lc" if self.lowercase else "cased"]
        if self.strip_punctuation:
            parts.append("nopunct")
            parts += (["apos"] if self.keep_apostrophe else []) + (["hyph"] if self.keep_hyphen else [])
        return "-".join(parts)


def normalise_text(text: str, norm: TextNorm = TextNorm()) -> str:
    """One transcript after ``norm`` (corpora/text_norm.py: the same function WER scoring uses)."""
    return normalise_transcript(text, **norm.as_dict())


def build_vocab(texts, min_count: int = 1):
    """A CTCTextEncoder over the characters of the (already normalised) ``texts``.

    Index 0 is ``<blank>``, then ``<unk>``, then the characters in sorted order (so the same
    training text always gives the same indices). Characters seen fewer than ``min_count``
    times are left to ``<unk>``.
    """
    from speechbrain.dataio.encoder import CTCTextEncoder
    counts = Counter(ch for t in texts for ch in t)
    enc = CTCTextEncoder()
    enc.insert_blank(BLANK, index=0)
    enc.add_unk(UNK)
    for ch in sorted(c for c, n in counts.items() if n >= min_count):
        enc.add_label(ch)
    return enc


def save_vocab(enc, path: str | os.PathLike) -> None:
    """Write the encoder (SpeechBrain's own text format) atomically."""
    with atomic_path(path) as tmp:   # a unique temporary name, replaced into place when written
        enc.save(str(tmp))


def load_vocab(path: str | os.PathLike):
    """A run dir's vocabulary (SpeechBrain's encoder file), read as data: a regular file inside the
    run dir (a FIFO would block the read for ever; a link out of the dir is another file), in the
    encoder's format, else one line naming it."""
    from speechbrain.dataio.encoder import CTCTextEncoder

    path = Path(path)
    listed_file(path.parent, path.name, "vocabulary", source=path, max_bytes=16 << 20)
    enc = CTCTextEncoder()
    try:
        enc.load(str(path))   # one `'label' => index` per line, each read with ast.literal_eval
    except (ValueError, SyntaxError, TypeError, KeyError, IndexError, RecursionError, MemoryError,
            UnicodeDecodeError) as e:
        raise UserError(f"the vocabulary is not a SpeechBrain encoder file ({type(e).__name__})", path=path,
                        fix="restore the run dir's vocab.txt as training wrote it, or train again") from None
    return enc


def unknown_chars(text: str, enc) -> Counter:
    """Characters of ``text`` that the vocabulary does not have (they encode as ``<unk>``)."""
    return Counter(ch for ch in text if ch not in enc.lab2ind)


def encode(text: str, enc) -> list[int]:
    """Indices of the characters of ``text``; unknown characters give the ``<unk>`` index."""
    return enc.encode_sequence(list(text), allow_unk=True)


def decode(indices, enc) -> str:
    """Collapsed CTC indices (no blanks, no repeats) -> text; ``<unk>`` is dropped."""
    chars = [enc.ind2lab[int(i)] for i in indices]
    return " ".join("".join(c for c in chars if c not in (BLANK, UNK)).split())
