"""Text normalisation for WER: explicit, named, and recorded in every WER signature.

A WER number depends as much on what was done to the text as on the system, so the harness
never normalises silently: each normalisation has a name, the same one is applied to the
references and the hypotheses, and the name is part of the score's signature
(``wer|norm:lc-nopunct|...``). All of them are built from jiwer's own transforms.

- ``none``: jiwer's default (``jiwer.transformations.wer_default``): strip, collapse runs of
  spaces, split on whitespace. Case and punctuation count. This is what ``jiwer.wer`` does,
  so ``norm:none`` numbers equal ``jiwer.wer`` exactly.
- ``lc``: lower-case, then ``none``.
- ``lc-nopunct``: ``corpora.text_norm.normalise_transcript``, the very function that makes the
  CTC models' training targets: NFC, typographic apostrophes to ``'``, lower-case, every
  character that is not a letter, digit, combining mark, apostrophe, hyphen or whitespace
  becomes a space (so ``fin.Début`` gives two words, not one); then ``none``. Apostrophes and
  hyphens are kept because they are part of French words (``aujourd'hui``, ``peut-être``).

CER uses the same names on characters (spaces count, as in ``jiwer.cer``).
BLEU does not use these: sacrebleu tokenises itself (``tok:13a``, ``case:mixed`` in its
signature).
"""
from __future__ import annotations

import jiwer

from corpora.base.errors import UserError
from corpora.text_norm import normalise_transcript


class _Transcript(jiwer.AbstractTransform):
    """corpora.text_norm as a jiwer transform (one normalisation for training and scoring)."""

    def process_string(self, s: str) -> str:
        return normalise_transcript(s)


_WHITESPACE_AND_SPLIT = [jiwer.RemoveMultipleSpaces(), jiwer.Strip(), jiwer.ReduceToListOfListOfWords()]

NORMALISATIONS: dict[str, jiwer.Compose] = {
    "none": jiwer.Compose(list(_WHITESPACE_AND_SPLIT)),
    "lc": jiwer.Compose([jiwer.ToLowerCase(), *_WHITESPACE_AND_SPLIT]),
    "lc-nopunct": jiwer.Compose([_Transcript(), *_WHITESPACE_AND_SPLIT]),
}

# the same normalisations for a character error rate: the string steps, then characters (spaces
# count, as in jiwer.cer; ``none`` is jiwer's own cer_default, so its numbers equal jiwer.cer)
CHAR_NORMALISATIONS: dict[str, jiwer.Compose] = {
    "none": jiwer.Compose([jiwer.Strip(), jiwer.ReduceToListOfListOfChars()]),
    "lc": jiwer.Compose([jiwer.ToLowerCase(), jiwer.Strip(), jiwer.ReduceToListOfListOfChars()]),
    "lc-nopunct": jiwer.Compose([_Transcript(), jiwer.RemoveMultipleSpaces(), jiwer.Strip(),
                                 jiwer.ReduceToListOfListOfChars()]),
}

DESCRIPTIONS = {
    "none": "whitespace only (jiwer default); case and punctuation count",
    "lc": "lower-case + whitespace",
    "lc-nopunct": "lower-case, punctuation other than ' and - replaced by spaces, whitespace",
}


def get_normalisation(name: str, unit: str = "words") -> jiwer.Compose:
    """The jiwer transform for a named normalisation (applied to references and hypotheses), ending
    in words (WER) or characters (``unit="chars"``, CER)."""
    try:
        return (CHAR_NORMALISATIONS if unit == "chars" else NORMALISATIONS)[name]
    except KeyError:
        raise UserError(f"unknown WER normalisation {name!r}",
                        fix="use one of: " + ", ".join(f"{k} ({v})" for k, v in DESCRIPTIONS.items())) from None


def normalise_words(texts: list[str], name: str) -> list[list[str]]:
    """The word lists that WER aligns, after normalisation ``name`` (for inspection and tests)."""
    return get_normalisation(name)(list(texts))
