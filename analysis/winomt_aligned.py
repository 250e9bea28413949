"""WinoMT/WinoST entity gender the way mt_gender finds it: word alignment + spaCy morphology.

mt_gender (Stanovsky et al. 2019; `src/load_alignments.py`, `src/languages/spacy_support.py`),
for French, Spanish and Italian:

1. each English sentence is word-aligned to its translation (fast_align there, forward links
   ``i-j``: English word i, target word j; sentences split on whitespace);
2. the entity's span is its word index, preceded by the word before it when that word is an
   article (the/a/an); the target words aligned to the span are joined with spaces, in the
   order of the span's source words and of their links;
3. spaCy parses those words alone (not the sentence) and each token's morphological
   ``Gender`` feature votes (Masc -> male, Fem -> female); the most frequent wins, the first
   seen on a tie; no vote (or nothing aligned) -> unknown.

Here the aligner is eflomal (pip-installable; fast_align is not), forward links, the whole set
aligned in one go as mt_gender does with fast_align. eflomal samples: two runs over the same
text can link differently, so a score is reproducible from its saved links (``--alignments``),
which the CLI writes beside the predictions. Anything else follows mt_gender.
"""
from __future__ import annotations

import os
import tempfile
from collections import Counter
from functools import lru_cache
from pathlib import Path

from corpora.base.atomic import write_text
from corpora.base.errors import UserError
from corpora.base.textfile import read_lines

ARTICLES = ("the", "a", "an")
SPACY_MODELS = {"fr": "fr_core_news_sm", "es": "es_core_news_sm", "it": "it_core_news_sm"}
MORPH_GENDER = {"Masc": "male", "Fem": "female"}


def source_span(sentence: str, index: int) -> list[int]:
    """The entity's source word indexes: the article before it (if any), then the entity."""
    words = sentence.split(" ")
    before = [index - 1] if index > 0 and words[index - 1].lower() in ARTICLES else []
    return before + [index]


def read_alignments(path: str | os.PathLike, n: int) -> list[dict[int, list[int]]]:
    """Pharaoh links (``i-j`` pairs, one line per sentence) as {source index: [target indexes]}."""
    lines = read_lines(path, "alignment file", refuse_nul=True)
    if len(lines) != n:
        raise UserError(f"{len(lines)} alignment line(s) for {n} sentence(s)", path=path,
                        fix="give one line of `i-j` links per gold line, in the gold file's order")
    out = []
    for lineno, line in enumerate(lines, start=1):
        links: dict[int, list[int]] = {}
        for pair in line.split():
            src, sep, tgt = pair.partition("-")
            if not (sep and src.isdigit() and tgt.isdigit()):
                raise UserError(f"link {pair!r} is not `i-j`", path=path, line=lineno,
                                fix="write Pharaoh links: source index, a dash, target index (0-based)")
            links.setdefault(int(src), []).append(int(tgt))
        out.append(links)
    return out


def check_links(links: list[dict[int, list[int]]], sources: list[str], targets: list[str], path) -> None:
    """Every link points inside its sentence pair (else the file belongs to other text)."""
    for lineno, (ln, src, tgt) in enumerate(zip(links, sources, targets), start=1):
        n_src, n_tgt = len(src.split()), len(tgt.split())
        bad = [f"{i}-{j}" for i, js in ln.items() for j in js if i >= n_src or j >= n_tgt]
        if bad:
            raise UserError(f"link {bad[0]} is outside the sentence pair ({n_src} source, {n_tgt} target words)",
                            path=path, line=lineno,
                            fix="align the same whitespace-split sentences that are scored, in the same order")


