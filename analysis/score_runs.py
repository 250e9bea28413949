"""A decoded run scored per gender: printed, stored in the results DB, written as JSON.

What `gendergap asr finetune|frozen|decode` and `gendergap st decode` (and the sweep's ASR and
ST steps, which call them) do once a model has written its hypotheses. The results DB gets its
rows before the JSON is written, so a failing DB leaves no result JSON behind.
"""
from __future__ import annotations

import csv
import logging
import sys
from pathlib import Path

import pandas as pd

from analysis.mustshe import score_mustshe, store_mustshe
from analysis.scoring import read_speakers, score_files, store_result
from corpora.base.atomic import write_json
from corpora.base.errors import UserError
from corpora.base.textfile import read_delimited
from corpora.utterances import UtteranceTable

log = logging.getLogger(__name__)


def fmt_score(x, ci=None) -> str:
    """A score with its CI for people: 12.34 [10.01, 14.56]; undefined for None."""
    if x is None:
        return "undefined"
    s = f"{x:.2f}"
    if ci is not None:
        s += f" [{ci[0]:.2f}, {ci[1]:.2f}]"
    return s


def print_result(r: dict, out=None) -> None:
    """Two human lines and the signature; the JSON holds everything else."""
    out = out or sys.stdout
    ci = r["ci"]
    norm = f" (norm:{r['normalization']})" if r.get("normalization") else ""
    d = r["delta_rel"]
    print(f"{r['metric'].upper()}{norm}  all {fmt_score(r['all'], ci['all'])}  F {fmt_score(r['F'], ci['F'])}  "
          f"M {fmt_score(r['M'], ci['M'])}  delta_rel {('+' if d and d > 0 else '') + fmt_score(d, ci['delta_rel'])}",
          file=out)
    print(f"n_utts F={r['n_utts']['F']} M={r['n_utts']['M']}  n_speakers F={r['n_speakers']['F']} "
          f"M={r['n_speakers']['M']}", file=out)
    for g in ("F", "M"):
        if r["bootstrap"]["n_resamples"] and r[g] is not None and ci[g] is None:
            print(f"CI for {g}: undefined (only {r['n_speakers'][g]} speaker; not printing a fake interval)", file=out)
    print(f"signature: {r['signature']}", file=out)


def speakers_of_csv(test_csv: str, table: str | list[str] | None):
    """id/speaker/gender rows for every id of a SpeechBrain test CSV (from ``table`` when given,
    else from the CSV's spk_id/gender columns), checked BEFORE any training (missing ids,
    unknown genders are UserErrors naming the file)."""
    header, records = read_delimited(test_csv, ",", csv.QUOTE_MINIMAL, what="SpeechBrain test CSV")
    if "ID" not in header:
        raise UserError("no ID column", path=test_csv, line=1, fix="give a SpeechBrain CSV")
    ids = [r["ID"] for _, r in records]
    if table:   # one table, or several (--table repeated) merged as corpora.merge does
        frame = UtteranceTable.load(table, validate=False)   # id/speaker/gender are enough here
        return read_speakers(frame.rows, ids, source=frame.source)
    if not {"spk_id", "gender"} <= set(header):
        raise UserError("the test CSV has no spk_id/gender columns for per-gender scoring", path=test_csv, line=1,
                        fix="pass --table with the utterance table the CSV was exported from")
    frame = pd.DataFrame({"id": ids, "speaker": [r["spk_id"] for _, r in records],
                          "gender": [r["gender"] for _, r in records]}, dtype=object)
    return read_speakers(frame, ids, source=test_csv)


