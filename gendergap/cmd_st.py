"""`gendergap st`: frozen-feature speech translation (fairseq s2t) -- train, then decode + score.

Thin wiring: downstream_st does the training and decoding; the scores come from analysis
(per-gender BLEU with speaker-level CIs, MuST-SHE gender accuracy) and go to the results store.
"""
from __future__ import annotations

import argparse

from corpora.feature_request import Layers
from gendergap.options import (
    add_model_options,
    add_trust_option,
    call,
    layer_spec,
    out_dir,
    out_file,
    path_name,
    resamples,
)
from gendergap.runs.st import st_decode, st_train

DESCRIPTION = """\
Direct speech translation on frozen SSL features, as in the reference study (section 5):
features of one layer of a wav2vec 2.0 checkpoint feed a fairseq s2t_transformer_xs, trained
with Adam (lr 2e-3) and label-smoothed cross-entropy; the last 10 epoch checkpoints are
averaged and decoded with beam 5; BLEU is scored per speaker gender."""

TRAIN_EPILOG = ("""\
what it does:
  1. reads the layer's features from the feature store (--feature-store), extracting them on
     --device in --precision when no entry holds them yet; fr->en, fr->es, fr->pt, frozen ASR
     and the probes then read the same shards (fairseq reads them in place: shard.zip:offset:length);
  2. builds OUT/data: train.tsv, valid.tsv, config.yaml and a sentencepiece vocabulary trained
     on the train targets (column tgt_text_<tgt>); training/valid utterances over
     data.max_frames (3,000) feature frames are removed;
  3. runs fairseq-train on --device (--precision fp16: fairseq's --fp16, fp32 master weights and
     loss scaling; bf16 is refused, fairseq 0.12 ties it to TPUs) (log: OUT/train.log), """
                """keeping the last checkpoints (xs: 10 epoch
     checkpoints; tiny: 4 saved every 25 updates), and averages them into OUT/checkpoint_avg.pt.
  Running the same command again resumes an interrupted run; a finished one only re-averages.

GPUs: xs's batch is fairseq's mTEDx recipe, 40,000 frames x update-freq 8 on one GPU;
--gpus G runs G ranks with update-freq 8 / G (G in 1, 2, 4, 8), the same batch per update.
presets: xs = the study's (6 enc / 3 dec layers, dim 256, 500 epochs); tiny = for tests and
the built-in study on a CPU (3 enc / 2 dec, dim 128, no dropout, auxiliary CTC loss on the
encoder, 450 updates; the built-in study sets max-update=800, where the shipped checkpoints' layer 1
gives BLEU 44-55 fr->en on the mini corpus (docs/demo-results.json; 450 updates left F-tiny at 24.0);
see downstream_st/presets/tiny.yaml).
overrides (key=value, after the options): fairseq-train flags without -- (max-epoch=50,
lr=1e-3, cpu=false, stop-time-hours=0.05 for a 3-minute budget), data.vocab_size=500,
data.max_frames=6000, average_last=5, decode.beam=10. Only the fairseq flags listed in
downstream_st/fairseq_flags.py (FLAGS) pass, each with a value of its type (a number, a switch, a
choice, a registered name or a list of numbers; never a path, a flag or code), from overrides and
from a --preset file alike: user-dir, restore-file and other flags that import code or load a file
need --trust-checkpoint. Each flag reaches fairseq as one word, --flag=value. A resumed
checkpoints/checkpoint_last.pt is read with the safe loader before fairseq starts. st.json records
the sha256 of checkpoint_avg.pt and of the data config and vocabulary files, for `st decode` to check.

examples:
  gendergap st train --ckpt F-tiny --layer 1 --train data/synth/utterances.tsv --corpus synth-fr \\
      --train-split train --valid data/synth/utterances.tsv --valid-split valid \\
      --src fr --tgt en --out runs/st/F-tiny.fr-en --preset tiny
  gendergap st train --ckpt F-tiny --layer 1 --train data/synth/utterances.tsv --corpus synth-gender \\
      --train-split train --valid data/synth/utterances.tsv --valid-split valid \\
      --src en --tgt fr --out runs/st/F-tiny.en-fr --preset tiny max-update=250
  gendergap st train --ckpt LB-1K --layer last --train mtedx_fr-en_train.tsv --valid mtedx_fr-en_valid.tsv \\
      --src fr --tgt en --out runs/st/LB-1K.fr-en --preset xs
""")

