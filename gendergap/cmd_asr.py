"""`gendergap asr`: downstream ASR per SSL checkpoint, scored per gender into the results store.

Thin wiring: downstream_asr trains and decodes (hypothesis + normalised reference files),
analysis.scoring computes WER for F, M and all with speaker-level CIs, and the rows go to the
results DB (task ``asr-e2e`` for fine-tuning, ``asr-frozen`` for frozen features).
"""
from __future__ import annotations

import argparse

from corpora.feature_request import Layers
from gendergap.cmd_asr_models import add_leaves  # transcribe (any model), export
from gendergap.options import (
    add_model_options,
    add_trust_option,
    call,
    layer_spec,
    out_dir,
    out_file,
    path_name,
    resamples,
    store_path,
)
from gendergap.runs.asr import asr_decode, asr_finetune, asr_frozen

EPILOG = """\
Each subcommand's --help has its own notes and examples.
examples:
  gendergap asr finetune --ckpt F-tiny --train sb/train.csv --valid sb/valid.csv --test sb/test.csv --out runs/asr/F
  gendergap asr frozen --ckpt F-tiny --layer all --train sb/train.csv --valid sb/valid.csv --test sb/test.csv \\
      --out runs/asr-frozen/F
  gendergap asr decode --model runs/asr/F --test sb/test.csv
  gendergap asr transcribe --model models/whisper-small --table data/test.tsv --split test --out runs/whisper
"""
INPUTS = """\
inputs: SpeechBrain CSVs (ID, duration, wav, start, stop, spk_id, wrd, gender) as written by
`gendergap manifest build --format speechbrain`; --ckpt is a name in the checkpoint registry
(`gendergap ckpt list`) or a path (fairseq .pt, packed or not, or a transformers folder).
--device auto|cpu|cuda|cuda:N and --precision fp32|fp16|bf16 say where the model runs (SpeechBrain's
autocast; weights and optimizer state stay fp32). Transcripts are normalised (lower-case,
punctuation removed, accents, ' and - kept; see downstream_asr/text.py and the text_norm.*
options) for training and for the reference file written next to the hypotheses, so WER compares
like with like (scored with norm:none).

KEY=VALUE hyperparameter overrides (see the recipe's yaml) go in one run, after the options;
--hparams FILE gives several as plain YAML (`lr_head: 5.0e-4`). The model is always built from
the recipe's template shipped with gendergap: a run directory records only plain values
(run.json), so `asr decode` on a directory someone hands you evaluates no yaml of theirs, and
its SpeechBrain checkpoints (save/CKPT*/) load with the allowlist loader unless --trust-checkpoint.
Training ends by recording its weights in run.json (the checkpoint decoding picks, each file's
sha256): a decode, transcribe or export of the run loads only those, so another run's weights copied
into save/ are refused. A run directory can be copied or moved: its paths are relative to it.
"""
GENDER = """\
Per-gender WER needs each test utterance's speaker and gender: from --table (an utterance
table), else from the test CSV's spk_id and gender columns.
"""
FINETUNE = INPUTS + """
Several processes: launch the same command with torchrun, e.g.
  torchrun --standalone --nproc_per_node 2 -m gendergap.cli asr finetune ... --grad-accum 1
Ranks join through SpeechBrain (gloo on --device cpu, nccl on cuda, rank r on GPU r); each
takes every N-th length-bucketed batch, so one optimizer step covers batch_seconds x ranks x
--grad-accum padded seconds of audio. Only rank 0 writes the run directory, decodes, scores and
stores rows; every rank exits 0. Under SLURM, put that torchrun line in the sbatch script
(one task per node, --cpus-per-task or --gpus for the ranks).
--ckpt-interval-minutes M also checkpoints inside an epoch (a checkpoint cut short by a kill is
set aside): rerunning the same command after a kill or a requeue resumes from the last one,
mid-epoch. ckpt_interval_steps=N (batches) does the same by count.

""" + GENDER + """
examples:
  gendergap asr finetune --ckpt F-tiny --train sb/train.csv --valid sb/valid.csv --test sb/test.csv \\
      --out runs/asr/F-tiny --db runs/results.db max_minutes=2 lr_head=1e-3
  gendergap asr finetune ... --out runs/asr/F-tiny max_steps=2000     # same --out: resumes
"""
FROZEN = INPUTS + """
Frozen features come from the feature store (--feature-store), extracted once per checkpoint and
rows and shared with ST and the probes.

""" + GENDER + """
examples:
  gendergap asr frozen --ckpt F-tiny --layer all --train sb/train.csv --valid sb/valid.csv \\
      --test sb/test.csv --out runs/asr-frozen/F-tiny --db runs/results.db max_minutes=2
  gendergap asr frozen --ckpt FBANK --layer 0 --train sb/train.csv --valid sb/valid.csv \\
      --test sb/test.csv --out runs/asr-frozen/FBANK            # the filterbank baseline
"""
DECODE = """\
The model is rebuilt from gendergap's own recipe template and the run's recorded plain values
(run.json); its checkpoints load with the allowlist loader unless --trust-checkpoint. Only the
checkpoint its training recorded decodes (run.json's sha256 of its weights): another CKPT folder or
a changed file is refused in one line; a run without the record (an older gendergap's, or one whose
training did not finish) decodes only with --trust-checkpoint, with a warning.

""" + GENDER + """
examples:
  gendergap asr decode --model runs/asr/F-tiny --test sb/test.csv --db runs/results.db
  gendergap asr decode --model runs/asr/F-tiny --test sb/other.csv --name other --table data/utterances.tsv
"""
KALDI_EXPORT = """\
examples:
  gendergap asr kaldi-export --ckpt F-tiny --layer 6 --table test.tsv --out kaldi/test --repeat-frames
  gendergap asr kaldi-export --ckpt F-tiny --layer last --table data/utterances.tsv --split train --out kaldi/train
"""
KALDI_IMPORT = ("""\
examples:
  gendergap asr kaldi-import --text exp/decode/scoring/10.tra.txt --data-dir kaldi/test --out hyp.tsv
  gendergap asr kaldi-import --text kaldi/test/text --data-dir kaldi/test --out ref.tsv   """
                """# the references, ids mapped back
  gendergap score asr --refs ref.tsv --hyps hyp.tsv --speakers test.tsv                     # then score it per gender
""")


