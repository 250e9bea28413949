"""WinoMT / WinoST gender scoring of translations into French, Spanish or Italian.

Protocol (Stanovsky et al. 2019, as used by WinoST, Costa-jussà et al. 2022): each gold line
names one entity (profession) and its gender; the translation's gender for that entity is
compared with the gold. Metrics: accuracy, per-gender precision/recall/F1, ΔG = F1(male) -
F1(female) and ΔS = acc(pro-stereotypical) - acc(anti-stereotypical), all in percent.
An entity whose translation cannot be found or gendered is "unknown" and counts as wrong.

Two methods find the entity's gender in the translation:
- ``aligned`` (the default; analysis/winomt_aligned.py): mt_gender's own -- word alignment, the
  target words aligned to the entity and its article, spaCy's morphological Gender feature;
- ``lexicon`` (here): no aligner. The shipped lexicon (analysis/lexicons/<lang>.tsv) lists each
  profession's masculine and feminine forms; the translation is searched for them, and of several
  occurrences the one whose relative position is closest to the English entity's is kept. A form
  that is the same for both genders (French "secrétaire") is gendered by spaCy morphology when a
  spaCy model for the language is installed, else by the nearest preceding determiner.
Both write mt_gender's per-sentence prediction file, so the two can be diffed line by line.
"""
from __future__ import annotations

import csv
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from analysis.winomt_aligned import predict_aligned, spacy_model_version
from corpora.base.atomic import atomic_open
from corpora.base.errors import UserError
from corpora.base.textfile import read_lines

log = logging.getLogger(__name__)

LEXICON_DIR = Path(__file__).with_name("lexicons")
LANGS = ("fr", "es", "it")
GOLD_GENDERS = ("male", "female", "neutral")

# Determiners (and articles fused with prepositions) whose form marks the gender of the noun
# they introduce. Elided/plural forms (l', les, des, gli, los...) say nothing and are absent.
DETERMINERS = {
    # French mon/ton/son also precede feminine nouns starting with a vowel ("son amie"): left out.
    "fr": {"M": {"le", "un", "du", "au", "ce", "cet"},
           "F": {"la", "une", "cette", "ma", "ta", "sa"}},
    "es": {"M": {"el", "un", "del", "al", "este", "ese", "aquel", "otro", "nuestro", "vuestro"},
           "F": {"la", "una", "esta", "esa", "aquella", "otra", "nuestra", "vuestra"}},
    "it": {"M": {"il", "lo", "un", "uno", "del", "dello", "al", "allo", "dal", "dallo", "nel", "nello",
                 "sul", "sullo", "col", "questo", "quel", "quello", "mio", "tuo", "suo", "nostro", "vostro"},
           "F": {"la", "una", "un'", "della", "alla", "dalla", "nella", "sulla", "questa", "quella",
                 "mia", "tua", "sua", "nostra", "vostra"}},
}
DETERMINER_WINDOW = 3  # look back over at most this many tokens (room for an adjective or two)
SPACY_MODELS = {"fr": "fr_core_news_sm", "es": "es_core_news_sm", "it": "it_core_news_sm"}