def eflomal_links(sources: list[str], targets: list[str], save_to: str | os.PathLike | None = None
                  ) -> list[dict[int, list[int]]]:
    """Forward eflomal links for the whole set at once (written to ``save_to`` when given)."""
    try:
        import eflomal
    except ImportError:
        raise UserError("the aligned WinoMT method needs eflomal",
                        fix="pip install eflomal (or `make install`), or score with --method lexicon") from None
    with tempfile.TemporaryDirectory(prefix="gendergap-eflomal-") as tmp:
        fwd = Path(tmp) / "fwd.links"
        # empty lines would desynchronise eflomal's reader: a lone "." stands in and links nowhere useful
        eflomal.Aligner().align([s.lower() or "." for s in sources], [t.lower() or "." for t in targets],
                                links_filename_fwd=str(fwd), quiet=True)
        if save_to:
            write_text(save_to, fwd.read_text(encoding="utf-8"))
        return read_alignments(fwd, len(sources))


def entity_words(sentence: str, index: int, translation: str, links: dict[int, list[int]]) -> str:
    """The target words aligned to the entity's span, joined as mt_gender joins them."""
    tgt = translation.split()
    return " ".join(tgt[j] for i in source_span(sentence, index) for j in links.get(i, []))


@lru_cache(maxsize=None)
def _nlp(lang: str):
    try:
        import spacy
    except ImportError:
        raise UserError("the aligned WinoMT method needs spaCy",
                        fix=f"pip install spacy {SPACY_MODELS[lang].replace('_', '-')}, "
                        "or use --method lexicon") from None
    try:
        # mt_gender loads the pipeline without parser and NER; the morphologizer is what votes
        return spacy.load(SPACY_MODELS[lang], disable=["parser", "ner", "lemmatizer"])
    except OSError:
        raise UserError(f"spaCy's {SPACY_MODELS[lang]} model is not installed",
                        fix=f"pip install {SPACY_MODELS[lang].replace('_', '-')}, or use --method lexicon") from None


def spacy_model_version(lang: str) -> str:
    meta = _nlp(lang).meta
    return f"{meta.get('lang', lang)}_{meta.get('name', '?')}-{meta.get('version', '?')}"


class MorphologyPredictor:
    """Gender of a few target words from spaCy's morphology, cached per distinct string."""

    def __init__(self, lang: str):
        self.nlp = _nlp(lang)
        self.cache: dict[str, str] = {}

    def __call__(self, words: str) -> str:
        if words not in self.cache:
            self.cache[words] = self._predict(words)
        return self.cache[words]

    def predict_many(self, texts: list[str]) -> list[str]:
        todo = sorted({t for t in texts if t.strip() and t not in self.cache})
        for text, doc in zip(todo, self.nlp.pipe(todo, batch_size=256)):
            self.cache[text] = self._vote(doc)
        return [self(t) for t in texts]

    def _predict(self, words: str) -> str:
        return self._vote(self.nlp(words)) if words.strip() else "unknown"

    @staticmethod
    def _vote(doc) -> str:
        votes = [MORPH_GENDER[g[0]] for g in (tok.morph.get("Gender") for tok in doc)
                 if len(g) == 1 and g[0] in MORPH_GENDER]
        return Counter(votes).most_common(1)[0][0] if votes else "unknown"


def predict_aligned(gold, translations: list[str], lang: str, alignments_path=None, save_alignments=None
                    ) -> tuple[list[str], list[str]]:
    """(gender per gold line, why per gold line: aligned / unaligned / no gender feature)."""
    sources = [g.sentence for g in gold]
    targets = [" ".join(t.split()) for t in translations]
    if alignments_path:
        links = read_alignments(alignments_path, len(gold))
        check_links(links, sources, targets, alignments_path)
    else:
        links = eflomal_links(sources, targets, save_alignments)
    words = [entity_words(g.sentence, g.index, t, ln) for g, t, ln in zip(gold, targets, links)]
    predicted = MorphologyPredictor(lang).predict_many(words)
    reasons = ["unaligned" if not w.strip() else ("no gender feature" if p == "unknown" else "aligned")
               for w, p in zip(words, predicted)]
    return predicted, reasons
