"""Per-gender scores from files: references, hypotheses, the utterance table -> one JSON dict.

Inputs: references and hypotheses as ``id<TAB>text`` lines (UTF-8; an optional ``id<TAB>text``
header; a bare ``id`` is an empty text), and an utterance table (corpora.table) giving
``speaker`` and ``gender`` per id. Output (``score_files``): corpus-level scores for all, F
and M (total statistics, never a mean of per-utterance scores), Δrel, speaker-level
bootstrap CIs, counts, the signature, and the per-speaker additive statistics that paired
comparisons (analysis/compare.py) need.
"""
from __future__ import annotations

import logging
import os
from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from analysis.bootstrap import GENDERS, check_resamples, draw_counts, percentile_ci, resample_scores, speaker_sums
from analysis.delta import delta_rel
from analysis.metrics import get_metric
from analysis.store import ResultsStore
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint
from corpora.base.textfile import read_lines
from corpora.table import normalise_genders
from corpora.utterances import UtteranceTable

log = logging.getLogger(__name__)

DEFAULT_SEED = 12345  # sacrebleu's default bootstrap seed; any int, 0 included, is a real seed
DEFAULT_RESAMPLES = 1000
# sacrebleu tokenisers that run from the installed packages. Its others (spm, flores101, flores200,
# spBLEU-1K) download a SentencePiece model into the home folder when built: gendergap runs offline
# and writes only where it is told, so they are refused (an allowlist: a future download is refused too).
OFFLINE_TOKENIZERS = ("13a", "intl", "none", "char", "zh", "ja-mecab", "ko-mecab")


def check_tokenizer(tokenize, path=None) -> str:
    """``tokenize`` if it is one of OFFLINE_TOKENIZERS, else a UserError (before sacrebleu builds it:
    building a SentencePiece tokeniser is what downloads). ``path``: the file that named it, if any."""
    if tokenize not in OFFLINE_TOKENIZERS:
        why = "downloads a model, and scoring runs offline" if str(tokenize).startswith(("spm", "flores", "spBLEU")) \
            else "is not a sacrebleu tokeniser gendergap runs"
        raise UserError(f"tokenizer {str(tokenize)[:40]!r} {why}", path=path,
                        fix="use one of " + ", ".join(OFFLINE_TOKENIZERS) + " (13a: sacrebleu's default)")
    return tokenize


# --- reading ------------------------------------------------------------------------------
def read_texts(path: str | os.PathLike, what: str, column: int | None = None) -> dict[str, tuple[str, int]]:
    """Read ``id<TAB>text`` lines into {id: (text, line number)}, in file order.

    ``what`` ("references"/"hypotheses") goes into error messages. Bad input -- a missing or
    empty file, non-UTF-8 bytes, a NUL byte, an empty id, a duplicate id, more than two
    tab-separated fields -- is a UserError naming the line. Decoders often write
    ``id<TAB>text<TAB>score``: read as two fields, the score would be glued to the last word and
    scored as a wrong word, so a third field is refused unless ``column`` (1-based, >= 2) names
    the field that holds the text (the id is always field 1).
    """
    path = Path(path)
    lines = read_lines(path, f"{what} file", refuse_nul=True)
    if column is not None and column < 2:
        raise UserError(f"text column {column} is not a text column (field 1 is the id)", path=path,
                        fix="count fields from 1: id<TAB>text<TAB>score has its text in column 2")
    out: dict[str, tuple[str, int]] = {}
    for lineno, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) == 1 and len(fields[0].split()) > 1:  # "utt1 hello world": space-separated, not id<TAB>text
            raise UserError(f"no tab on this line of the {what}: {line[:40]!r}", path=path, line=lineno,
                            fix="write id<TAB>text (a Kaldi-style 'id text' file: replace the first space with "
                                "a tab)")
        if column is None and len(fields) > 2:
            raise UserError(f"{len(fields)} tab-separated fields on this line of the {what}, expected 2 "
                            f"(id<TAB>text): {line[:60]!r}", path=path, line=lineno,
                            fix="keep the id and the text only (e.g. cut -f1,2 FILE > FILE.tsv)"
                                + (", or name the text's column with --hyp-column N" if what == "hypotheses"
                                   else ""))
        if column is not None and len(fields) > 1 and len(fields) < column:
            raise UserError(f"{len(fields)} tab-separated field(s) on this line of the {what}, but the text is "
                            f"read from column {column}", path=path, line=lineno,
                            fix="give every line the same columns, or name the right one")
        uid = fields[0].strip()
        utt = fields[(column or 2) - 1] if len(fields) > 1 else ""
        if lineno == 1 and uid.lower() == "id" and utt.strip().lower() in ("text", "tgt_text", "hyp", "ref"):
            continue  # an optional header
        if not uid:
            raise UserError(f"empty id in the {what}", path=path, line=lineno,
                            fix="each line is id<TAB>text with a non-empty id")
        if uid in out:
            raise UserError(f"duplicate id {uid!r} in the {what} (first on line {out[uid][1]})", path=path,
                            line=lineno, fix="each id must appear once; drop or rename the repeated line")
        out[uid] = (utt, lineno)
    if not out:
        raise UserError(f"empty {what} file", path=path, line=1, fix="write one id<TAB>text line per utterance")
    return out


