"""`gendergap ckpt add|list|convert|eval|pack|features`: wiring over ssl_pretrain.checkpoint_tools / registry /
convert / evaluate / feature_store."""
from __future__ import annotations

import argparse
from pathlib import Path

from gendergap.options import (
    add_model_options,
    add_trust_option,
    amount,
    count,
    layer_spec,
    options_of,
    out_dir,
    out_file,
    path_name,
    store_path,
)
from ssl_pretrain.convert import convert_checkpoint
from ssl_pretrain.packed import pack_checkpoint

EPILOG = """\
The registry is a JSON file (default runs/checkpoints.json; --registry or $GENDERGAP_CHECKPOINTS).
examples (each action's --help has its own):
  gendergap ckpt add F-tiny runs/ssl/F --manifest manifests/F   # register, with its pretraining make-up
  gendergap ckpt list                                          # the registry as Table 3
  gendergap ckpt features F-tiny --table data/test.tsv --layer all   # frozen features into the store

Every command that runs a model takes --device auto|cpu|cuda|cuda:N (auto: CUDA when present) and
--precision fp32|fp16|bf16 (autocast; weights stay fp32). Features go to one feature store
(--feature-store, default runs/features): fp16 shards extracted once per checkpoint and rows,
read by frozen ASR, ST, the probes and the exports.
"""
# each action's examples, shown under its own --help
EXAMPLES = {
    "add": """\
examples:
  gendergap ckpt add F-tiny runs/ssl/F --hours 0.5 --male-pct 0 --female-pct 100 --unknown-pct 0
      # a `pretrain run` folder: its checkpoint_best.pt, else checkpoint_last.pt (a run without a
      # valid split has no best); the line printed says which
  gendergap ckpt add F-tiny runs/ssl/F --manifest manifests/F   # hours and M/F/U % from the manifest
  gendergap ckpt add LB-1K-Large models/wav2vec2-FR-1K-large --hours 1096 --male-pct 47.4 \\
      --female-pct 52.5 --unknown-pct 0 --updates 200000     # a Hugging Face folder
  gendergap ckpt --registry study/checkpoints.json add X models/x   # into another registry
""",
    "list": """\
examples:
  gendergap ckpt list                                   # runs/checkpoints.json (or $GENDERGAP_CHECKPOINTS)
  gendergap ckpt list --registry study/checkpoints.json # a study's own registry
""",
    "convert": """\
examples:
  gendergap ckpt convert F-tiny --out models/F-tiny-hf         # a registered fairseq checkpoint
  gendergap ckpt convert runs/ssl/F/checkpoints/checkpoint_best.pt --out models/F-hf
""",
    "eval": """\
examples:
  gendergap ckpt eval F-tiny --manifest manifests/balanced     # contrastive accuracy vs random init
  gendergap ckpt eval F-tiny --manifest manifests/balanced --table data/utterances.tsv --split-rows test
""",
    "pack": """\
examples:
  gendergap ckpt pack runs/ssl/F/checkpoints/checkpoint_best.pt --out F-tiny.safetensors   # fp16, no pickle
  gendergap ckpt pack F-tiny --out F-tiny.safetensors --fp32 --updates 6000
""",
    "features": """\
examples:
  gendergap ckpt features F-tiny --table data/test.tsv --layer all --device cuda --precision bf16
  gendergap ckpt features F-tiny --table data/test.tsv --out feats/F --format kaldi --layer 2 --repeat 2
  gendergap ckpt features FBANK --table data/test.tsv --out feats/fbank   # the filterbank baseline
""",
}


def run_add(args) -> int:
    from ssl_pretrain.checkpoint_tools import add_checkpoint
    from ssl_pretrain.registry import run_checkpoint
    path, which = run_checkpoint(args.path)
    if path != Path(args.path):
        print(f"registering {which}")
    e, registry = add_checkpoint(**dict(options_of(add_checkpoint, args), path=path))
    print(f"registered {e['name']} ({e['kind']}, {e['updates']} updates) in {registry}")
    return 0


def run_list(args) -> int:
    from ssl_pretrain.registry import Registry
    print(Registry(args.registry).table(), end="")
    return 0


def _ref(args):
    from ssl_pretrain.checkpoints import CheckpointRef
    return CheckpointRef.resolve(args.checkpoint, args.registry, trust=getattr(args, "trust_checkpoint", False))


def run_convert(args) -> int:
    ref = _ref(args)
    out = convert_checkpoint(ref.fairseq_path(), args.out, trust=ref.trusted)
    print(f"wrote transformers Wav2Vec2Model folder {out}")
    return 0