def score_asr_run(meta: dict, speakers, *, db: str | None, bootstrap: int, seed: int, checkpoint: str,
                  task: str, subset: str, config: dict) -> dict:
    """Score the decoded files (WER for F, M and all with speaker-level CIs), print the result, store
    its rows in ``db`` (if any) and write NAME.wer.json next to the hypotheses; returns the result."""
    result = score_files("wer", meta["refs"], meta["hyps"], speakers, bootstrap=bootstrap, seed=seed,
                         normalization="none")
    result["asr"] = {k: meta.get(k) for k in ("text_norm_name", "oov", "checkpoint", "model")}
    print_result(result)
    if db:  # the DB first: a failing --db step leaves no result JSON behind
        run_id = store_result(db, result, checkpoint=checkpoint, task=task, subset=subset,
                              config={**config, "refs": meta["refs"], "hyps": meta["hyps"],
                                      "text_norm": meta.get("text_norm_name"), "bootstrap": bootstrap,
                                      "seed": seed})
        log.info("stored run %d in %s (%s, %s)", run_id, db, checkpoint, task)
    write_json(Path(meta["hyps"]).with_name(Path(meta["hyps"]).name.replace(".hyp.tsv", ".wer.json")), result)
    return result


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def score_st_run(*, refs: str, out: str, model: str, meta: dict, run: dict, test: str | list[str], corpus: str | None,
                 test_split: str | None, runtime: dict, mustshe: str | None, bootstrap: int, seed: int,
                 db: str | None, name: str | None, subset: str, task: str) -> dict:
    """Score an ST model's decoded test set (``out``, against ``refs``): BLEU per gender (and
    MuST-SHE gender accuracy with ``mustshe``), printed, stored in ``db`` (if any), written to OUT.json;
    returns what OUT.json holds."""
    name = name or Path(str(meta.get("ssl_checkpoint") or meta.get("feature_index") or model)).stem
    config = {"st_model": str(Path(model).resolve()), "layer": meta.get("layer"),
              "runtime": runtime,
              "preset": meta.get("preset_name"), "beam": run["beam"],
              "test": [str(Path(t).resolve()) for t in test] if isinstance(test, list) else str(Path(test).resolve()),
              "corpus": corpus, "test_split": test_split, "bootstrap": bootstrap, "seed": seed}
    return score_translation(refs=refs, hyps=out, speakers=test, lang_pair=f"{meta['src_lang']}-{meta['tgt_lang']}",
                             mustshe=mustshe, bootstrap=bootstrap, seed=seed, db=db, checkpoint=name, subset=subset,
                             task=task, config=config, written={"model": str(Path(model).resolve()), "decode": run},
                             out_json=str(out) + ".json")


def score_translation(*, refs: str, hyps: str, speakers, lang_pair: str, mustshe: str | None, bootstrap: int,
                      seed: int, db: str | None, checkpoint: str, subset: str, task: str, config: dict,
                      written: dict, out_json: str) -> dict:
    """BLEU per gender of ``hyps`` against ``refs`` (``speakers``: the utterance table, or its id/speaker/
    gender rows), and MuST-SHE gender accuracy with ``mustshe``: printed, stored in ``db`` (if any) under
    ``task``, written to ``out_json`` ({"bleu", then ``written``'s keys, then "mustshe"}); returns that."""
    result = score_files("bleu", refs, hyps, speakers, bootstrap=bootstrap, seed=seed)
    ci = result["ci"]
    print(f"BLEU {lang_pair}: all {_num(result['all'])}  F {_num(result['F'])}  M {_num(result['M'])}  "
          f"delta_rel {_num(result['delta_rel'])}%  (CI all {ci['all']}; {result['signature']})")
    written = {"bleu": result, **written}
    if mustshe:
        ms = score_mustshe(mustshe, hyps)
        written["mustshe"] = ms
        o = ms["overall"]
        print(f"MuST-SHE: coverage {o['coverage']:.1f}%  accuracy {o['accuracy']:.1f}%  "
              f"(terms {o['terms']}, found {o['found']}, correct {o['correct']}, wrong {o['wrong']})")
    if db:  # the DB first: a failing --db step leaves no result JSON behind
        run_id = store_result(db, result, checkpoint=checkpoint, task=task, lang_pair=lang_pair, subset=subset,
                              config=config)
        log.info("stored BLEU run %d in %s", run_id, db)
        if mustshe:
            store_mustshe(db, written["mustshe"], checkpoint, lang_pair, subset,
                          {**config, "mustshe": str(Path(mustshe).resolve())}, [mustshe, hyps])
    write_json(out_json, written)
    return written
