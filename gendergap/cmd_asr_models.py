"""`gendergap asr transcribe` and `asr export`: released models scored per gender, our runs released.

Thin wiring: downstream_asr.transcribe loads a model folder and writes hypotheses + references,
analysis.score_runs.score_asr_run scores them exactly as `asr decode` does (WER per gender, speaker-level
bootstrap CIs, Δrel, norm:none on transcripts normalised the same way, rows in --db); downstream_asr.export
writes an EncoderASR folder.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from corpora.base.errors import UserError
from gendergap.options import add_model_options, call

TRANSCRIBE_EPILOG = """\
--model is a LOCAL folder (nothing is ever downloaded; fetch hub models first, e.g.
`huggingface-cli download openai/whisper-small --local-dir models/whisper-small`), one of:
  a transformers CTC model (wav2vec2, HuBERT, ...: config.json + weights + processor/tokenizer)
  a transformers sequence-to-sequence speech model (Whisper, Speech2Text, ...), with --language/--task
  a SpeechBrain folder (hyperparams.yaml + checkpoints): HyperPyYAML runs code while it loads, so it
      needs --trust-checkpoint, except a folder `gendergap asr export` wrote (recognised and rebuilt
      from gendergap's own template, its weights read as data)
  an `asr finetune` run directory (rebuilt from the package's template, as `asr decode` does)
Weight files that are pickles (pytorch_model.bin, *.ckpt, *.pt) are read with the allowlist loader
first: one that would run code is refused unless --trust-checkpoint. Prefer model.safetensors.

The rows of --table (an utterance table; --split, --corpus pick some) are read at the model's sample
rate (offset/duration segments cut, other rates resampled), batched by length (--batch-seconds of padded
audio) and transcribed. Each finished batch is appended to OUT/NAME.partial.jsonl: run the same command
after a kill and only the rest is transcribed. Then OUT/NAME.hyp.tsv and NAME.ref.tsv (id<TAB>text,
normalised as `asr decode` writes them: lower-case, punctuation removed, ' and - kept; a run directory's
own normalisation for a run), NAME.raw.tsv (the model's own output) and NAME.wer.json: WER for F, M and
all with speaker-level CIs and Δrel, stored in --db like `asr decode`'s rows (task asr-e2e for a run
directory, asr-released otherwise; checkpoint --name). --task translate writes the translations
(NAME.hyp.tsv, not normalised) and scores nothing: score them with `gendergap score st`.

examples:
  gendergap asr transcribe --model models/whisper-small --language fr --table cv/table.tsv \\
      --split test --out runs/released/whisper-small --db runs/results.db
  gendergap asr transcribe --model models/asr-wav2vec2-commonvoice-fr --trust-checkpoint \\
      --table cv/table.tsv --corpus commonvoice --out runs/released/sb-cv-fr --db runs/results.db
  gendergap asr transcribe --model runs/asr/B-tiny --table study/table.tsv --out runs/asr/B-tiny/table
  gendergap asr transcribe --model release/B-tiny-asr --table study/table.tsv --out runs/released/B-tiny
"""

EXPORT_EPILOG = """\
Writes OUT as a SpeechBrain EncoderASR folder: hyperparams.yaml (speechbrain and torch classes only),
wav2vec2/ (the fine-tuned encoder as a transformers folder, safetensors), head.ckpt, label_encoder.txt,
gendergap-export.json (the plain values) and README.md, a model card: pretraining hours and M/F/U
shares (from the checkpoint registry), fine-tuning data, WER per gender with CIs and Δrel from the run's
scored test sets (NAME.wer.json), and the commands. Anyone loads it without gendergap:
  from speechbrain.inference.ASR import EncoderASR
  asr = EncoderASR.from_hparams(source="release/B-tiny-asr")
The yaml records the folder's absolute path (source_dir); after moving it, pass
overrides={"source_dir": NEW}. `gendergap asr transcribe --model OUT` loads it without --trust-checkpoint.
The run's checkpoint is read with the allowlist loader unless --trust-checkpoint.

examples:
  gendergap asr export runs/asr/B-tiny --out release/B-tiny-asr
  gendergap asr export study/asr-e2e/B-tiny/seed0 --out release/B-tiny-asr --registry study/checkpoints.json
"""


def add_leaves(leaf) -> None:
    """Register `asr transcribe` and `asr export` (``leaf(name, help, func)`` from cmd_asr.register)."""
    q = leaf("transcribe", "transcribe an utterance table with any local speech model (transformers, SpeechBrain, "
             "an asr finetune run), then score WER per gender", lambda a: call(asr_transcribe, a))
    q.epilog = TRANSCRIBE_EPILOG
    q.add_argument("--model", required=True, help="a local model folder (see below)")
    q.add_argument("--table", required=True, action="append",
                   help="utterance table TSV (repeat it for several: merged as `corpus merge` does)")
    q.add_argument("--split", default="test", help="rows of this split (default: test; '' for all)")
    q.add_argument("--corpus", default=None, help="only rows of this corpus")
    q.add_argument("--out", required=True, help="folder for NAME.hyp.tsv, NAME.ref.tsv, NAME.wer.json")
    q.add_argument("--name", default=None, help="file stem in --out and checkpoint name in the DB "
                   "(default: the model folder's name for files: the split)")
    q.add_argument("--language", default=None, help="source language of a sequence-to-sequence model (Whisper: fr)")
    q.add_argument("--task", default="transcribe", choices=("transcribe", "translate"),
                   help="sequence-to-sequence models: transcribe (default) or translate")
    q.add_argument("--max-new-tokens", type=int, default=None,
                   help="sequence-to-sequence models: at most this many generated tokens (default: the model's)")
    q.add_argument("--batch-seconds", type=float, default=60.0,
                   help="padded seconds of audio per batch (batches of similar length; default 60)")
    q.add_argument("--max-batch-size", type=int, default=32, help="at most this many utterances per batch")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_options(q, store=False)
    q.add_argument("--db", default=None, help="store the per-gender WER rows in this results DB")
    q.add_argument("--subset", default=None, help="subset label of the stored rows (default: the split)")
    q.add_argument("--bootstrap", type=int, default=1000, help="speaker-level bootstrap resamples (0: no CI)")
    q.add_argument("--seed", type=int, default=12345, help="bootstrap seed")

    q = leaf("export", "an `asr finetune` run as a SpeechBrain EncoderASR folder with a model card",
             lambda a: call(asr_export, a))
    q.epilog = EXPORT_EPILOG
    q.add_argument("run", metavar="RUN", help="the --out directory of `gendergap asr finetune`")
    q.add_argument("--out", required=True, help="the folder to write (an earlier export there is replaced)")
    q.add_argument("--registry", default=None, help="checkpoint registry for the model card's pretraining data "
                   "(default: runs/checkpoints.json)")
    q.add_argument("--trust-checkpoint", action="store_true",
                   help="unpickle the run's SpeechBrain checkpoint files fully (only for runs you trust)")


def asr_transcribe(*, model: str, table: str | list[str], out: str, split: str | None = "test",
                   corpus: str | None = None, name: str | None = None, language: str | None = None,
                   task: str = "transcribe", max_new_tokens: int | None = None, batch_seconds: float = 60.0,
                   max_batch_size: int = 32, no_progress: bool = False, device: str = "auto",
                   precision: str = "fp32", trust_checkpoint: bool = False, db: str | None = None,
                   subset: str | None = None, bootstrap: int = 1000, seed: int = 12345) -> dict:
    """Transcribe ``table``'s rows with the model folder ``model``, then (task transcribe) score WER per
    gender as `asr decode` does. The `asr transcribe` CLI leaf calls it. Returns the WER result, or the
    transcript files' record for --task translate."""
    from analysis.score_runs import score_asr_run
    from analysis.scoring import read_speakers
    from corpora.table import table_source
    from downstream_asr.transcribe import load_model, select_rows, transcribe_table
    from ssl_pretrain.device import device_and_precision

    if batch_seconds <= 0 or max_batch_size < 1:
        raise UserError("--batch-seconds must be > 0 and --max-batch-size >= 1", fix="e.g. --batch-seconds 60")
    device, precision = device_and_precision(device, precision)
    rows = select_rows(table, split or None, corpus)
    speakers = None
    if task == "transcribe":   # checked before the model runs: an unknown gender is found in a second
        speakers = read_speakers(rows[["id", "speaker", "gender"]], rows["id"].tolist(), source=table_source(table))
    m = load_model(model, device=device, precision=precision, trust=trust_checkpoint, language=language, task=task,
                   max_new_tokens=max_new_tokens)
    stem = (split or "all") if name is None else name
    source = {"folder": str(Path(model).resolve()), "kind": m.kind, "language": language, "task": task,
              "max_new_tokens": max_new_tokens, "precision": precision}
    meta = transcribe_table(m, rows, out, name=stem, batch_seconds=batch_seconds, max_batch_size=max_batch_size,
                            progress=not no_progress, text_norm=m.info.get("text_norm"),
                            normalise=task == "transcribe", source=source)
    print(f"wrote {meta['hyps']} and {meta['refs']} ({meta['n_utts']} utterances, {meta['batches_run']} of "
          f"{meta['batches']} batches run now)")
    if task == "translate":
        print(f"translations are not scored here: gendergap score st --ref REFS --hyp {meta['hyps']} --table ...")
        return meta
    ckpt = name or m.name
    return score_asr_run(meta, speakers, db=db, bootstrap=bootstrap, seed=seed, checkpoint=ckpt,
                         task="asr-e2e" if m.kind == "run" else "asr-released", subset=subset or split or "all",
                         config={"recipe": f"transcribe:{m.kind}", "model": str(Path(model).resolve()),
                                 "released": m.describe(), "runtime": meta["runtime"],
                                 "batch_seconds": batch_seconds, "table": table_source(table), "split": split,
                                 "corpus": corpus})


def asr_export(*, run: str, out: str, registry: str | None = None, trust_checkpoint: bool = False) -> dict:
    """Export the `asr finetune` run ``run`` as an EncoderASR folder ``out`` (the `asr export` leaf)."""
    from downstream_asr.export import export_run

    cmd = "gendergap " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["asr"] else None
    commands = [f"gendergap asr finetune ... --out {run}  (hyper-parameters: {run}/run.json)"] + ([cmd] if cmd else [])
    meta = export_run(run, out, trust=trust_checkpoint, registry=registry, commands=commands)
    print(f"wrote {meta['out']}: EncoderASR.from_hparams(source={meta['out']!r}) loads it; model card README.md")
    return meta