def _model(args):
    """The checkpoint the command names, with its device, precision and trust: resolved once, here."""
    from ssl_pretrain.model_choice import ModelChoice  # torch: kept out of --help
    return ModelChoice.resolve(args.checkpoint, args.registry, trust=args.trust_checkpoint, device=args.device,
                               precision=args.precision)


def run_eval(args) -> int:
    from ssl_pretrain.checkpoint_tools import contrastive_text, retrieval_lines
    model = _model(args)
    print(contrastive_text(model, manifest=args.manifest, split=args.split, seed=args.seed))
    if args.table:
        for line in retrieval_lines(model, table=args.table, split_rows=args.split_rows, seed=args.seed,
                                    feature_store=store_path(args.feature_store)):
            print(line)
    return 0


def run_pack(args) -> int:
    import os
    out = pack_checkpoint(_ref(args), args.out, half=not args.fp32, updates=args.updates)
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.2f} MB)")
    return 0


def run_features(args) -> int:
    from ssl_pretrain.checkpoint_tools import extract_features
    from ssl_pretrain.feature_store import export_view
    view = extract_features(_model(args), **dict(options_of(extract_features, args),
                                                 feature_store=store_path(args.feature_store)))
    print(f"features of {len(view.ids)} utterances, layers {view.layers}, in {view.dir}")
    if args.out:
        index = export_view(view, args.out, fmt=args.format, repeat=args.repeat)
        print(f"exported them as {args.format}: {index}")
    return 0


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description=help, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--registry", default=None, help="registry JSON file (default runs/checkpoints.json)")
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    _add_registry_leaves(sub)
    _add_model_leaves(sub)
    for leaf in sub.choices.values():   # `ckpt add NAME PATH --registry R` reads as well as `ckpt --registry R add`
        leaf.add_argument("--registry", default=argparse.SUPPRESS,
                          help="registry JSON file (default runs/checkpoints.json)")