def register(subparsers, group: str, help: str) -> None:
    """Add `asr` and its leaves: finetune, frozen, decode, kaldi-export, kaldi-import."""
    p = subparsers.add_parser(group, help=help, description=help, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="asr_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    def leaf(name, help_, func, epilog=None):
        q = sub.add_parser(name, help=help_, description=help_, epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        q.set_defaults(func=func)
        return q

    q = leaf("finetune", "end-to-end CTC fine-tuning of wav2vec 2.0 (SpeechBrain), then decode and score",
             lambda a: call(asr_finetune, a), FINETUNE)
    _ckpt_options(q)
    add_model_options(q, store=False)
    _train_options(q, "downstream_asr/hparams/finetune_ctc.yaml")
    _score_options(q)

    q = leaf("frozen", "frozen-feature CTC ASR (TDNN/BiLSTM on one layer or a learned sum of all), then decode "
             "and score", lambda a: call(asr_frozen, a), FROZEN)
    _ckpt_options(q)
    q.add_argument("--layer", default="all", type=layer_spec("--layer", Layers.one_or_all),
                   help="layer whose features feed the model: 0..L, 'last', or 'all' for a learned weighted sum "
                        "of every layer (s3prl style; default)")
    add_model_options(q)
    _train_options(q, "downstream_asr/hparams/frozen_ctc.yaml")
    _score_options(q)

    q = leaf("decode", "greedy-decode a test CSV with a trained model directory, then score",
             lambda a: call(asr_decode, a), DECODE)
    q.add_argument("--model", required=True, help="the --out directory of `asr finetune` or `asr frozen`")
    q.add_argument("--test", required=True, help="SpeechBrain CSV to decode")
    q.add_argument("--name", default=None, type=path_name("--name"),
                   help="output name: NAME.hyp.tsv / NAME.ref.tsv (default: the CSV's stem)")
    q.add_argument("--data-root", default=None, help="replaces $data_root in the CSV's wav paths")
    q.add_argument("--ckpt-name", default=None, type=path_name("--ckpt-name"),
                   help="checkpoint name for the results DB (default: from the run)")
    q.add_argument("--device", default=None, help="auto|cpu|cuda|cuda:N (default: the device the run trained on)")
    q.add_argument("--precision", default=None, choices=("fp32", "fp16", "bf16"),
                   help="autocast precision (default: the run's)")
    add_trust_option(q)
    _score_options(q, with_test=False)

    _add_kaldi_leaves(leaf)

    add_leaves(leaf)


def _add_kaldi_leaves(leaf) -> None:
    """`asr kaldi-export` and `asr kaldi-import`: the round trip through a Kaldi recipe."""
    q = leaf("kaldi-export", "Kaldi data dir (wav.scp, text, utt2spk, spk2gender, ...) + SSL features as feats.scp/ark",
             lambda a: call(asr_kaldi_export, a), KALDI_EXPORT)
    _ckpt_options(q)
    q.add_argument("--layer", required=True, type=layer_spec("--layer", Layers.one),
                   help="layer to export: 0..L or 'last'")
    q.add_argument("--table", required=True, action="append", help="utterance table TSV of the utterances to "
                   "export; repeat it for several: they are merged as `corpus merge` does")
    q.add_argument("--split", default=None, help="only rows of this split (e.g. train, test)")
    q.add_argument("--out", type=out_dir("--out"), required=True, help="the Kaldi data directory to write")
    q.add_argument("--repeat-frames", action="store_true",
                   help="repeat each 20 ms frame twice (10 ms frames, what Kaldi TDNN recipes expect)")
    q.add_argument("--batch-seconds", type=float, default=60.0, help="padded seconds of audio per extraction batch")
    add_model_options(q)

    q = leaf("kaldi-import", "Kaldi decoding output (text or CTM) -> hypothesis file id<TAB>text", run_kaldi_import,
             KALDI_IMPORT)
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="Kaldi text output: `utt word word ...` per line")
    src.add_argument("--ctm", help="CTM: `utt-or-rec channel start dur word [conf]` per line")
    q.add_argument("--data-dir", default=None,
                   help="the exported data dir: maps Kaldi utterance ids back to table ids (utt2table_id), "
                        "splits recording-level CTMs by its segments, and lists utterances with no output")
    q.add_argument("--out", type=out_file("--out"), required=True, help="hypothesis TSV to write")


def _ckpt_options(q) -> None:
    q.add_argument("--ckpt", required=True,
                   help="checkpoint name in the registry, or a path (.pt or transformers folder)")
    q.add_argument("--registry", default=None, help="checkpoint registry JSON (default: runs/checkpoints.json)")


def _train_options(q, default_yaml: str) -> None:
    q.add_argument("--train", required=True, help="training SpeechBrain CSV")
    q.add_argument("--valid", required=True, help="validation SpeechBrain CSV (best checkpoint by its WER)")
    q.add_argument("--out", type=out_dir("--out"), required=True,
                   help="run directory; running again with the same one resumes")
    q.add_argument("--hparams", default=None, metavar="FILE",
                   help=f"a YAML file of plain KEY: VALUE hyperparameter overrides (e.g. `lr: 1.0e-3`), applied over "
                        f"the recipe's template {default_yaml}; read as data, never as HyperPyYAML. KEY=VALUE "
                        "arguments win over it"),
    q.add_argument("--data-root", default=None, help="replaces $data_root in the CSVs' wav paths")
    q.add_argument("--no-progress", action="store_true", help="no progress bars")
    q.add_argument("--grad-accum", type=int, default=None, metavar="N",
                   help="accumulate gradients over N batches per optimizer step (SpeechBrain's "
                        "grad_accumulation_factor; default: the yaml's, 1)")
    q.add_argument("--ckpt-interval-minutes", type=float, default=None, metavar="M",
                   help="also checkpoint every M minutes inside an epoch, so that a killed or requeued job "
                        "resumes mid-epoch (SpeechBrain's ckpt_interval_minutes; default: the yaml's, 0 = off)")
    q.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="hyperparameter overrides, e.g. max_steps=500 max_minutes=2 lr_head=1e-3 "
                        "text_norm.keep_hyphen=false")


