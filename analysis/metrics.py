"""Metrics as additive per-utterance statistics: corpus score = score(sum of the rows).

Each metric turns (references, hypotheses) into one row of integer statistics per utterance
and turns any sum of rows into a score, in percent. Sums of rows are all that speaker-level
bootstrap, per-gender scores and paired tests need: nothing is re-tokenised or re-aligned
when resampling (sacrebleu's design, ``sacrebleu/metrics/base.py``).

- WER (jiwer): rows ``hits, sub, del, ins, ref_words`` from one ``jiwer.process_words`` call
  (its per-sentence alignment chunks); score = 100 * (S + D + I) / (H + S + D), i.e. total
  errors over total reference words, never a mean of per-utterance rates.
- BLEU (sacrebleu): rows ``sys_len, ref_len, match_1..4, total_1..4`` from sacrebleu's own
  per-sentence statistics (its tokeniser, its n-gram counting); score from its public
  ``BLEU.compute_bleu``, exactly what ``sacrebleu.corpus_bleu`` computes.
- CER (jiwer): WER's rows over characters (``jiwer.process_characters``; spaces count, as in
  ``jiwer.cer``).
- chrF (sacrebleu, optional): sacrebleu's chrF statistics, same pattern.

sacrebleu has no public per-sentence statistics, nor a public chrF score from statistics: the
two adapters at the end of this module are the only places that call its private methods.

Every metric has a ``signature`` that says how its numbers were made.
"""
from __future__ import annotations

import inspect
from importlib import metadata
from typing import Sequence

import jiwer
import numpy as np
from sacrebleu.metrics import BLEU as SacreBLEU
from sacrebleu.metrics import CHRF as SacreCHRF

from analysis.normalize import get_normalisation
from corpora.base.errors import UserError


class WER:
    """Word error rate through jiwer, with a named normalisation (analysis/normalize.py)."""

    name = "wer"
    kind = "asr"                 # which `score` leaf offers it: asr (transcripts) or st (translations)
    unit = "words"
    stat_names = ("hits", "sub", "del", "ins", "ref_words")
    higher_is_better = False

    def __init__(self, normalization: str = "none"):
        self.normalization = normalization
        self._transform = get_normalisation(normalization, self.unit)

    @property
    def signature(self) -> str:
        return f"{self.name}|norm:{self.normalization}|jiwer:{metadata.version('jiwer')}"

    def _align(self, refs: list[str], hyps: list[str]):
        return jiwer.process_words(refs, hyps, reference_transform=self._transform,
                                   hypothesis_transform=self._transform)

    def utterance_stats(self, refs: Sequence[str], hyps: Sequence[str]) -> np.ndarray:
        """One row (hits, sub, del, ins, reference units) per utterance, int64, shape (n, 5)."""
        out = self._align(list(refs), list(hyps))
        rows = np.zeros((len(out.alignments), 5), dtype=np.int64)
        col = {"equal": 0, "substitute": 1, "delete": 2}
        for i, chunks in enumerate(out.alignments):
            for c in chunks:
                if c.type == "insert":
                    rows[i, 3] += c.hyp_end_idx - c.hyp_start_idx
                else:
                    rows[i, col[c.type]] += c.ref_end_idx - c.ref_start_idx
        rows[:, 4] = [len(r) for r in out.references]
        return rows

    def score(self, stats: Sequence[float]) -> float | None:
        """WER in percent from summed stats; None when there are no reference words."""
        return _none_if_nan(self.scores(np.asarray(stats, dtype=float)[None, :])[0])

    def scores(self, stats: np.ndarray) -> np.ndarray:
        """Vectorised: one WER per row of summed stats (e.g. per bootstrap resample)."""
        stats = np.asarray(stats, dtype=float)
        errors = stats[:, 1] + stats[:, 2] + stats[:, 3]
        ref_words = stats[:, 0] + stats[:, 1] + stats[:, 2]
        with np.errstate(divide="ignore", invalid="ignore"):
            # 100 * (e / r), in jiwer's order of operations, so the numbers equal 100 * jiwer.wer bit for bit.
            return np.where(ref_words > 0, 100.0 * (errors / ref_words), np.nan)

    def same_references(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Two systems were scored on the same references iff their reference word counts agree."""
        return bool(np.array_equal(np.asarray(a)[:, 4], np.asarray(b)[:, 4]))


class CER(WER):
    """Character error rate through jiwer (spaces count, as in ``jiwer.cer``): the same additive rows,
    over characters; the usual ASR figure for languages and systems where words mislead."""

    name = "cer"
    unit = "chars"
    stat_names = ("hits", "sub", "del", "ins", "ref_chars")

    def _align(self, refs: list[str], hyps: list[str]):
        return jiwer.process_characters(refs, hyps, reference_transform=self._transform,
                                        hypothesis_transform=self._transform)


class _SacreMetric:
    """Shared code for sacrebleu metrics: sacrebleu extracts and scores, we only sum."""

    _impl: SacreBLEU | SacreCHRF
    _ref_columns: tuple[int, ...] = ()

    @property
    def signature(self) -> str:
        # nrefs is only known once references were seen; we always use one reference.
        self._impl.num_refs = 1
        return str(self._impl.get_signature())

    def utterance_stats(self, refs: Sequence[str], hyps: Sequence[str]) -> np.ndarray:
        rows = sacrebleu_sentence_stats(self._impl, refs, hyps)
        return np.asarray(rows, dtype=np.int64).reshape(len(hyps), len(self.stat_names))

    def score(self, stats: Sequence[float]) -> float | None:
        # Plain ints: sacrebleu's smoothing code mutates the lists it gets.
        return float(sacrebleu_score_from_stats(self._impl, [int(round(x)) for x in stats]))

    def scores(self, stats: np.ndarray) -> np.ndarray:
        """One score per row of summed stats (sacrebleu's formula, a Python loop)."""
        stats = np.rint(np.asarray(stats)).astype(np.int64)
        return np.array([sacrebleu_score_from_stats(self._impl, row.tolist()) for row in stats], dtype=float)

    def same_references(self, a: np.ndarray, b: np.ndarray) -> bool:
        if not self._ref_columns:
            return True
        cols = list(self._ref_columns)
        return bool(np.array_equal(np.asarray(a)[:, cols], np.asarray(b)[:, cols]))


class BLEU(_SacreMetric):
    """Corpus BLEU through sacrebleu (default 13a, case-sensitive, no smoothing: its defaults)."""

    name = "bleu"
    kind = "st"
    higher_is_better = True

    def __init__(self, tokenize: str = "13a", lowercase: bool = False):
        try:
            self._impl = SacreBLEU(tokenize=tokenize, lowercase=lowercase, force=True)
        except Exception as e:  # sacrebleu raises plain errors for unknown tokenisers
            raise UserError(f"sacrebleu refused tokenize={tokenize!r} ({e})",
                            fix="use a sacrebleu tokeniser such as 13a, intl, none, char") from None
        n = self._impl.max_ngram_order
        self.stat_names = ("sys_len", "ref_len", *[f"match_{i}" for i in range(1, n + 1)],
                           *[f"total_{i}" for i in range(1, n + 1)])
        # With one reference, ref_len is the reference's own length: the same for every system.
        self._ref_columns = (1,)


class CHRF(_SacreMetric):
    """chrF through sacrebleu (its defaults: char order 6, beta 2, no word n-grams)."""

    name = "chrf"
    kind = "st"
    higher_is_better = True

    def __init__(self, lowercase: bool = False):
        self._impl = SacreCHRF(lowercase=lowercase)
        n = self._impl.char_order + self._impl.word_order
        self.stat_names = tuple(f"{kind}_{i}" for i in range(1, n + 1) for kind in ("hyp", "ref", "match"))
        # chrF rows interleave hyp/ref/match counts per order; the ref counts do not depend on the system.
        self._ref_columns = tuple(range(1, 3 * n, 3))


# name -> class: what `score asr|st --metric` offers and stored rows are re-scored with. A new metric
# is a class with name, kind, stat_names, higher_is_better, signature, utterance_stats, score,
# scores and same_references (additive per-utterance rows), added here.
METRICS: dict[str, type] = {"wer": WER, "cer": CER, "bleu": BLEU, "chrf": CHRF}


def get_metric(name: str, **options):
    """The metric object ``name`` of METRICS, built with the ``options`` its class takes (wer/cer:
    ``normalization``; bleu: ``tokenize``, ``lowercase``; chrf: ``lowercase``); others are ignored,
    so a caller can pass every text option it has."""
    try:
        cls = METRICS[name]
    except KeyError:
        raise UserError(f"unknown metric {name!r}", fix="use one of: " + ", ".join(METRICS)) from None
    takes = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in options.items() if k in takes})