DECODE_EPILOG = """\
output: HYP holds `id<TAB>text` lines, detokenised (sentencepiece pieces joined back into
words; a hypothesis still holding the piece marker '▁' is refused). With references in the
test table (tgt_text_<tgt>), BLEU (sacreBLEU 13a, case-sensitive, as the study) is scored for
all, F and M speakers with speaker-level bootstrap CIs and delta_rel = 100 (F - M) / (0.5 (F + M)),
printed, written to HYP.json and, with --db, stored (task st). --mustshe also scores gender
accuracy/coverage on a MuST-SHE TSV (task mustshe).

a model dir is read as data, never as code: its decoding flags must be fairseq flags on gendergap's
list with values of their types (no --user-dir, no --path, no path or flag as a value;
downstream_st/fairseq_flags.py FLAGS) and its checkpoint_avg.pt must load with the safe loader
before fairseq starts; --trust-checkpoint lifts both, for a model from a source you trust.
checkpoint_avg.pt, the data config and the vocabulary files must have the sha256 st.json records
(another file there is refused, whatever the flags); a run trained before that record was kept
needs its `st train` command run again (it records them) or --trust-checkpoint.
st.json names its inputs relative to the model dir, so a copied or moved study decodes its own
checkpoint_avg.pt and feature store; a checkpoint name that now means another SSL model is refused
(the features would not be the ones it was trained on).

examples:
  gendergap st decode --model runs/st/F-tiny.fr-en --test data/synth/utterances.tsv --corpus synth-fr \\
      --test-split test --out runs/st/F-tiny.fr-en/test.hyp --db runs/results.db
  gendergap st decode --model runs/st/F-tiny.en-fr --test data/synth/utterances.tsv --corpus synth-gender \\
      --test-split test --out gender.hyp --mustshe data/synth/mustshe_test.tsv --db runs/results.db
"""