_TOKEN = re.compile(r"\w+'|\w+(?:-\w+)*", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens; elided articles keep their apostrophe ("l'", "un'")."""
    return _TOKEN.findall(text.lower().replace("\u2019", "'"))


@dataclass
class LexiconEntry:
    masculine: list[tuple[str, ...]]
    feminine: list[tuple[str, ...]]


def read_lexicon(path: str | os.PathLike) -> dict[str, LexiconEntry]:
    """Read a lexicon TSV (profession, masculine, feminine; forms separated by |; # comments)."""
    lines = read_lines(path, "profession lexicon", refuse_nul=True)
    body = [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not body:
        raise UserError("the profession lexicon is empty", path=path, fix="add `profession<TAB>masc<TAB>fem` rows")
    header_line, header = body[0][0], [h.strip().lower() for h in body[0][1].split("\t")]
    if header[:3] != ["profession", "masculine", "feminine"]:
        raise UserError(f"lexicon header is {header}, expected profession, masculine, feminine", path=path,
                        line=header_line, fix="start the file with `profession<TAB>masculine<TAB>feminine`")
    lexicon = {}
    for lineno, ln in body[1:]:
        fields = ln.split("\t")
        if len(fields) < 3 or not fields[0].strip():
            raise UserError(f"{len(fields)} tab-separated field(s), expected 3", path=path, line=lineno,
                            fix="write `profession<TAB>masc forms<TAB>fem forms` (forms separated by |)")
        forms = [[tuple(tokenize(f)) for f in field.split("|") if tokenize(f)] for field in fields[1:3]]
        if not forms[0] and not forms[1]:
            raise UserError(f"no form given for {fields[0].strip()!r}", path=path, line=lineno,
                            fix="give at least one masculine or feminine form")
        lexicon[_profession_key(fields[0])] = LexiconEntry(forms[0], forms[1])
    return lexicon


def load_lexicon(lang: str, extra_path: str | os.PathLike | None = None) -> dict[str, LexiconEntry]:
    """The shipped lexicon for ``lang``, with ``extra_path``'s entries added (they win on conflicts)."""
    if lang not in LANGS:
        raise UserError(f"no profession lexicon for language {lang!r}", fix=f"use one of {', '.join(LANGS)}")
    lexicon = dict(read_lexicon(LEXICON_DIR / f"{lang}.tsv"))
    if extra_path:
        lexicon.update(read_lexicon(extra_path))
    return lexicon


def _profession_key(profession: str) -> str:
    # WinoMT's 2019 column 4 keeps the article ("The developer", "a housekeeper", "an assistant",
    # " physician"); mt_gender's 2020 files dropped it: both spell the same entity.
    words = profession.strip().lower().split()
    if words and words[0] in ("the", "a", "an"):
        words = words[1:]
    return " ".join(words)


# --- finding the entity and its gender -----------------------------------------------------
@dataclass
class Match:
    start: int
    end: int
    gender: str | None  # "M", "F", or None when the form is the same for both genders


def find_forms(tokens: list[str], entry: LexiconEntry) -> list[Match]:
    """Every occurrence of the entry's forms, longest form first at each position."""
    forms = [(f, "M") for f in entry.masculine] + [(f, "F") for f in entry.feminine]
    both = set(entry.masculine) & set(entry.feminine)
    forms.sort(key=lambda fg: -len(fg[0]))
    matches, i = [], 0
    while i < len(tokens):
        for form, gender in forms:
            if tuple(tokens[i:i + len(form)]) == form:
                matches.append(Match(i, i + len(form), None if form in both else gender))
                i += len(form)
                break
        else:
            i += 1
    return matches


def determiner_gender(tokens: list[str], start: int, lang: str) -> str | None:
    """Gender of the nearest determiner before ``start`` (within a few tokens), or None."""
    table = DETERMINERS[lang]
    for j in range(start - 1, max(-1, start - 1 - DETERMINER_WINDOW), -1):
        for gender in ("M", "F"):
            if tokens[j] in table[gender]:
                return gender
    return None


@lru_cache(maxsize=None)
def _spacy_pipeline(lang: str):
    """A spaCy pipeline for ``lang`` if spaCy and its small model are installed, else None."""
    try:
        import spacy
        return spacy.load(SPACY_MODELS[lang], disable=["parser", "ner"])
    except Exception:  # spaCy is optional: absent package or model means "no morphology cue"
        return None


@lru_cache(maxsize=4096)
def _token_genders(text: str, lang: str) -> tuple[tuple[str, str | None], ...]:
    # One parse per distinct translation: WinoMT repeats sentences (and a benchmark, whole sets)
    nlp = _spacy_pipeline(lang)
    if nlp is None:
        return ()
    out = []
    for tok in nlp(text):
        g = tok.morph.get("Gender")
        out.append((tok.text.lower(), "M" if g == ["Masc"] else "F" if g == ["Fem"] else None))
    return tuple(out)


def spacy_gender(text: str, form: tuple[str, ...], lang: str) -> str | None:
    """Gender spaCy's morphology gives the form's head word in ``text`` (None if unknown)."""
    for word, gender in _token_genders(text, lang):
        if word == form[0] and gender is not None:
            return gender
    return None


def predict_gender(translation: str, profession: str, entity_index: int, sentence: str, lang: str,
                   lexicon: dict[str, LexiconEntry]) -> tuple[str, str]:
    """(gender, how) for the gold entity in one translation: gender is male/female/unknown."""
    entry = lexicon.get(_profession_key(profession))
    if entry is None:
        return "unknown", "profession not in lexicon"
    tokens = tokenize(translation)
    matches = find_forms(tokens, entry)
    if not matches:
        return "unknown", "no lexicon form in translation"
    # Without an aligner, the occurrence at the closest relative position stands for the entity.
    target = entity_index / max(1, len(sentence.split()))
    m = min(matches, key=lambda mt: abs(mt.start / max(1, len(tokens)) - target))
    gender, how = m.gender, "lexicon"
    if gender is None:
        gender, how = spacy_gender(translation, tuple(tokens[m.start:m.end]), lang), "spacy"
    if gender is None:
        gender, how = determiner_gender(tokens, m.start, lang), "determiner"
    if gender is None:
        return "unknown", "form is the same for both genders and no determiner says which"
    return ("male" if gender == "M" else "female"), how


# --- reading -----------------------------------------------------------------------------
@dataclass
class GoldLine:
    gender: str
    index: int
    sentence: str
    profession: str
    line: int

    @property
    def key(self) -> tuple:
        return (self.gender, self.index, self.sentence.strip(), _profession_key(self.profession))


def read_gold(path: str | os.PathLike, what: str = "WinoMT gold file") -> list[GoldLine]:
    """Read WinoMT's en.txt format: gender, entity index, sentence, profession (tab-separated)."""
    gold = []
    lines = read_lines(path, what, refuse_nul=True)
    for lineno, rec in enumerate((ln.split("\t") for ln in lines), start=1):   # no quoting: quotes are text
        if not any(f.strip() for f in rec):
            continue
        if len(rec) != 4:
            raise UserError(f"{len(rec)} tab-separated field(s), expected 4", path=path, line=lineno,
                            fix="use WinoMT's en.txt format: gender<TAB>index<TAB>sentence<TAB>profession")
        gender = rec[0].strip().lower()
        if gender not in GOLD_GENDERS:
            raise UserError(f"gender {rec[0]!r} is not one of {', '.join(GOLD_GENDERS)}", path=path, line=lineno,
                            fix="the first column is male, female or neutral")
        try:
            index = int(rec[1])
        except ValueError:
            raise UserError(f"entity index {rec[1]!r} is not an integer", path=path, line=lineno,
                            fix="the second column is the entity's word index in the sentence") from None
        words = len(rec[2].split())
        if not 0 <= index < words:
            raise UserError(f"entity index {index} is outside the sentence's {words} words (0..{words - 1})",
                            path=path, line=lineno,
                            fix="the second column is the 0-based index of the entity's word in the sentence")
        gold.append(GoldLine(gender, index, rec[2], rec[3], lineno))
    if not gold:
        raise UserError(f"the {what} has no lines", path=path, fix="pass WinoMT's en.txt")
    return gold


TRANSLATION_FORMATS = ("auto", "plain", "mt_gender")
MT_GENDER_SEP = " ||| "


def read_translations(path: str | os.PathLike, gold: list[GoldLine], fmt: str = "auto") -> tuple[list[str], str]:
    """(one translation per gold line, the format read).

    ``plain``: one translation per gold line, or ``index<TAB>text`` with 0-based line indexes.
    ``mt_gender``: ``English ||| translation`` lines as mt_gender distributes them; each English
    side must be its gold line's sentence. ``auto``: mt_gender when the first line has `` ||| ``.
    """
    if fmt not in TRANSLATION_FORMATS:
        raise UserError(f"unknown translation format {fmt!r}", fix=f"use one of {', '.join(TRANSLATION_FORMATS)}")
    lines = read_lines(path, "translation file", refuse_nul=True)
    if fmt == "auto":
        fmt = "mt_gender" if lines and MT_GENDER_SEP in lines[0] else "plain"
    n = len(gold)
    if fmt == "mt_gender":
        return _read_mt_gender(path, lines, gold), fmt
    if lines and all("\t" in ln and ln.split("\t", 1)[0].strip().isdigit() for ln in lines):
        keyed = {int(k): v for k, v in (ln.split("\t", 1) for ln in lines)}
        if sorted(keyed) == list(range(n)):
            return [keyed[i] for i in range(n)], fmt
    if len(lines) != n:
        raise UserError(f"{len(lines)} translation line(s) for {n} gold line(s)", path=path,
                        fix="give one translation per gold line, in the gold file's order")
    return lines, fmt


def _split_mt_gender(path, lineno: int, line: str) -> tuple[str, str]:
    # mt_gender strips the line, then splits on " ||| "; an empty translation leaves "English |||"
    body = line.strip()
    if body.endswith(" |||"):
        body += " "
    if MT_GENDER_SEP not in body:
        raise UserError("no ` ||| ` separator on this line of an mt_gender translation file", path=path,
                        line=lineno, fix="write `English sentence ||| translation` on every line, "
                                         "or pass --format plain for one translation per line")
    english, translation = body.split(MT_GENDER_SEP, 1)
    return english.strip(), translation.strip()


def _read_mt_gender(path, lines: list[str], gold: list[GoldLine]) -> list[str]:
    """Translations of an ``English ||| translation`` file, checked against the gold sentences.

    Same number of lines: line i translates gold line i, and its English side must be gold line
    i's sentence. Otherwise (e.g. en_pro.txt as gold against the full file), each gold line takes
    the file's line with its English sentence, the last one when it occurs twice -- mt_gender's
    own pairing (load_alignments.align_bitext_to_ds).
    """
    pairs = [_split_mt_gender(path, i, ln) for i, ln in enumerate(lines, start=1)]
    if len(pairs) == len(gold):
        for i, ((english, _), g) in enumerate(zip(pairs, gold), start=1):
            if english != g.sentence.strip():
                raise UserError(f"English side {_clip(english)!r} is not gold line {g.line}'s sentence "
                                f"{_clip(g.sentence)!r}", path=path, line=i,
                                fix="pass the translation file made from this gold file (same sentences, "
                                    "same order); mt_gender's translations were made from its 2019 en.txt")
        return [t for _, t in pairs]
    by_english = {english: t for english, t in pairs}
    out = []
    for g in gold:
        if g.sentence.strip() not in by_english:
            raise UserError(f"{len(pairs)} translation line(s) for {len(gold)} gold line(s), and gold line "
                            f"{g.line}'s sentence {_clip(g.sentence)!r} is on none of them", path=path,
                            fix="pass the translation file made from this gold file")
        out.append(by_english[g.sentence.strip()])
    return out


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


# --- scoring -----------------------------------------------------------------------------
def _pct(num: int, den: int, rounded: bool) -> float:
    value = 100.0 * num / den if den else 0.0
    return round(value, 1) if rounded else value


def _prf(gold: list[str], pred: list[str], gender: str, rounded: bool = False) -> dict:
    """P/R/F1 of one gender; ``rounded``: P and R to one decimal before F1, as mt_gender reports."""
    tp = sum(g == p == gender for g, p in zip(gold, pred))
    n_pred = sum(p == gender for p in pred)
    n_gold = sum(g == gender for g in gold)
    precision, recall = _pct(tp, n_pred, rounded), _pct(tp, n_gold, rounded)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": round(f1, 1) if rounded else f1,
            "n_gold": n_gold, "n_pred": n_pred}


def _accuracy(gold: list[str], pred: list[str], rounded: bool = False) -> float:
    return _pct(sum(g == p for g, p in zip(gold, pred)), len(gold), rounded)


def score_predictions(gold_genders: list[str], predicted: list[str], pro: list[int] | None = None,
                      anti: list[int] | None = None, official_rounding: bool = False) -> dict:
    """Metrics from gold and predicted genders (male/female/neutral/unknown); pro/anti are indexes.

    Default: full precision throughout (round only when printing). ``official_rounding``: what
    mt_gender's evaluate.py reports -- accuracy, P and R rounded to one decimal, F1 computed from
    the rounded P and R and rounded again; ΔG and ΔS are differences of those rounded figures.
    """
    r = official_rounding
    out = {"n": len(gold_genders), "acc": _accuracy(gold_genders, predicted, r),
           "n_unknown": sum(p == "unknown" for p in predicted), "official_rounding": r}
    per = {g: _prf(gold_genders, predicted, g, r) for g in ("male", "female")}
    out["f1"] = {g: per[g]["f1"] for g in per}
    out["precision"] = {g: per[g]["precision"] for g in per}
    out["recall"] = {g: per[g]["recall"] for g in per}
    out["delta_g"] = _diff(out["f1"]["male"], out["f1"]["female"], r)
    out["acc_pro"] = out["acc_anti"] = out["delta_s"] = None
    if pro is not None and anti is not None:
        out["acc_pro"] = _accuracy([gold_genders[i] for i in pro], [predicted[i] for i in pro], r)
        out["acc_anti"] = _accuracy([gold_genders[i] for i in anti], [predicted[i] for i in anti], r)
        out["delta_s"] = _diff(out["acc_pro"], out["acc_anti"], r)
        out["n_pro"], out["n_anti"] = len(pro), len(anti)
    return out


def _diff(a: float, b: float, rounded: bool) -> float:
    return round(a - b, 1) if rounded else a - b  # 61.3 - 58.1 is 3.1999999999999957 in floats


def write_predictions(path: str | os.PathLike, translations: list[str], predicted: list[str]) -> None:
    """mt_gender's per-sentence output: CSV with a header, the translation and its predicted gender."""
    with atomic_open(path) as f:  # newline="" inside: csv writes the line ends itself
        writer = csv.writer(f, delimiter=",", lineterminator="\n")
        writer.writerow(["Sentence", "Predicted gender"])
        writer.writerows(zip(translations, predicted))


def _subset_indexes(gold: list[GoldLine], path: str | os.PathLike, what: str) -> list[int]:
    """Index into ``gold`` of each line of a pro/anti file, one per line, as mt_gender pairs them.

    mt_gender scores en_pro.txt on its own, pairing each line with the translation of the same
    English sentence (the last one when the sentence occurs twice). So a pro/anti line maps to
    ONE gold line, the last with the same four columns: the 2019 set's duplicated lines count
    once per pro/anti line (n_pro = n_anti = 1,584), not once per copy in en.txt.
    """
    last: dict[tuple, int] = {g.key: i for i, g in enumerate(gold)}
    out = []
    for g in read_gold(path, what):
        if g.key not in last:
            raise UserError(f"this {what} line is not in the gold file", path=path, line=g.line,
                            fix="pro/anti files must be subsets of the gold file (same four columns)")
        out.append(last[g.key])
    return out


METHODS = ("aligned", "lexicon")
# Which mt_gender the figures follow: what an entity found in the translation but carrying no
# gender becomes. acl2019 (commit 57d8b48, the paper's logs): "neutral", which is correct on
# the 240 neutral-gold Winogender lines; current (5d72d59, 2020-10-06, "fixing neutral bug",
# and mt_gender's HEAD): "unknown", always wrong. Nothing found at all is unknown in both.
REFERENCES = {"current": "mt_gender since 5d72d59 (2020-10-06): no gender feature -> unknown (wrong)",
              "acl2019": "mt_gender at 57d8b48 (ACL 2019 logs): no gender feature -> neutral "
                         "(correct on neutral-gold lines)"}
# the reasons (per method) that mean "entity found, no gender on it"
GENDERLESS = {"no gender feature", "form is the same for both genders and no determiner says which"}


def score_winomt(gold_path, translations_path, lang: str, pro_path=None, anti_path=None,
                 lexicon_path=None, method: str = "aligned", alignments_path=None, save_alignments=None,
                 predictions_path=None, official_rounding: bool = False, reference: str = "current",
                 translations_format: str = "auto") -> dict:
    """Score translations of WinoMT gold sentences into ``lang`` (fr, es, it).

    ``method``: ``aligned`` (mt_gender's: word alignment + spaCy morphology,
    analysis/winomt_aligned.py; ``alignments_path`` reuses saved links, ``save_alignments``
    keeps eflomal's) or ``lexicon`` (profession forms + determiners, no model).
    ``reference``: ``current`` or ``acl2019`` mt_gender semantics (REFERENCES).
    ``translations_format``: auto, plain or mt_gender (read_translations).
    ``predictions_path``: mt_gender's per-sentence CSV. Returns ``acc``, ``delta_g``, ``delta_s``
    (None without pro/anti files), ``f1``/``precision``/``recall`` {male, female}, ``n_unknown``,
    ``n``, ``acc_pro``, ``acc_anti``, ``how`` (how each entity was gendered or why not) and
    ``undecided`` (gold line and reason of every entity predicted unknown or neutral).
    """
    if method not in METHODS:
        raise UserError(f"unknown WinoMT method {method!r}", fix=f"use one of {', '.join(METHODS)}")
    if reference not in REFERENCES:
        raise UserError(f"unknown mt_gender reference {reference!r}", fix=f"use one of {', '.join(REFERENCES)}")
    if (pro_path is None) != (anti_path is None):
        raise UserError("ΔS needs both --pro and --anti", fix="pass both files, or neither")
    gold = read_gold(gold_path)
    translations, fmt = read_translations(translations_path, gold, translations_format)
    pro = _subset_indexes(gold, pro_path, "pro-stereotypical file") if pro_path else None
    anti = _subset_indexes(gold, anti_path, "anti-stereotypical file") if anti_path else None
    missing: set[str] = set()
    if method == "aligned":
        predicted, reasons = predict_aligned(gold, translations, lang, alignments_path, save_alignments)
        tools = {"aligner": "given links" if alignments_path else "eflomal (forward)",
                 "morphology": spacy_model_version(lang)}
    else:
        predicted, reasons, missing = _predict_lexicon(gold, translations, lang, lexicon_path)
        tools = {"lexicon": str(lexicon_path) if lexicon_path else f"analysis/lexicons/{lang}.tsv"}
    if reference == "acl2019":
        predicted = ["neutral" if r in GENDERLESS else p for p, r in zip(predicted, reasons)]
    how = dict(Counter(reasons))
    if predictions_path:
        write_predictions(predictions_path, translations, predicted)
    out = score_predictions([g.gender for g in gold], predicted, pro, anti, official_rounding)
    out.update(lang=lang, method=method, reference=reference, translations_format=fmt, tools=tools, how=how,
               n_neutral=sum(p == "neutral" for p in predicted), missing_professions=sorted(missing),
               n_unaligned=how.get("unaligned", 0) if method == "aligned" else None,
               undecided=[{"line": g.line, "why": r} for g, p, r in zip(gold, predicted, reasons)
                          if p in ("unknown", "neutral")],
               files={"gold": str(gold_path), "translations": str(translations_path)})
    return out


def _predict_lexicon(gold: list[GoldLine], translations: list[str], lang: str, lexicon_path):
    """(prediction, reason) per gold line, and the professions the lexicon lacks."""
    lexicon = load_lexicon(lang, lexicon_path)
    predicted, reasons, missing = [], [], set()
    for g, t in zip(gold, translations):
        p, reason = predict_gender(t, g.profession, g.index, g.sentence, lang, lexicon)
        predicted.append(p)
        reasons.append(reason)
        if reason == "profession not in lexicon":
            missing.add(_profession_key(g.profession))
    if missing:
        log.warning("%d profession(s) missing from the %s lexicon (counted unknown): %s -- add them with "
                    "--lexicon FILE", len(missing), lang, ", ".join(sorted(missing)[:20]))
    return predicted, reasons, missing


def signature(result: dict) -> str:
    """What produced a WinoMT number, sacrebleu-style: protocol, method, tools, rounding."""
    tools = "|".join(f"{k}:{v}" for k, v in result.get("tools", {}).items())
    rounding = "official" if result.get("official_rounding") else "none"
    return (f"protocol:winomt|method:{result.get('method', 'lexicon')}|{tools}|"
            f"reference:{result.get('reference', 'current')}|rounding:{rounding}")


def winomt_rows_for_store(result: dict, checkpoint: str, lang_pair: str, subset: str = "test") -> list[dict]:
    """ResultsStore rows (task ``winomt``, gender ``n/a``) for a score_winomt result."""
    base = {"checkpoint": checkpoint, "task": "winomt", "lang_pair": lang_pair, "subset": subset,
            "gender": "n/a", "n_utts": result["n"], "signature": signature(result)}
    values = {"acc": result["acc"], "delta_g": result["delta_g"], "f1_male": result["f1"]["male"],
              "f1_female": result["f1"]["female"], "n_unknown": result["n_unknown"]}
    if result.get("n_unaligned") is not None:
        values["n_unaligned"] = result["n_unaligned"]
    if result.get("delta_s") is not None:
        values.update(delta_s=result["delta_s"], acc_pro=result["acc_pro"], acc_anti=result["acc_anti"])
    return [{**base, "metric": k, "value": float(v)} for k, v in values.items()]