def metrics_for(kind: str) -> list[str]:
    """The names of the metrics a `score` leaf offers: ``asr`` (transcripts) or ``st`` (translations)."""
    return [name for name, cls in METRICS.items() if cls.kind == kind]


def _none_if_nan(x: float) -> float | None:
    return None if x is None or not np.isfinite(x) else float(x)


# --- sacrebleu's private names, in one place ----------------------------------------------------
# Its public API scores a corpus or one sentence but returns no additive per-sentence rows
# (CHRFScore keeps no statistics; BLEU.sentence_score warns on every call without
# effective_order and its counts are the smoothed ones). So the rows come from the method its
# own corpus_score and paired tests use, and chrF's score from statistics likewise. setup.cfg
# bounds sacrebleu (<2.7, checked with 2.6.0) for these calls and analysis/compare.py's tests.

def sacrebleu_sentence_stats(impl: SacreBLEU | SacreCHRF, refs: Sequence[str], hyps: Sequence[str]) -> list:
    """One row of sacrebleu's sufficient statistics per (hypothesis, single reference)."""
    return impl._extract_corpus_statistics(list(hyps), [list(refs)])


def sacrebleu_score_from_stats(impl: SacreBLEU | SacreCHRF, stats: list[int]) -> float:
    """The score sacrebleu gives a sum of rows (BLEU through its public ``compute_bleu``)."""
    if isinstance(impl, SacreBLEU):
        n = impl.max_ngram_order
        return impl.compute_bleu(correct=stats[2:2 + n], total=stats[2 + n:], sys_len=int(stats[0]),
                                 ref_len=int(stats[1]), smooth_method=impl.smooth_method,
                                 smooth_value=impl.smooth_value, effective_order=impl.effective_order,
                                 max_ngram_order=n).score
    return impl._compute_score_from_stats(stats).score