def register(subparsers, group: str, help: str) -> None:
    """Add `st train` and `st decode`."""
    p = subparsers.add_parser(group, help=help, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="st_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    t = sub.add_parser("train", help="extract features, build the s2t data, train, average checkpoints",
                       description=DESCRIPTION, epilog=TRAIN_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    _feature_options(t, training=True)
    t.add_argument("--train", required=True, action="append", metavar="TABLE",
                   help="utterance table with the training rows (repeat for several: merged as `corpus merge` does)")
    t.add_argument("--valid", required=True, action="append", metavar="TABLE",
                   help="utterance table with the validation rows (repeatable, as --train)")
    t.add_argument("--train-split", default=None, help="keep only rows whose split column is this (e.g. train)")
    t.add_argument("--valid-split", default=None, help="keep only rows whose split column is this (e.g. valid)")
    t.add_argument("--valid-corpus", default=None,
                   help="validation rows of this corpus instead of --corpus (the paper validates every pair on "
                        "fr-fr's valid set: e.g. --corpus mtedx-fr-en --valid-corpus mtedx-fr)")
    t.add_argument("--src", required=True, help="source speech language (checked against the table's lang column)")
    t.add_argument("--tgt", required=True, help="target language: the table column tgt_text_<tgt> is the reference")
    t.add_argument("--out", type=out_dir("--out"), required=True,
                   help="model dir (data/, checkpoints/, checkpoint_avg.pt, train.log, st.json)")
    t.add_argument("--preset", default="tiny", help="xs (the study's), tiny, or a preset YAML file (default tiny)")
    t.add_argument("--seed", type=int, default=None, help="fairseq seed (default: the preset's)")
    t.add_argument("--gpus", type=int, default=1,
                   help="GPUs for fairseq-train, from --device cuda:N on (default 1); update-freq becomes the "
                        "preset's / GPUs so the batch stays the recipe's (xs: 8 -> 1 on 8 GPUs; must divide it)")
    t.add_argument("overrides", nargs="*", metavar="key=value", help="preset overrides (see below)")
    t.set_defaults(func=lambda a: call(st_train, a))

    d = sub.add_parser("decode", help="beam-search a test set, write id<TAB>text, score BLEU per gender",
                       description=DESCRIPTION, epilog=DECODE_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--model", required=True, help="the --out dir of `gendergap st train`")
    d.add_argument("--test", required=True, action="append", metavar="TABLE",
                   help="utterance table with the test rows (repeat for several: merged as `corpus merge` does)")
    d.add_argument("--test-split", default=None, help="keep only rows whose split column is this (e.g. test)")
    d.add_argument("--corpus", default=None, help="keep only rows of this corpus (e.g. synth-fr)")
    d.add_argument("--out", type=out_file("--out"), required=True, metavar="HYP",
                   help="hypotheses file to write (id<TAB>text)")
    d.add_argument("--beam", type=int, default=None, help="beam size (default: the preset's, 5)")
    d.add_argument("--feature-store", default=None, metavar="DIR",
                   help="feature store (default: the one the model was trained with)")
    d.add_argument("--features-index", default=None, help="use this ready feature index instead of extracting")
    d.add_argument("--device", default=None, help="auto|cpu|cuda|cuda:N (default: the device it trained on)")
    d.add_argument("--precision", default=None, choices=("fp32", "fp16", "bf16"),
                   help="fp32 or fp16 for extracting the test features (default: the training run's); "
                        "fairseq-generate itself always runs fp32 (its --fp16 feeds fp32 features to a half model)")
    d.add_argument("--registry", default=None, help="checkpoint registry JSON (default: the training run's)")
    add_trust_option(d)
    d.add_argument("--no-score", action="store_true", help="only decode (e.g. a test set without references)")
    d.add_argument("--mustshe", default=None, metavar="TSV", help="also score gender accuracy on this MuST-SHE TSV")
    d.add_argument("--bootstrap", type=resamples("--bootstrap"), default=1000,
                   help="speaker bootstrap resamples for CIs (default 1000)")
    d.add_argument("--seed", type=int, default=12345, help="bootstrap seed (default 12345; 0 is a real seed)")
    d.add_argument("--db", default=None, help="store the scores in this results DB (e.g. runs/results.db)")
    d.add_argument("--name", default=None, type=path_name("--name"),
                   help="checkpoint name for the store (default: the SSL checkpoint's)")
    d.add_argument("--subset", default="test", type=path_name("--subset"),
                   help="subset name for the store (default test)")
    d.add_argument("--task", default="st", type=path_name("--task"),
                   help="task name for the store (default st: Table 5; the study files its "
                   "en->fr gender set under gender-st)")
    d.set_defaults(func=lambda a: call(st_decode, a))


def _feature_options(p, training: bool) -> None:
    p.add_argument("--ckpt", default=None,
                   help="SSL checkpoint: a registry name, a fairseq .pt or a transformers folder")
    p.add_argument("--layer", default="last", type=layer_spec("--layer", Layers.one),
                   help="layer whose output is the feature (0 = CNN projection; default last)")
    add_model_options(p)
    p.add_argument("--features-index", default=None,
                   help="use a ready feature index (id, path, n_frames, dim) instead of --ckpt")
    p.add_argument("--registry", default=None, help="checkpoint registry JSON (default runs/checkpoints.json)")
    p.add_argument("--corpus", default=None, help="keep only rows of this corpus (e.g. synth-fr)")
