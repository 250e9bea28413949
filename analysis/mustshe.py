"""MuST-SHE gender-translation scoring: term coverage, gender accuracy, BLEU on correct/wrong refs.

The counting follows the official MuST-SHE evaluation script (FBK, ``mustshe_acc`` /
``mustshe_gender_accuracy.py``, Gaido, Savoldi et al., COLING 2020), re-implemented here:

* hypotheses and GENDERTERMS are lower-cased; a hypothesis is split on white space;
* GENDERTERMS holds ``correct wrong`` pairs separated by ``;``;
* for each pair, the correct form is looked up among the hypothesis tokens and, if found, that
  token is consumed; then the wrong form is looked up the same way. A pair whose correct AND
  wrong forms both occur counts once as correct and once as wrong (and once as found);
* coverage = found / terms; accuracy = correct / (correct + wrong), and 0 when nothing was
  found (the script's convention; the counts are reported next to it so a reader can tell).

Groups are the CATEGORY column (1F, 1M, 2F, 2M), the gender form (the category's letter:
F/M, i.e. the gender the reference requires) and the speaker's gender (SPEAKER column, which
MuST-SHE spells She/He; GENDER when SPEAKER holds no gender). BLEU against REF and against
WRONG-REF (the paper's Table 3) uses sacreBLEU (13a, mixed case) on the hypotheses as given
(BLEU tokenises by itself).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from analysis.store import ResultsStore
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint
from corpora.base.textfile import read_delimited, read_lines
from corpora.table import normalise_gender

REQUIRED_COLUMNS = ("REF", "WRONG-REF", "CATEGORY", "GENDERTERMS")
CATEGORIES = ("1F", "1M", "2F", "2M")


@dataclass
class MustSheRow:
    """One MuST-SHE segment: what the scoring needs from the TSV."""
    id: str
    category: str                      # 1F, 1M, 2F, 2M
    terms: list[tuple[str, str]]       # (correct, wrong), lower-cased
    ref: str = ""
    wrong_ref: str = ""
    speaker_gender: str = "U"          # F / M / U
    line: int = 0                      # 1-based line in the TSV (for error messages)

    @property
    def form(self) -> str:
        """Gender form the reference requires: the category's letter (F or M)."""
        return self.category[-1:]


@dataclass
class TermCounts:
    """Additive per-row (and per-group) counts of the official protocol."""
    rows: int = 0
    terms: int = 0
    found: int = 0
    correct: int = 0
    wrong: int = 0

    def __iadd__(self, other: "TermCounts") -> "TermCounts":
        self.rows += other.rows
        self.terms += other.terms
        self.found += other.found
        self.correct += other.correct
        self.wrong += other.wrong
        return self

    def scores(self) -> dict:
        """Coverage and accuracy in percent, with the counts they come from."""
        coverage = 100.0 * self.found / self.terms if self.terms else 0.0
        # The official script reports 0 accuracy where no term was found.
        accuracy = 100.0 * self.correct / (self.correct + self.wrong) if self.found else 0.0
        return {"coverage": coverage, "accuracy": accuracy, "rows": self.rows, "terms": self.terms,
                "found": self.found, "correct": self.correct, "wrong": self.wrong}


# --- reading ------------------------------------------------------------------------------
def parse_genderterms(raw: str, path: str | os.PathLike = "<tsv>", line: int | None = None) -> list[tuple[str, str]]:
    """Parse ``"correct wrong;correct wrong"`` into lower-cased pairs; malformed -> UserError."""
    pairs = []
    for item in raw.strip().lower().split(";"):
        words = item.split()
        if len(words) != 2:
            raise UserError(f"malformed GENDERTERMS item {item.strip()!r} in {raw.strip()!r}", path=path, line=line,
                            fix="write each term as `correct wrong` (two words), terms separated by `;`")
        pairs.append((words[0], words[1]))
    return pairs


def read_mustshe_tsv(path: str | os.PathLike) -> list[MustSheRow]:
    """Read a MuST-SHE TSV (header ID, LANG, TALK, SRC, REF, WRONG-REF, SPEAKER, GENDER,
    CATEGORY, TEXT-CATEGORY, GENDERTERMS; only REF, WRONG-REF, CATEGORY, GENDERTERMS required)."""
    # QUOTE_NONE (the default): sentences contain quote characters that must not start a quoted field.
    header, records = read_delimited(path, "\t", what="MuST-SHE TSV", refuse_nul=True, skip_blank=True)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise UserError(f"the MuST-SHE TSV lacks column(s) {', '.join(missing)} (header: {header})", path=path,
                        line=1, fix="use the MuST-SHE release's TSV header (tab-separated)")
    rows = []
    for lineno, rec in records:
        get = lambda name, default="": rec.get(name, default)  # noqa: E731
        category = get("CATEGORY").strip().upper()
        if category not in CATEGORIES:
            raise UserError(f"CATEGORY {get('CATEGORY')!r} is not one of {', '.join(CATEGORIES)}", path=path,
                            line=lineno, fix="use the MuST-SHE categories")
        rows.append(MustSheRow(
            id=get("ID", str(lineno - 1)).strip(), category=category,
            terms=parse_genderterms(get("GENDERTERMS"), path, lineno),
            ref=get("REF"), wrong_ref=get("WRONG-REF"),
            speaker_gender=_speaker_gender(get("SPEAKER"), get("GENDER")), line=lineno))
    if not rows:
        raise UserError("the MuST-SHE TSV has a header but no rows", path=path, fix="pass the full TSV")
    return rows