def _add_registry_leaves(sub) -> None:
    """`ckpt add`, `ckpt list` and `ckpt convert`."""
    a = sub.add_parser("add", help="register a fairseq .pt or a Hugging Face folder (wav2vec 2.0, XLS-R, MMS, "
                       "HuBERT, WavLM, data2vec, wav2vec 2.0 conformer, w2v-BERT 2.0)",
                       description="Register a checkpoint with its pretraining data make-up (Table 3): a fairseq "
                       "pretraining .pt (a fine-tuned one is refused), a packed .safetensors release or a transformers "
                       "folder of a supported family, checked and described (family, size, layers, front-end).",
                       epilog=EXAMPLES["add"], formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("name", type=path_name("checkpoint name"),
                   help="the entry's name, its row in Table 3: what --ckpt NAME, `ckpt eval NAME` and a study "
                        "config's `registered: NAME` refer to")
    a.add_argument("path", help="a fairseq .pt, a transformers folder, or a `pretrain run` folder (its "
                   "checkpoint_best.pt, else checkpoint_last.pt)")
    a.add_argument("--hours", type=amount("--hours"), help="hours of pretraining speech")
    a.add_argument("--male-pct", type=amount("--male-pct", 100), help="%% of those hours spoken by men")
    a.add_argument("--female-pct", type=amount("--female-pct", 100), help="%% spoken by women")
    a.add_argument("--unknown-pct", type=amount("--unknown-pct", 100), help="%% of unknown speaker gender")
    a.add_argument("--manifest", metavar="DIR", help="the `manifest build` dir it was pretrained on: hours and "
                   "M/F/U %% from its selection_report.json (the train split), unless given above; recorded in the "
                   "entry, so a study naming it (`registered:`) describes it in Table 1")
    a.add_argument("--updates", type=int, help="updates trained (default: read from a fairseq checkpoint)")
    a.add_argument("--note", default="", help="free text (where it came from)")
    a.add_argument("--replace", action="store_true", help="overwrite an entry of the same name")
    add_trust_option(a)
    a.set_defaults(func=run_add)

    li = sub.add_parser("list", help="print the registry as Table 3 of the study",
                        description="Print every registered checkpoint as Table 3 of the study: model, family, "
                        "parameters, updates, hours, M / F / U %, kind.", epilog=EXAMPLES["list"],
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    li.set_defaults(func=run_list)

    c = sub.add_parser("convert", help="fairseq wav2vec2 pretraining checkpoint -> transformers folder",
                       description="Convert by state-dict mapping (checked against fairseq's forward pass in tests). "
                       "--out is written whole; an existing folder is replaced only if it is an earlier conversion.",
                       epilog=EXAMPLES["convert"], formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("checkpoint", help="registered NAME or PATH of a fairseq .pt")
    c.add_argument("--out", type=out_dir("--out"), required=True,
                   help="output folder (config.json, model.safetensors, ...)")
    add_trust_option(c)
    c.set_defaults(func=run_convert)


def _add_model_leaves(sub) -> None:
    """`ckpt eval`, `ckpt pack` and `ckpt features`: leaves that load a checkpoint's weights."""
    e = sub.add_parser("eval", help="contrastive accuracy of a checkpoint and of its random-init twin",
                       description="Score the wav2vec 2.0 objective (accuracy of finding the true latent among the "
                       "negatives; chance = 1/(negatives+1)) with fairseq's own criterion, for the checkpoint and "
                       "for the same architecture with random weights. Masks and negatives are seeded. The "
                       "objective is scored in fp32 (fairseq's forward fails under autocast); --precision "
                       "applies to the --table content check.", epilog=EXAMPLES["eval"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("checkpoint", help="registered NAME or PATH of a fairseq .pt")
    e.add_argument("--manifest", required=True, help="fairseq wav2vec manifest dir")
    e.add_argument("--split", default="valid", help="manifest split (default valid)")
    e.add_argument("--seed", type=int, default=0, help="seed for masks and negatives (default 0)")
    e.add_argument("--table", action="append", help="utterance table for a content check: cross-speaker retrieval "
                   "of the same sentence, per layer, next to the random-init twin (repeat it for several: merged as "
                   "`corpus merge` does)")
    e.add_argument("--split-rows", metavar="SPLIT", help="only this split of --table (e.g. test)")
    add_model_options(e)
    e.set_defaults(func=run_eval)

    k = sub.add_parser("pack", help="small release copy of a checkpoint: one .safetensors file (fp16 weights, "
                       "the fairseq config as metadata; no optimizer state, no pickle)",
                       description="Write a release copy of a fairseq pretraining checkpoint as one .safetensors "
                       "file: the weights (fp16 unless --fp32) and the fairseq config as metadata, nothing that "
                       "unpickles. Every command reads it where it reads a .pt.", epilog=EXAMPLES["pack"],
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    k.add_argument("checkpoint", help="registered NAME or PATH of a fairseq .pt")
    k.add_argument("--out", type=out_file("--out"), required=True, help="output .safetensors file")
    k.add_argument("--fp32", action="store_true", help="keep float32 weights")
    k.add_argument("--updates", type=int, default=None,
                   help="the update count to record (default: the checkpoint's; e.g. the total of a run warm-started "
                        "with `pretrain run --init-from`, whose own count restarts at 0)")
    add_trust_option(k)
    k.set_defaults(func=run_pack)

    f = sub.add_parser("features", help="extract frozen hidden states into the feature store (and export them)",
                       description="Length-bucketed extraction into the feature store (fp16 shards, resumable, "
                       "reused by every consumer); --out also writes a copy as .npy per utterance or Kaldi ark/scp.",
                       epilog=EXAMPLES["features"], formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("checkpoint", help="registered NAME, a fairseq .pt or a transformers folder")
    f.add_argument("--table", required=True, action="append", help="utterance table (TSV); repeat it for several: "
                   "they are merged as `corpus merge` does")
    f.add_argument("--split", help="only rows of this split")
    f.add_argument("--out", type=out_dir("--out"), default=None,
                   help="also export the features into this dir (see --format)")
    f.add_argument("--format", choices=("npy", "kaldi"), default="npy",
                   help="export format: npy ([T, D] per utterance, [L, T, D] for several layers; features.tsv "
                        "index) or kaldi (feats.ark/scp, one layer)")
    f.add_argument("--layer", default="last", type=layer_spec("--layer"),
                   help="layer index (0 = transformer input), 'last', 'all' or a comma list such as 0,3,6")
    # bounded: each value sizes an allocation (--repeat multiplies every export; --shard-mb nan traced back)
    f.add_argument("--repeat", type=count("--repeat", 1, 16), default=1,
                   help="repeat each frame N times, 1-16 (2: 20 ms -> 10 ms for Kaldi TDNN)")
    f.add_argument("--batch-seconds", type=amount("--batch-seconds", hi=1e5, lo=0.01), default=60.0,
                   help="audio per batch incl. padding (default 60)")
    f.add_argument("--shard-mb", type=amount("--shard-mb", hi=1e6, lo=0.001), default=1000.0,
                   help="features per shard, MB, 0.001-1e6 (default 1000): a killed extraction redoes at most "
                        "one shard")
    add_model_options(f)
    f.set_defaults(func=run_features)