def _score_options(q, with_test: bool = True) -> None:
    if with_test:
        q.add_argument("--test", default=None, help="test CSV to decode and score after training")
    q.add_argument("--table", default=None, action="append",
                   help="utterance table giving speaker and gender per test id (default: the CSV's spk_id/gender); "
                        "repeat it for several: they are merged as `corpus merge` does")
    q.add_argument("--db", default=None, help="store the per-gender WER rows in this results DB")
    q.add_argument("--subset", default=None, type=path_name("--subset"),
                   help="subset label of the stored rows (default: the test CSV's stem, e.g. test; the sweep "
                        "files one training seed's rows as test@seed<N>)")
    q.add_argument("--bootstrap", type=resamples("--bootstrap"), default=1000,
                   help="speaker-level bootstrap resamples (0: no CI)")
    q.add_argument("--seed", type=int, default=12345, help="bootstrap seed")


def asr_kaldi_export(*, ckpt: str, layer: str, table: list[str], out: str, split: str | None = None,
                     repeat_frames: bool = False, batch_seconds: float = 60.0, registry: str | None = None,
                     feature_store: str | None = None, device: str = "auto", precision: str = "fp32",
                     trust_checkpoint: bool = False) -> None:
    from downstream_asr.kaldi import export_table
    from ssl_pretrain.model_choice import ModelChoice  # torch: kept out of --help

    model = ModelChoice.resolve(ckpt, registry, trust=trust_checkpoint, device=device, precision=precision)
    summary = export_table(model, layer=layer, table=table, out=out, split=split, repeat_frames=repeat_frames,
                           batch_seconds=batch_seconds, feature_store=store_path(feature_store))
    print(f"wrote {out}: {summary['utterances']} utterances, {summary['speakers']} speakers, "
          f"features {summary['dim']}-d at {summary['frame_shift_ms']:g} ms")


def run_kaldi_import(args) -> int:
    from downstream_asr.kaldi import kaldi_import

    n = kaldi_import(text=args.text, ctm=args.ctm, out=args.out, data_dir=args.data_dir)
    print(f"wrote {n} hypotheses to {args.out}")
    return 0
