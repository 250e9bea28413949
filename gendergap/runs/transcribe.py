"""`asr transcribe` and `asr export` as keyword functions: downstream_asr loads any local speech model
and transcribes (or translates) an utterance table, analysis scores it per gender as `asr decode`
does (WER) or as `st decode` does (BLEU, MuST-SHE gender accuracy) and stores the rows;
downstream_asr.export writes a run as an EncoderASR folder. The CLI leaves and the sweep's
asr-released steps call these same functions."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from downstream_asr.export import export_run
from gendergap.runs.leaf import cli_leaf


@cli_leaf("asr transcribe")
def asr_transcribe(*, model: str, table: str | list[str], out: str, split: str | None = "test",
                   corpus: str | None = None, name: str | None = None, language: str | None = None,
                   task: str = "transcribe", tgt: str | None = None, max_new_tokens: int | None = None,
                   batch_seconds: float = 60.0, max_batch_size: int = 32, no_progress: bool = False,
                   device: str = "auto", precision: str = "fp32", trust_checkpoint: bool = False,
                   db: str | None = None, subset: str | None = None, mustshe: str | None = None,
                   per_corpus: bool = False, bootstrap: int = 1000, seed: int = 12345) -> dict:
    """Transcribe ``table``'s rows with the model folder ``model``, then score WER per gender as
    `asr decode` does (rows: task asr-released, asr-e2e for a run directory); ``task`` translate
    scores BLEU per gender against the table's ``tgt_text_<tgt>`` (and MuST-SHE gender accuracy
    with ``mustshe``) as `st decode` does (task st-released). Returns the WER result, or what
    NAME.bleu.json holds. ``per_corpus``: the table's corpora scored apart, rows NAME@CORPUS (the
    model runs once); returns {corpus: WER result}."""
    from analysis.score_runs import score_asr_run, score_translation
    from analysis.scoring import read_speakers
    from corpora.table import table_source
    from downstream_asr.transcribe import (
        check_options,
        result_config,
        result_task,
        select_rows,
        source_language,
        split_by_corpus,
        transcribe_rows,
    )

    check_options(task=task, tgt=tgt, mustshe=mustshe, batch_seconds=batch_seconds, max_batch_size=max_batch_size,
                  per_corpus=per_corpus)
    rows = select_rows(table, split or None, corpus)
    references, lang_pair = "text", None
    if task == "translate":   # every row's translation and the language pair, before the model runs
        from downstream_st.data import require_target, target_column
        rows = require_target(rows, tgt, table_source(table))
        references, lang_pair = target_column(tgt), f"{source_language(rows, language)}-{tgt}"
    # checked before the model runs too: an unknown gender is found in a second
    speakers = read_speakers(rows[["id", "speaker", "gender"]], rows["id"].tolist(), source=table_source(table))
    meta, m = transcribe_rows(rows, model=model, out=out, name=(split or "all") if name is None else name,
                              language=language, task=task, max_new_tokens=max_new_tokens,
                              batch_seconds=batch_seconds, max_batch_size=max_batch_size, progress=not no_progress,
                              device=device, precision=precision, trust=trust_checkpoint, references=references)
    print(f"wrote {meta['hyps']} and {meta['refs']} ({meta['n_utts']} utterances, {meta['batches_run']} of "
          f"{meta['batches']} batches run now)")
    stored = dict(db=db, bootstrap=bootstrap, seed=seed, checkpoint=name or m.name, task=result_task(m, task),
                  subset=subset or split or "all",
                  config=result_config(m, meta, model=model, batch_seconds=batch_seconds, table=table, split=split,
                                       corpus=corpus))
    if task == "transcribe" and per_corpus:   # one row per model x corpus x gender, as the g8a9 study reports
        return {corpus: score_asr_run(files, speakers, **{**stored, "checkpoint": f"{stored['checkpoint']}@{corpus}",
                                                          "config": {**stored["config"], "corpus": corpus}})
                for corpus, files in split_by_corpus(meta, rows).items()}
    if task == "transcribe":
        return score_asr_run(meta, speakers, **stored)
    hyps = Path(meta["hyps"])
    stored["config"].update(refs=meta["refs"], hyps=meta["hyps"], bootstrap=bootstrap, seed=seed)
    return score_translation(refs=meta["refs"], hyps=str(hyps), speakers=speakers, lang_pair=lang_pair,
                             mustshe=mustshe, written={"model": str(Path(model).resolve()), "transcripts": meta},
                             out_json=str(hyps.with_name(hyps.name.replace(".hyp.tsv", ".bleu.json"))), **stored)


@cli_leaf("asr export")
def asr_export(*, run: str, out: str, registry: str | None = None, trust_checkpoint: bool = False) -> dict:
    """Export the `asr finetune` run ``run`` as an EncoderASR folder ``out`` (the `asr export` leaf)."""
    cmd = "gendergap " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["asr"] else None
    commands = [f"gendergap asr finetune ... --out {run}  (hyper-parameters: {run}/run.json)"] + ([cmd] if cmd else [])
    meta = export_run(run, out, trust=trust_checkpoint, registry=registry, commands=commands)
    print(f"wrote {meta['out']}: EncoderASR.from_hparams(source={meta['out']!r}) loads it; model card README.md")
    return meta