def _speaker_gender(speaker: str, gender: str) -> str:
    """F/M/U of the speaker. The release puts the speaker's pronoun (She/He) in SPEAKER and the
    referent's gender (F/M) in GENDER; a file whose SPEAKER holds names has the speaker's gender in
    GENDER, so GENDER is only read when SPEAKER says nothing."""
    code, known = normalise_gender(speaker)
    if known and code in ("F", "M"):
        return code
    return normalise_gender(gender)[0]


def read_hypotheses(path: str | os.PathLike, rows: list[MustSheRow]) -> list[str]:
    """Hypotheses aligned with ``rows``: plain text (one line per row, MuST-SHE's convention)
    or ``id<TAB>text`` lines whose ids are the TSV's ID column (any order, optional header)."""
    lines = read_lines(path, "hypothesis file", refuse_nul=True)
    ids = [r.id for r in rows]
    keyed = _as_id_tsv(lines, set(ids), path)
    if keyed is not None:
        missing = [i for i in ids if i not in keyed]
        if missing:
            raise UserError(f"{len(missing)} TSV id(s) have no hypothesis, e.g. {missing[0]!r}", path=path,
                            fix="give one `id<TAB>text` line per MuST-SHE row")
        return [keyed[i] for i in ids]
    if len(lines) != len(rows):
        raise UserError(f"{len(lines)} hypothesis line(s) for {len(rows)} MuST-SHE row(s)", path=path,
                        fix="give one line per TSV row, in the TSV's order (an empty line for an empty output)")
    return lines


def _as_id_tsv(lines: list[str], ids: set[str],
               path: str | os.PathLike = "<hypotheses>") -> dict[str, str] | None:
    """``{id: text}`` when every line is ``id<TAB>text`` with a known id, else None (plain text)."""
    body = lines[1:] if lines and lines[0].split("\t", 1)[0].strip().lower() == "id" else lines
    if not body or not all("\t" in ln for ln in body):
        return None
    pairs = [ln.split("\t", 1) for ln in body]
    if not all(k.strip() in ids for k, _ in pairs):
        return None
    for n, (_, v) in enumerate(pairs):
        if "\t" in v:  # id<TAB>text<TAB>score: the score would be scored as the last word
            raise UserError(f"{v.count(chr(9)) + 2} tab-separated fields on a hypothesis line, expected 2 "
                            "(id<TAB>text)", path=path, line=n + 1 + (len(lines) - len(body)),
                            fix="keep the id and the text only (e.g. cut -f1,2 FILE > FILE.tsv)")
    return {k.strip(): v for k, v in pairs}


def moses_tokenize(hyps: list[str], lang: str) -> list[str]:
    """Moses tokenisation (sacremoses, no XML escaping): the form the official script expects."""
    from sacremoses import MosesTokenizer
    tok = MosesTokenizer(lang=lang)
    return [tok.tokenize(h, escape=False, return_str=True) for h in hyps]


# --- counting -----------------------------------------------------------------------------
def _consume(tokens: list[str], word: str) -> bool:
    """Remove the first occurrence of ``word`` from ``tokens``: each token matches once."""
    try:
        tokens.remove(word)
    except ValueError:
        return False
    return True


def count_terms(hypothesis: str, terms: list[tuple[str, str]]) -> TermCounts:
    """The official per-row counts for one hypothesis and its (correct, wrong) pairs."""
    tokens = hypothesis.strip().lower().split()
    c = TermCounts(rows=1, terms=len(terms))
    for correct, wrong in terms:
        hit_correct = _consume(tokens, correct)
        hit_wrong = _consume(tokens, wrong)
        c.correct += hit_correct
        c.wrong += hit_wrong
        c.found += hit_correct or hit_wrong
    return c


def score_rows(rows: list[MustSheRow], hyps: list[str], bleu: bool = True) -> dict:
    """Score in-memory rows against order-aligned hypotheses (already tokenised if wanted)."""
    if len(rows) != len(hyps):
        raise ValueError(f"{len(hyps)} hypotheses for {len(rows)} rows")
    overall = TermCounts()
    groups: dict[str, dict[str, TermCounts]] = {"by_category": {}, "by_form": {}, "by_speaker_gender": {}}
    per_row = []
    for row, hyp in zip(rows, hyps):
        c = count_terms(hyp, row.terms)
        per_row.append(c)
        overall += c
        for key, value in (("by_category", row.category), ("by_form", row.form),
                           ("by_speaker_gender", row.speaker_gender)):
            groups[key].setdefault(value, TermCounts())
            groups[key][value] += c
    out = {"overall": overall.scores()}
    for key, by in groups.items():
        order = CATEGORIES if key == "by_category" else ("F", "M", "U")
        out[key] = {k: by[k].scores() for k in order if k in by}
    out["counts"] = {"rows": overall.rows, "terms": overall.terms, "found": overall.found,
                     "correct": overall.correct, "wrong": overall.wrong}
    if bleu:
        out["bleu"] = bleu_correct_wrong(rows, hyps)
    return out


