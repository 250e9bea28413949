"""An utterance table through any speech recogniser (downstream_asr.recognisers), batch by batch:
``select_rows`` picks the rows, ``transcribe_table`` transcribes them in batches by length into
NAME.hyp.tsv / NAME.ref.tsv / NAME.json, resuming from its partial file after a kill; the steps of
`asr transcribe` (options, one table per corpus, the result row's task and config) follow.

    model = load_model("models/whisper-tiny", device="cpu", language="fr")
    meta = transcribe_table(model, select_rows("table.tsv", "test", None), "out/", name="test")
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from corpora.base.atomic import write_text
from corpora.base.boundary import parse_json
from corpora.base.errors import UserError
from corpora.base.textfile import read_lines
from downstream_asr.decode import write_transcripts
from downstream_asr.recognisers import Transcriber, clean, load_model
from downstream_asr.text import TextNorm, normalise_text
from ssl_pretrain.device import device_and_precision

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- a table, batch by batch

def select_rows(table, split: str | None, corpus: str | None):
    """The utterance table's rows to transcribe (``split``, ``corpus``), in table order, with absolute audio."""
    from corpora.utterances import UtteranceTable
    rows = UtteranceTable.load(table)
    for col, value in (("split", split), ("corpus", corpus)):
        if value:
            rows = rows.select(**{col: value}).nonempty(f"{col} {value!r}", f"check --{col} (the table's {col} column)")
    return rows.audio_rows()


def _read_partial(path: Path, header: dict) -> dict[str, str]:
    """Hypotheses of the batches a killed run finished (one JSON line per batch, fsync'ed). A last line
    cut by the kill is ignored; a file written for another model, table or option is started over."""
    done: dict[str, str] = {}
    if not os.path.lexists(path):
        return done
    try:
        lines = read_lines(path, "partial transcripts", max_bytes=1 << 30)
        if not lines or parse_json(lines[0], "partial transcripts", path=path, line=1) != header:
            log.warning("%s was written for another model or table: starting over", path)
            return done
    except UserError:
        return done
    for n, line in enumerate(lines[1:], 2):
        try:
            rec = parse_json(line, "partial transcripts", path=path, line=n, shape=dict)
        except UserError:
            break   # the batch the kill interrupted: transcribed again
        ids, texts = rec.get("ids"), rec.get("texts")
        if not (isinstance(ids, list) and isinstance(texts, list) and len(ids) == len(texts)
                and all(isinstance(x, str) for x in ids + texts)):
            break
        done.update(zip(ids, texts))
    return done


