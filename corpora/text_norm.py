"""The one transcript normalisation, shared by CTC training targets and WER scoring.

downstream_asr trains on transcripts normalised this way (downstream_asr/text.py: TextNorm
picks the options) and analysis scores WER with the same function under the name
``lc-nopunct`` (analysis/normalize.py), so a model is scored on the text it was taught:

1. Unicode NFC (a precomposed "é" and "e" + combining acute become the same symbol);
2. typographic apostrophes (U+2019, U+02BC, U+2018) become ``'``;
3. lower-case (``lowercase``);
4. every character that is not a letter, a digit, a combining mark, ``'`` (``keep_apostrophe``)
   or ``-`` (``keep_hyphen``) becomes a space (``strip_punctuation``): "fin.Début" gives two
   words, French accents and "aujourd'hui" survive;
5. runs of whitespace collapse to one space; leading/trailing space is stripped.
"""
from __future__ import annotations

import unicodedata

_APOSTROPHES = {"\u2019": "'", "\u02bc": "'", "\u2018": "'"}


def _keep(ch: str, keep_apostrophe: bool, keep_hyphen: bool) -> bool:
    if ch.isspace():
        return True
    if unicodedata.category(ch)[0] in "LNM":  # letters (accented ones too), digits, combining marks
        return True
    return (ch == "'" and keep_apostrophe) or (ch == "-" and keep_hyphen)


def normalise_transcript(text: str, lowercase: bool = True, strip_punctuation: bool = True,
                         keep_apostrophe: bool = True, keep_hyphen: bool = True) -> str:
    """One transcript after the steps above (the defaults are the reference study's)."""
    s = unicodedata.normalize("NFC", str(text))
    for a, b in _APOSTROPHES.items():
        s = s.replace(a, b)
    if lowercase:
        s = s.lower()
    if strip_punctuation:
        s = "".join(ch if _keep(ch, keep_apostrophe, keep_hyphen) else " " for ch in s)
    return " ".join(s.split())
