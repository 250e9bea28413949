"""`gendergap asr transcribe` and `asr export`: released models scored per gender, our runs released.

Argument parsing and help only: gendergap/runs/transcribe.py runs them (downstream_asr.transcribe loads a
model folder and writes hypotheses + references, analysis.score_runs scores them exactly as `asr decode`
does: WER per gender, speaker-level bootstrap CIs, Δrel, norm:none on transcripts normalised the same way;
translations as `st decode` does: BLEU per gender, MuST-SHE; rows in --db); downstream_asr.export writes
an EncoderASR folder.
"""
from __future__ import annotations

from gendergap.options import add_model_options, call, out_dir, path_name, resamples
from gendergap.runs.transcribe import asr_export, asr_transcribe

TRANSCRIBE_EPILOG = """\
--model is a LOCAL folder (nothing is ever downloaded; fetch hub models first, e.g.
`hf download openai/whisper-small --local-dir models/whisper-small`), one of:
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
directory, asr-released otherwise; checkpoint --name). A table holding several corpora (Common Voice,
MLS, mTEDx test sets) with --per-corpus is transcribed once and scored per corpus: NAME@CORPUS.hyp.tsv
and .ref.tsv, rows NAME@CORPUS, one per model x corpus x gender.

--task translate (a sequence-to-sequence model that translates: Whisper into English) writes the
translations as they are (NAME.hyp.tsv) and the table's tgt_text_LANG column (--tgt LANG, required)
as NAME.ref.tsv, then scores them as `st decode` does: BLEU for F, M and all with speaker-level CIs
and Δrel, sacreBLEU's signature, in NAME.bleu.json and --db (task st-released, language pair
--language-LANG, or the rows' lang-LANG); --mustshe TSV adds MuST-SHE gender accuracy (task mustshe).

examples:
  gendergap asr transcribe --model models/whisper-small --language fr --table cv/table.tsv \\
      --split test --out runs/released/whisper-small --db runs/results.db
  gendergap asr transcribe --model models/whisper-small --language fr --task translate --tgt en \\
      --table mtedx/table.tsv --corpus mtedx-fr-en --out runs/released/whisper-small-st --db runs/results.db
  gendergap asr transcribe --model models/asr-wav2vec2-commonvoice-fr --trust-checkpoint \\
      --table cv/table.tsv --corpus commonvoice --out runs/released/sb-cv-fr --db runs/results.db
  gendergap asr transcribe --model models/whisper-small --language fr --table cv.tsv --table mls.tsv \\
      --table mtedx.tsv --per-corpus --out runs/released/whisper-small --db runs/results.db
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
    q.add_argument("--per-corpus", action="store_true",
                   help="score each corpus of the table apart (rows NAME@CORPUS: one per model x corpus x gender); "
                        "the model still runs once")
    q.add_argument("--out", type=out_dir("--out"), required=True,
                   help="folder for NAME.hyp.tsv, NAME.ref.tsv, NAME.wer.json")
    q.add_argument("--name", default=None, type=path_name("--name"),
                   help="file stem in --out and checkpoint name in the DB "
                   "(default: the model folder's name for files: the split)")
    q.add_argument("--language", default=None, help="source language of a sequence-to-sequence model (Whisper: fr)")
    q.add_argument("--task", default="transcribe", choices=("transcribe", "translate"),
                   help="sequence-to-sequence models: transcribe (default) or translate (needs --tgt)")
    q.add_argument("--tgt", default=None, metavar="LANG",
                   help="--task translate: score BLEU against the table's tgt_text_LANG column (required there)")
    q.add_argument("--max-new-tokens", type=int, default=None,
                   help="sequence-to-sequence models: at most this many generated tokens (default: the model's)")
    q.add_argument("--batch-seconds", type=float, default=60.0,
                   help="padded seconds of audio per batch (batches of similar length; default 60)")
    q.add_argument("--max-batch-size", type=int, default=32, help="at most this many utterances per batch")
    q.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_options(q, store=False)
    q.add_argument("--db", default=None, help="store the per-gender WER rows in this results DB")
    q.add_argument("--subset", default=None, type=path_name("--subset"),
                   help="subset label of the stored rows (default: the split)")
    q.add_argument("--mustshe", default=None, metavar="TSV",
                   help="--task translate: also score MuST-SHE gender accuracy on this TSV (rows: task mustshe)")
    q.add_argument("--bootstrap", type=resamples("--bootstrap"), default=1000,
                   help="speaker-level bootstrap resamples (0: no CI)")
    q.add_argument("--seed", type=int, default=12345, help="bootstrap seed")

    q = leaf("export", "an `asr finetune` run as a SpeechBrain EncoderASR folder with a model card",
             lambda a: call(asr_export, a))
    q.epilog = EXPORT_EPILOG
    q.add_argument("run", metavar="RUN", help="the --out directory of `gendergap asr finetune`")
    q.add_argument("--out", type=out_dir("--out"), required=True,
                   help="the folder to write (an earlier export there is replaced)")
    q.add_argument("--registry", default=None, help="checkpoint registry for the model card's pretraining data "
                   "(default: runs/checkpoints.json)")
    q.add_argument("--trust-checkpoint", action="store_true",
                   help="unpickle the run's SpeechBrain checkpoint files fully (only for runs you trust)")