def transcribe_table(model: Transcriber, rows, out_dir: str | os.PathLike, *, name: str = "test",
                     batch_seconds: float = 60.0, max_batch_size: int = 32, progress: bool = True,
                     text_norm: dict | None = None, normalise: bool = True, source: dict | None = None,
                     references: str = "text") -> dict:
    """Transcribe ``rows`` (select_rows) in batches of similar length, resumably, then write
    ``NAME.hyp.tsv`` / ``NAME.ref.tsv`` / ``NAME.json`` (downstream_asr.decode.write_transcripts) and the
    model's own output as ``NAME.raw.tsv``. Hypotheses and references are normalised the way `asr decode`
    writes them (``text_norm``: a run's own, else downstream_asr.text's default), so WER is scored with
    norm:none; ``normalise=False`` (translation) keeps both as they are. The references are the rows'
    ``references`` column (a translation's: ``tgt_text_<lang>``). Each finished batch is appended
    to ``NAME.partial.jsonl`` and fsync'ed: a killed run, started again, transcribes only the rest."""
    import time

    from tqdm import tqdm

    from ssl_pretrain.features import length_buckets, read_segment

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = rows["id"].astype(str).tolist()
    header = {"model": source or model.describe(), "ids": len(ids), "first": ids[0], "last": ids[-1]}
    header = json.loads(json.dumps(header, default=str))
    partial = out_dir / f"{name}.partial.jsonl"
    done = _read_partial(partial, header)
    if not done:
        write_text(partial, json.dumps(header) + "\n")
    batches = length_buckets(rows["duration"].astype(float).tolist(), batch_seconds, max_batch_size)
    todo = [b for b in batches if not all(ids[i] in done for i in b)]
    if done:
        log.info("resuming: %d of %d utterances already transcribed, %d batch(es) to go", len(done), len(ids),
                 len(todo))
    t0, ran = time.monotonic(), 0
    with open(partial, "a", encoding="utf-8") as f, \
            tqdm(total=len(ids), initial=len(ids) - sum(len(b) for b in todo), unit="utt", disable=not progress,
                 desc=f"transcribing {name}") as bar:
        for b in todo:
            wavs = [read_segment(rows["audio"][i], float(rows["offset"][i]), float(rows["duration"][i]),
                                 model.sample_rate) for i in b]
            texts = model.transcribe(wavs)
            f.write(json.dumps({"ids": [ids[i] for i in b], "texts": texts}, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())   # a kill after this line keeps the batch
            done.update((ids[i], t) for i, t in zip(b, texts))
            ran += 1
            log.info("batch %d/%d done (%d utterances)", ran, len(todo), len(b))
            bar.update(len(b))
    norm = TextNorm.from_dict(text_norm)
    fix = (lambda t: normalise_text(t, norm)) if normalise else clean
    write_text(out_dir / f"{name}.raw.tsv", "".join(f"{i}\t{clean(done[i])}\n" for i in ids))
    info = {"model": model.describe(), "kind": model.kind, "text_norm": norm.as_dict() if normalise else None,
            "text_norm_name": norm.name if normalise else "none", "batches_run": ran, "batches": len(batches),
            "batch_seconds": batch_seconds, "transcribe_seconds": round(time.monotonic() - t0, 2),
            "batching": _batching(model, batch_seconds, max_batch_size),
            "runtime": {"device": model.device, "precision": model.precision}}
    meta = write_transcripts(ids, {i: fix(done[i]) for i in ids}, [fix(t) for t in rows[references].astype(str)],
                             out_dir, name, info)
    partial.unlink()
    return meta


def _batching(model: Transcriber, batch_seconds: float, max_batch_size: int) -> dict:
    """How the utterances were batched, for the result record (the hypotheses do not depend on it)."""
    return {"batch_seconds": batch_seconds, "max_batch_size": max_batch_size, "order": "by length",
            "model": model.batching}


# --------------------------------------------------------------------------- `asr transcribe`, in steps

def check_options(*, task: str = "transcribe", tgt: str | None = None, mustshe: str | None = None,
                  batch_seconds: float = 60.0, max_batch_size: int = 32, per_corpus: bool = False) -> None:
    """The option values `asr transcribe` refuses before it reads a table or a model."""
    if batch_seconds <= 0 or max_batch_size < 1:
        raise UserError("--batch-seconds must be > 0 and --max-batch-size >= 1", fix="e.g. --batch-seconds 60")
    if per_corpus and task == "translate":
        raise UserError("--per-corpus scores WER per corpus, and --task is translate",
                        fix="translate one corpus at a time with --corpus")
    if task == "translate" and not tgt:
        raise UserError("--task translate scores BLEU against the table's translations, and no --tgt says "
                        "which", fix="add --tgt LANG: the table's tgt_text_LANG column (e.g. --tgt en)")
    if task != "translate" and (tgt or mustshe):
        raise UserError("--tgt and --mustshe score translations, and --task is transcribe",
                        fix="add --task translate (a sequence-to-sequence model), or leave them out")


def split_by_corpus(meta: dict, rows) -> dict[str, dict]:
    """The transcript files of a table holding several corpora, one pair per corpus: NAME@CORPUS.hyp.tsv
    and NAME@CORPUS.ref.tsv beside NAME's (lines in the same order). {corpus: its files' record}."""
    hyps, refs = Path(meta["hyps"]), Path(meta["refs"])
    hyp_lines = [line + "\n" for line in read_lines(hyps, "hypotheses")]   # this run's own files, "\n"-ended
    ref_lines = [line + "\n" for line in read_lines(refs, "references")]
    corpus_of = dict(zip(rows["id"].astype(str), rows["corpus"].astype(str)))
    out = {}
    for corpus in dict.fromkeys(rows["corpus"].astype(str)):
        keep = [i for i, line in enumerate(hyp_lines) if corpus_of[line.split("\t", 1)[0]] == corpus]
        files = {}
        for key, path, lines, suffix in (("hyps", hyps, hyp_lines, ".hyp.tsv"), ("refs", refs, ref_lines, ".ref.tsv")):
            files[key] = str(path.with_name(path.name[: -len(suffix)] + f"@{corpus}{suffix}"))
            write_text(files[key], "".join(lines[i] for i in keep))
        out[corpus] = {**meta, **files, "n_utts": len(keep), "corpus": corpus}
    return out


def transcribe_rows(rows, *, model: str, out: str, name: str, language: str | None = None,
                    task: str = "transcribe", max_new_tokens: int | None = None, batch_seconds: float = 60.0,
                    max_batch_size: int = 32, progress: bool = True, device: str = "auto", precision: str = "fp32",
                    trust: bool = False, references: str = "text") -> tuple[dict, Transcriber]:
    """Load the model folder ``model`` and transcribe (or, ``task`` translate, translate) ``rows``
    (select_rows) into OUT/NAME.* (transcribe_table), the references from the rows' ``references``
    column. Returns the transcript files' record and the model."""
    device, precision = device_and_precision(device, precision)
    m = load_model(model, device=device, precision=precision, trust=trust, language=language, task=task,
                   max_new_tokens=max_new_tokens)
    source = {"folder": str(Path(model).resolve()), "kind": m.kind, "language": language, "task": task,
              "max_new_tokens": max_new_tokens, "precision": precision}
    meta = transcribe_table(m, rows, out, name=name, batch_seconds=batch_seconds, max_batch_size=max_batch_size,
                            progress=progress, text_norm=m.info.get("text_norm"), normalise=task == "transcribe",
                            source=source, references=references)
    return meta, m


def result_task(model: Transcriber, task: str = "transcribe") -> str:
    """The results DB's task of a transcribed table: a run directory's rows are `asr finetune`'s own
    (asr-e2e, or its variant's); any other model's are asr-released, or st-released for translations."""
    if task == "translate":
        return "st-released"
    return model.info.get("results_task", "asr-e2e") if model.kind == "run" else "asr-released"


def result_config(m: Transcriber, meta: dict, *, model: str, batch_seconds: float, table, split: str | None,
                  corpus: str | None) -> dict:
    """What a result row of a transcribed table keeps: the model, how it ran, which rows."""
    from corpora.table import table_source
    return {"recipe": f"transcribe:{m.kind}", "model": str(Path(model).resolve()), "released": m.describe(),
            "runtime": meta["runtime"], "batch_seconds": batch_seconds, "batching": meta.get("batching"),
            "table": table_source(table), "split": split,
            "corpus": corpus}


def source_language(rows, language: str | None) -> str:
    """The speech's language for a translation's language pair: --language, else the rows' one ``lang``."""
    if language:
        return language
    langs = sorted(set(rows["lang"].astype(str))) if "lang" in rows.columns else []
    if len(langs) != 1 or not langs[0]:
        raise UserError(f"the rows speak {', '.join(langs) or 'no lang'}, so the language pair is unknown",
                        fix="give --language (the speech's language) or select one language's rows (--corpus)")
    return langs[0]
