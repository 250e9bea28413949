"""A system's translations scored on MuST-SHE or WinoMT (`gendergap score mustshe|winomt`).

Each scorer reads its files, stores its rows in the results DB when one is given (before the
JSON: a failing DB leaves no JSON behind), writes the JSON and returns the result; the summary
functions give the lines the command prints.
"""
from __future__ import annotations

from analysis.mustshe import score_mustshe, score_rows_for_store
from analysis.store import ResultsStore
from analysis.winomt import score_winomt, signature, winomt_rows_for_store
from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from corpora.base.provenance import file_fingerprint


def store_translation_scores(db: str, kind: str, config: dict, rows: list[dict], inputs: list[str],
                             checkpoint: str | None) -> None:
    """``rows`` as one run of ``kind`` in the results DB, the input files fingerprinted; the same
    ``config`` (the command's options) again adds no run."""
    if not checkpoint:
        raise UserError("--db needs --checkpoint", fix="name the model the translations come from")
    with ResultsStore(db) as store:
        store.store_run(kind, config, rows, inputs=[file_fingerprint(p) for p in inputs])


def score_mustshe_files(*, tsv: str, hyps: str, tokenize: bool = False, lang: str | None = None, json: str,
                        db: str | None = None, checkpoint: str | None = None, lang_pair: str = "",
                        subset: str = "test", config: dict | None = None) -> dict:
    """MuST-SHE scores of ``hyps`` on ``tsv`` (analysis.mustshe.score_mustshe), stored and written to ``json``."""
    result = score_mustshe(tsv, hyps, tokenize=tokenize, lang=lang)
    if db:
        store_translation_scores(db, "score-mustshe", config or {},
                                 score_rows_for_store(result, checkpoint or "", lang_pair, subset), [tsv, hyps],
                                 checkpoint)
    write_json(json, result)
    return result


def mustshe_summary(result: dict) -> str:
    """Coverage, accuracy and correct/wrong-reference BLEU overall, then coverage and accuracy per category."""
    o, b = result["overall"], result["bleu"]
    lines = [f"coverage {o['coverage']:.2f}  accuracy {o['accuracy']:.2f}  "
             f"BLEU correct {b['correct']:.2f} wrong {b['wrong']:.2f} diff {b['diff']:+.2f}  ({b['signature']})"]
    lines += [f"  {cat}: coverage {s['coverage']:.2f}  accuracy {s['accuracy']:.2f}  ({s['found']}/{s['terms']} found)"
              for cat, s in result["by_category"].items()]
    return "\n".join(lines)


def score_winomt_files(*, gold: str, translations: str, lang: str, translations_format: str = "auto",
                       pro: str | None = None, anti: str | None = None, method: str = "aligned",
                       alignments: str | None = None, save_alignments: str | None = None, lexicon: str | None = None,
                       reference: str = "current", official_rounding: bool = False, predictions: str | None = None,
                       json: str, db: str | None = None, checkpoint: str | None = None, lang_pair: str = "",
                       subset: str = "test", config: dict | None = None) -> dict:
    """WinoMT scores of ``translations`` against ``gold`` (analysis.winomt.score_winomt), stored and
    written to ``json``; the pair stored defaults to en-``lang``."""
    if method == "lexicon" and (alignments or save_alignments):
        raise UserError("--alignments/--save-alignments belong to --method aligned",
                        fix="drop them, or use --method aligned")
    result = score_winomt(gold, translations, lang, pro_path=pro, anti_path=anti, lexicon_path=lexicon,
                          method=method, alignments_path=alignments, save_alignments=save_alignments,
                          predictions_path=predictions, official_rounding=official_rounding, reference=reference,
                          translations_format=translations_format)
    if db:
        inputs = [p for p in (gold, translations, pro, anti, lexicon, alignments) if p]
        store_translation_scores(db, "score-winomt", config or {},
                                 winomt_rows_for_store(result, checkpoint or "", lang_pair or f"en-{lang}", subset),
                                 inputs, checkpoint)
    write_json(json, result)
    return result


def winomt_summary(result: dict) -> str:
    """Accuracy, F1 per gender, ΔG, ΔS and the unknowns in one line; the signature in the next."""
    ds = "n/a" if result["delta_s"] is None else f"{result['delta_s']:+.1f}"
    return (f"acc {result['acc']:.1f}  F1 male {result['f1']['male']:.1f} female {result['f1']['female']:.1f}  "
            f"ΔG {result['delta_g']:+.1f}  ΔS {ds}  unknown {result['n_unknown']}/{result['n']}"
            + (f"  neutral {result['n_neutral']}" if result["reference"] == "acl2019" else "")
            + (f" (unaligned {result['n_unaligned']})" if result.get("n_unaligned") is not None else "")
            + f"\n  {signature(result)}")