def bleu_correct_wrong(rows: list[MustSheRow], hyps: list[str]) -> dict:
    """sacreBLEU against REF and WRONG-REF, overall and per gender form; diff = correct - wrong."""
    from sacrebleu.metrics import BLEU

    metric = BLEU(tokenize="13a")

    def pair(idx):
        h = [hyps[i] for i in idx]
        correct = metric.corpus_score(h, [[rows[i].ref for i in idx]]).score
        wrong = metric.corpus_score(h, [[rows[i].wrong_ref for i in idx]]).score
        return {"correct": correct, "wrong": wrong, "diff": correct - wrong}

    out = pair(range(len(rows)))
    out["by_form"] = {f: pair([i for i, r in enumerate(rows) if r.form == f])
                      for f in ("F", "M") if any(r.form == f for r in rows)}
    out["signature"] = metric.get_signature().format()
    return out


def score_mustshe(tsv_path: str | os.PathLike, hyp_path: str | os.PathLike, tokenize: bool = False,
                  lang: str | None = None) -> dict:
    """Score a hypothesis file on a MuST-SHE TSV (see the module docstring for the protocol).

    ``tokenize`` Moses-tokenises the hypotheses before term matching (the official script expects
    tokenised text); ``lang`` is the target language for the tokeniser (default: from the TSV's
    LANG column, e.g. ``en-fr`` -> ``fr``). Returns ``overall``, ``by_category``, ``by_form``,
    ``by_speaker_gender`` ({coverage, accuracy, counts} in percent), ``bleu`` and ``counts``.
    """
    rows = read_mustshe_tsv(tsv_path)
    hyps = read_hypotheses(hyp_path, rows)
    term_hyps = hyps
    if tokenize:
        lang = lang or _target_lang(tsv_path)
        term_hyps = moses_tokenize(hyps, lang)
    out = score_rows(rows, term_hyps, bleu=False)
    out["bleu"] = bleu_correct_wrong(rows, hyps)
    out["tokenized"] = bool(tokenize)
    out["files"] = {"tsv": str(tsv_path), "hyps": str(hyp_path)}
    return out


def _target_lang(tsv_path: str | os.PathLike) -> str:
    header, records = read_delimited(tsv_path, "\t", what="MuST-SHE TSV", refuse_nul=True, skip_blank=True)
    if "LANG" in header and records:
        value = records[0][1]["LANG"].strip()
        if value:
            return value.split("-")[-1].lower()
    raise UserError("cannot tell the target language for tokenisation (no LANG column)", path=tsv_path,
                    fix="pass --lang fr|it|es")


def score_rows_for_store(result: dict, checkpoint: str, lang_pair: str = "", subset: str = "test") -> list[dict]:
    """ResultsStore rows for a score_mustshe result (task ``mustshe``).

    Convention (read back by the report): ``gender`` is the SPEAKER's gender as everywhere in
    the store (``all``, ``F``, ``M``); metric ``coverage``/``accuracy`` overall, ``coverage:1F``
    ... per category, ``coverage:form-F`` ... per required gender form; ``bleu``, ``bleu_wrong``,
    ``bleu_diff`` for the correct/wrong references.
    """
    base = {"checkpoint": checkpoint, "task": "mustshe", "lang_pair": lang_pair, "subset": subset}
    rows = []

    def add(gender, metric, value, n, signature="protocol:mustshe-acc|lowercase|tok:"
            + ("moses" if result.get("tokenized") else "none")):
        rows.append({**base, "gender": gender, "metric": metric, "value": float(value), "n_utts": n,
                     "signature": signature})

    for m in ("coverage", "accuracy"):
        add("all", m, result["overall"][m], result["overall"]["rows"])
        for cat, s in result["by_category"].items():
            add("all", f"{m}:{cat}", s[m], s["rows"])
        for form, s in result["by_form"].items():
            add("all", f"{m}:form-{form}", s[m], s["rows"])
        for g, s in result["by_speaker_gender"].items():
            if g in ("F", "M"):
                add(g, m, s[m], s["rows"])
    b = result["bleu"]
    n = result["counts"]["rows"]
    add("all", "bleu", b["correct"], n, b["signature"])
    add("all", "bleu_wrong", b["wrong"], n, b["signature"])
    add("all", "bleu_diff", b["diff"], n, b["signature"])
    return rows


def store_mustshe(db, result: dict, name: str, lang_pair: str, subset: str, config: dict, inputs) -> None:
    """Store a score_mustshe result as one run (``score-mustshe``); the same config again adds no run."""
    with ResultsStore(db) as store:
        store.store_run("score-mustshe", config, score_rows_for_store(result, name, lang_pair, subset), name=name,
                        inputs=[file_fingerprint(p) for p in inputs])