def _listing(ids: Sequence[str], n: int = 5) -> str:
    shown = ", ".join(repr(i) for i in list(ids)[:n])
    return shown + (f" and {len(ids) - n} more" if len(ids) > n else "")


def read_speakers(table: str | os.PathLike | pd.DataFrame, ids: Sequence[str],
                  source: str | os.PathLike | None = None) -> pd.DataFrame:
    """``id, speaker, gender`` (F/M) for ``ids`` from an utterance table (path or DataFrame).

    Ids missing from the table, a scored speaker without a known gender (U) and a speaker
    with different genders on different rows are UserErrors naming the table and the line.
    """
    if isinstance(table, pd.DataFrame):
        df, source = table, source or "<table>"
    else:   # one table or several (merged); a minimal id/speaker/gender table is enough here
        loaded = UtteranceTable.load(table, validate=False)
        df, source = loaded.rows, loaded.source
    missing_cols = [c for c in ("id", "speaker", "gender") if c not in df.columns]
    if missing_cols:
        raise UserError(f"the utterance table has no column(s) {', '.join(missing_cols)}", path=source, line=1,
                        fix="scoring needs id, speaker and gender per utterance (see corpora/table.py)")
    df = df[["id", "speaker", "gender"]].astype(str).reset_index(drop=True)
    df["line"] = np.arange(len(df)) + 2  # header is line 1
    df["gender"] = normalise_genders(df["gender"], source)
    dup = df["id"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise UserError(f"duplicate id {df['id'][i]!r} in the utterance table", path=source, line=i + 2,
                        fix="ids must be unique")
    df = df.set_index("id", drop=False)
    absent = [i for i in ids if i not in df.index]
    if absent:
        raise UserError(f"{len(absent)} scored id(s) are not in the utterance table: {_listing(absent)}",
                        path=source, fix="score against the table the references were exported from")
    sub = df.loc[list(ids)]
    sub = sub.assign(speaker=sub["speaker"].str.strip())
    if (sub["speaker"] == "").any():
        row = sub[sub["speaker"] == ""].iloc[0]
        raise UserError(f"utterance {row['id']!r} has no speaker", path=source, line=int(row["line"]),
                        fix="speaker-level CIs need a speaker id on every scored utterance")
    genders = sub.groupby("speaker")["gender"].agg(lambda s: sorted(set(s)))
    mixed = genders[genders.map(len) > 1]
    if len(mixed):
        spk = mixed.index[0]
        line = int(sub[sub["speaker"] == spk]["line"].min())
        raise UserError(f"speaker {spk!r} has genders {mixed.iloc[0]} on different rows", path=source, line=line,
                        fix="fix the metadata so each speaker has one gender")
    unknown = sub[sub["gender"] == "U"]
    if len(unknown):
        spk = unknown["speaker"].iloc[0]
        n_spk = unknown["speaker"].nunique()
        raise UserError(f"speaker {spk!r} has no gender (U){f' (and {n_spk - 1} more speakers)' if n_spk > 1 else ''}"
                        f"; per-gender scores need F or M", path=source, line=int(unknown["line"].iloc[0]),
                        fix="set the speaker's gender in the table, or leave their utterances out of the references")
    return sub[["id", "speaker", "gender"]].reset_index(drop=True)


def align_texts(refs: dict, hyps: dict, refs_path, hyps_path) -> tuple[list[str], list[str], list[str]]:
    """(ids, reference texts, hypothesis texts) in reference order; mismatched ids are UserErrors."""
    extra = [i for i in hyps if i not in refs]
    if extra:
        raise UserError(f"{len(extra)} hypothesis id(s) are not in the references: {_listing(extra)}",
                        path=hyps_path, line=hyps[extra[0]][1],
                        fix=f"score against the references of the same test set ({refs_path})")
    lacking = [i for i in refs if i not in hyps]
    if lacking:
        raise UserError(f"{len(lacking)} reference id(s) have no hypothesis: {_listing(lacking)}", path=hyps_path,
                        fix="decode every utterance; write `id<TAB>` (empty text) for an empty output")
    ids = list(refs)
    return ids, [refs[i][0] for i in ids], [hyps[i][0] for i in ids]


# --- scoring ------------------------------------------------------------------------------
def score_utterances(metric, refs: Sequence[str], hyps: Sequence[str], speakers: Sequence[str],
                     genders: Sequence[str], *, bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
                     level: float = 0.95) -> dict:
    """Score in-memory texts. ``metric`` is a name or an analysis.metrics object; genders are F/M."""
    if isinstance(metric, str):
        metric = get_metric(metric)
    stats = metric.utterance_stats(refs, hyps)
    return score_stats(metric, stats, speakers, genders, bootstrap=bootstrap, seed=seed, level=level)


def score_stats(metric, stats: np.ndarray, speakers: Sequence[str], genders: Sequence[str], *,
                bootstrap: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED, level: float = 0.95) -> dict:
    """The result dict from per-utterance statistic rows (see ``score_files`` for its keys)."""
    bootstrap = check_resamples(bootstrap, "bootstrap")
    genders = list(genders)
    speakers = [str(s) for s in speakers]
    if len(speakers) != len(genders) or len(speakers) != len(stats):
        raise ValueError(f"{len(stats)} stat rows, {len(speakers)} speakers, {len(genders)} genders")
    bad = sorted({g for g in genders if g not in GENDERS})
    if bad:
        raise UserError(f"gender(s) {bad} are not F or M", fix="per-gender scores need F or M on every utterance")
    spk_ids, spk_sums = speaker_sums(stats, speakers)
    spk_gender = _speaker_gender(speakers, genders)
    spk_n = pd.Series(list(speakers), dtype=str).value_counts()
    by_gender = {g: [j for j, s in enumerate(spk_ids) if spk_gender[s] == g] for g in GENDERS}
    spk_stats = {g: spk_sums[by_gender[g]] for g in GENDERS}

    totals = {g: spk_stats[g].sum(0) for g in GENDERS}
    totals["all"] = totals["F"] + totals["M"]
    n_spk = {g: len(by_gender[g]) for g in GENDERS}
    n_utt = {g: genders.count(g) for g in GENDERS}
    point = {g: (metric.score(totals[g]) if n_spk[g] else None) for g in GENDERS}
    point["all"] = metric.score(totals["all"])
    point["delta_rel"] = delta_rel(point["F"], point["M"])

    warnings = []
    for g, word in (("F", "female"), ("M", "male")):
        if n_spk[g] == 0:
            warnings.append(f"no {word} speakers: {g} and delta_rel are undefined (null)")
    ci = _speaker_ci(metric, spk_stats, n_spk, bootstrap=bootstrap, seed=seed, level=level, warnings=warnings)
    for w in warnings:
        log.warning(w)

    signature = metric.signature + (f"|ci:speaker-bootstrap:{bootstrap}|level:{level:g}|seed:{seed}"
                                    if bootstrap else "|ci:none")
    return {
        "metric": metric.name,
        "all": point["all"], "F": point["F"], "M": point["M"], "delta_rel": point["delta_rel"],
        "n_utts": {**n_utt, "all": len(genders)},
        "n_speakers": {**n_spk, "all": len(spk_ids)},
        "ci": ci,
        "ci_level": level,
        "bootstrap": {"n_resamples": int(bootstrap), "seed": int(seed), "unit": "speaker",
                      "strata": "gender", "interval": "percentile"},
        "signature": signature,
        "normalization": getattr(metric, "normalization", None),
        "stat_names": list(metric.stat_names),
        "totals": {k: [int(x) for x in v] for k, v in totals.items()},
        "speaker_stats": {s: {"gender": spk_gender[s], "n_utts": int(spk_n[s]),
                              "stats": [int(x) for x in spk_sums[j]]} for j, s in enumerate(spk_ids)},
        "warnings": warnings,
        "versions": {p: metadata.version(p) for p in ("jiwer", "sacrebleu", "numpy")},
    }


def _speaker_gender(speakers: list[str], genders: list[str]) -> dict[str, str]:
    """{speaker: gender}; a speaker listed with both genders is a UserError."""
    spk_gender = dict(zip(speakers, genders))
    if len(spk_gender) != len(set(zip(speakers, genders))):
        spk = next(s for s in spk_gender if len({g for s2, g in zip(speakers, genders) if s2 == s}) > 1)
        raise UserError(f"speaker {spk!r} has both genders", fix="each speaker must have one gender")
    return spk_gender


def _speaker_ci(metric, spk_stats: dict, n_spk: dict[str, int], *, bootstrap: int, seed: int, level: float,
                warnings: list[str]) -> dict[str, list | None]:
    """Percentile CIs of F, M, all and delta_rel from a speaker bootstrap stratified by gender
    (all None without ``bootstrap``); a gender with one speaker gets none, said in ``warnings``."""
    ci: dict[str, list | None] = {k: None for k in ("F", "M", "all", "delta_rel")}
    if not bootstrap:
        return ci
    counts = draw_counts(n_spk, bootstrap, seed)
    res = resample_scores(metric, spk_stats, counts)
    for k in ci:
        interval = percentile_ci(res[k], level)
        ci[k] = list(interval) if interval else None
    for g, word in (("F", "female"), ("M", "male")):
        if n_spk[g] == 1:
            # One speaker resampled is that speaker every time: the interval would be a point.
            ci[g] = ci["delta_rel"] = ci["all"] = None
            warnings.append(f"only 1 {word} speaker: the speaker-level CI is undefined for {g}, all and "
                            f"delta_rel (null); a bootstrap over speakers needs at least 2 per gender")
    return ci


def score_files(metric: str, refs: str | os.PathLike, hyps: str | os.PathLike,
                table: str | os.PathLike | pd.DataFrame, *, bootstrap: int = DEFAULT_RESAMPLES,
                seed: int = DEFAULT_SEED, normalization: str = "none", tokenize: str = "13a",
                lowercase: bool = False, level: float = 0.95, hyp_column: int | None = None) -> dict:
    """Score a hypothesis file against references, per gender, with speaker-level CIs.

    ``metric``: "wer" (jiwer, ``normalization`` from analysis/normalize.py), "bleu" or "chrf"
    (sacrebleu, ``tokenize``/``lowercase``). Scores are in percent. The dict has ``metric``,
    ``all``, ``F``, ``M``, ``delta_rel`` (None when undefined), ``n_utts`` and ``n_speakers``
    ({F, M, all}), ``ci`` ({F, M, all, delta_rel}: [lo, hi] or None), ``signature``,
    ``stat_names``, ``totals`` (summed stats per gender), ``speaker_stats``
    ({speaker: {gender, n_utts, stats}}), ``warnings``, ``inputs`` (file fingerprints).
    ``hyp_column``: the hypotheses' text field (1-based) when they have more than two.
    """
    m = get_metric(metric, normalization=normalization, tokenize=check_tokenizer(tokenize), lowercase=lowercase)
    ref_texts = read_texts(refs, "references")
    hyp_texts = read_texts(hyps, "hypotheses", hyp_column)
    ids, ref_list, hyp_list = align_texts(ref_texts, hyp_texts, refs, hyps)
    spk = read_speakers(table, ids)
    result = score_utterances(m, ref_list, hyp_list, spk["speaker"].tolist(), spk["gender"].tolist(),
                              bootstrap=bootstrap, seed=seed, level=level)
    result["inputs"] = {"refs": file_fingerprint(refs), "hyps": file_fingerprint(hyps)}
    if not isinstance(table, pd.DataFrame):
        result["inputs"]["table"] = file_fingerprint(table)
    result["options"] = {"normalization": normalization, "tokenize": tokenize, "lowercase": lowercase}
    if hyp_column is not None:
        result["options"]["hyp_column"] = hyp_column
    return result


# --- the results store --------------------------------------------------------------------
def score_rows(result: dict, checkpoint: str, task: str, lang_pair: str = "", subset: str = "test") -> list[dict]:
    """Rows for ``analysis.store.ResultsStore.add_scores``: F, M, all and delta_rel.

    The Δrel row has ``gender="delta_rel"`` and the metric it is the gap of (``wer``/``bleu``).
    Undefined scores (a gender without speakers) produce no row; an undefined CI gives NULLs.
    """
    rows = []
    for key in ("F", "M", "all", "delta_rel"):
        value = result.get(key)
        if value is None:
            continue
        ci = (result.get("ci") or {}).get(key)
        n_key = "all" if key == "delta_rel" else key
        rows.append({"checkpoint": checkpoint, "task": task, "lang_pair": lang_pair, "subset": subset,
                     "gender": key, "metric": result["metric"], "value": float(value),
                     "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                     "n_utts": result["n_utts"][n_key], "n_speakers": result["n_speakers"][n_key],
                     "signature": result["signature"]})
    return rows


def store_result(db: str | os.PathLike, result: dict, *, checkpoint: str, task: str, lang_pair: str = "",
                 subset: str = "test", config: dict | None = None) -> int:
    """Write ``result`` to the results DB as one finished run; returns the run id.

    The run's config holds the scoring options and input files, so ``score compare --db`` can
    re-derive the per-speaker statistics and the same config re-scored replaces its rows.
    """
    config = {"metric": result["metric"], "checkpoint": checkpoint, "task": task, "lang_pair": lang_pair,
              "subset": subset, "signature": result["signature"], **(config or {})}
    inputs = list((result.get("inputs") or {}).values())
    rows = score_rows(result, checkpoint, task, lang_pair, subset)
    with ResultsStore(db) as store:
        return store.store_run(f"score-{result['metric']}", config, rows, name=checkpoint,
                               seed=result["bootstrap"]["seed"], inputs=inputs)
