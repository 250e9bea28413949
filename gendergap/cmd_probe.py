"""`gendergap probe run|correlate`: gender probes per layer, and probe F1 vs gender accuracy.

Wiring only: features come from the feature store (ssl_pretrain.feature_store; extracted once
per checkpoint and rows, shared with frozen ASR and ST), the probes, scores, store rows and
plots from analysis.probing.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from gendergap.options import add_model_options, feature_store, runtime

EPILOG = """\
what it does (the probing paper, papers/003_*.txt):
  for every checkpoint and layer, an attention probe (one learnable query over the frames,
  trained as in its Appendix B: batch 32, Adam lr 1e-4 halved after 3 flat epochs, early stop
  after 20) and the Appendix A baselines (logistic regression on mean-/max-pooled states and on
  the states at 0/25/50/75/100 % of the utterance) classify the speaker's gender (F/M).
  Reported: macro F1 and per-class recall on the test split, the attention probe's mean
  attention profile over 100 relative positions; rows go to the results DB (task probe,
  metric f1_macro:L<layer>:<probe>, see analysis/probing/run.py).

data: the table's split column gives train / valid (or dev) / test (other labels, e.g.
  pretrain, are not used); rows of unknown gender are left out, each split is balanced F/M
  by down-sampling (seeded), speakers must be disjoint across splits. Features come from the
  feature store (--feature-store): extracted once per checkpoint and rows, on --device in
  --precision, and reused by every later probe, ASR or ST run on the same rows.

examples:
  gendergap probe run --ckpt F-tiny --layers all --table data/synth/utterances.tsv --out probes/ \\
      --db runs/results.db --control          # each checkpoint next to its random-init twin
  gendergap probe run --ckpt F-tiny,M-tiny,B-tiny --layers 0,2,4 --table T.tsv --out probes/ --probes attention,mean \\
      --no-random-init
  gendergap probe correlate --db runs/results.db --probe attention --layer last
"""


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", text).strip("_") or "model"


def _print_table(label: str, results) -> None:
    from analysis.probing import f1_by_layer
    table = f1_by_layer(results)
    print(f"\n{label}: test macro F1 (%) by layer")
    print(table.round(1).to_string())
    for probe in dict.fromkeys(r.probe for r in results):
        # the layer a user would pick without peeking at test: best validation F1
        best = max((r for r in results if r.probe == probe), key=lambda r: (r.valid_f1_macro, -r.layer))
        rec = best.test["recall"]
        print(f"  {probe:20s} best layer by valid F1: {best.layer}  test F1 {best.test['f1_macro']:.1f}  "
              f"recall F {rec['F']:.1f} M {rec['M']:.1f}")


def run_probe(args) -> int:
    import pandas as pd
    from analysis.probing import (ProbeResult, Recipe, parse_layers, parse_probes, probe_layers, probe_splits,
                                  rows_for_store)
    from analysis.probing.figures import plot_attention_profiles, plot_f1_by_layer
    from corpora.base.atomic import write_json
    from corpora.base.errors import UserError
    from corpora.base.provenance import config_hash, file_fingerprint
    from corpora.table import read_table, resolve_audio
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.device import runtime_info
    from ssl_pretrain.feature_store import FeatureStore, extractor_for

    device, precision = runtime(args)
    probes = parse_probes(args.probes)
    ckpts = [c.strip() for arg in args.ckpt for c in arg.split(",") if c.strip()]
    if args.name and len(ckpts) != 1:
        raise UserError("--name needs exactly one --ckpt", fix="drop --name to file each under its own name")
    table = read_table(args.table)
    if args.corpus:
        table = table[table["corpus"].isin(args.corpus.split(","))].reset_index(drop=True)
    splits = probe_splits(table, seed=args.seed, source=args.table,
                          max_utts={"train": args.max_train, "valid": args.max_valid, "test": args.max_test})
    rows = pd.concat([splits[s] for s in ("train", "valid", "test")], ignore_index=True)
    rows = rows.assign(audio=resolve_audio(rows, args.table).to_numpy())
    print("probe data: " + ", ".join(f"{s} {len(splits[s])} utts ({splits[s]['speaker'].nunique()} speakers)"
                                     for s in ("train", "valid", "test")))
    recipe = Recipe(lr=args.lr, max_epochs=args.max_epochs)
    out = Path(args.out).resolve()
    models = []
    for ckpt in ckpts:
        ref = CheckpointRef.resolve(ckpt, args.registry, name=args.name, trust=args.trust_checkpoint)
        models.append(ref)
        if args.random_init and not ref.is_fbank:  # filterbanks have no weights to randomise
            models.append(ref.twin(args.seed))
    features = FeatureStore(feature_store(args))
    store = None
    if args.db:
        from analysis.store import ResultsStore
        store = ResultsStore(args.db)
    summary, f1_rows, profiles = {}, [], {}
    try:
        for ref in models:
            label = ref.name
            print(f"\n== {label}")
            feats = features.view(extractor_for(ref, device, precision), rows, "all", progress=not args.quiet)
            layers = parse_layers(args.layers, feats.n_layers)
            config = {"kind": "probe", "checkpoint": label, "ssl": ref.describe(),
                      "runtime": runtime_info(device, precision), "features": feats.describe()["entry"],
                      "table": file_fingerprint(args.table), "corpus": args.corpus,
                      "ids": config_hash({s: splits[s]["id"].tolist() for s in splits}), "layers": layers,
                      "probes": probes, "control": args.control, "seed": args.seed, "recipe": recipe.__dict__}
            result_path = out / "probes" / _slug(label) / "results.json"
            done = json.loads(result_path.read_text(encoding="utf-8")) if result_path.is_file() else None
            if done and done.get("config_hash") == config_hash(config):
                print(f"  already probed with this config: {result_path}")
                results = [ProbeResult(**r) for r in done["results"]]
            else:
                results = probe_layers(feats, splits, layers, probes, seed=args.seed, control=args.control,
                                       recipe=recipe, progress=not args.quiet)
                write_json(result_path, {"config_hash": config_hash(config), "config": config,
                                         "results": [r.as_dict() for r in results]})
            if store is not None and store.find_done(config, kind="probe") is None:
                run_id = store.start_run("probe", config, name=label, seed=args.seed,
                                         inputs=[file_fingerprint(args.table)])
                n = store.add_scores(run_id, rows_for_store(results, label, args.seed, recipe), finish=True)
                print(f"  {n} rows -> {args.db} (run {run_id})")
            _print_table(label, results)
            summary[label] = [r.as_dict() for r in results]
            f1_rows += [{"checkpoint": label, "layer": r.layer, "probe": r.probe, "value": r.test["f1_macro"]}
                        for r in results]
            att = [r for r in results if r.probe == "attention"]
            if att:
                best = max(att, key=lambda r: (r.valid_f1_macro, -r.layer))
                profiles[f"{label} · layer {best.layer}"] = best.profile
    finally:
        if store is not None:
            store.close()
    write_json(out / "probe_results.json", summary)
    f1 = pd.DataFrame(f1_rows)
    from corpora.base.atomic import atomic_open
    with atomic_open(out / "probe_f1.tsv") as f:
        f1.to_csv(f, sep="\t", index=False, float_format="%.4f")
    plots = [p for p in (plot_f1_by_layer(f1, out / "f1_by_layer.png"),
                         plot_attention_profiles(profiles, out / "attention_profile.png")) if p]
    print(f"\nwrote {out / 'probe_results.json'}, {out / 'probe_f1.tsv'}" + "".join(f", {p}" for p in plots))
    return 0


def run_correlate(args) -> int:
    from analysis.probing.figures import correlate, correlation_points, plot_correlation
    from analysis.store import ResultsStore
    from corpora.base.atomic import write_json
    from corpora.base.errors import UserError
    layer = args.layer.strip().lower()
    if layer not in ("last", "best"):
        if not layer.isdigit():
            raise UserError(f"bad layer {args.layer!r}", path="--layer", fix="use last, best or a layer number")
        layer = int(layer)
    with ResultsStore(args.db, readonly=True) as store:
        scores = store.scores()
    points = correlation_points(scores, probe=args.probe, layer=layer, subset=args.subset, source=args.db)
    result = correlate(points, source=args.db)
    out = Path(args.out) if args.out else Path(args.db).parent / "probe_correlation"
    write_json(out / "correlation.json", {**result, "probe": args.probe, "layer": args.layer,
                                           "points": points.to_dict(orient="records")})
    png = plot_correlation(points, result, out / "correlation.png")
    print(points.round(2).to_string(index=False))
    print(f"\nn = {result['n']}  Pearson r = {result['pearson_r']:.3f}  R² = {result['r2']:.3f}  "
          f"p = {result['p_value']:.3g}")
    print(f"wrote {out / 'correlation.json'}, {png}")
    return 0


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description=help, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    r = sub.add_parser("run", help="probe each layer of one or more checkpoints for speaker gender",
                       description="Train gender probes on every requested layer's hidden states.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    r.add_argument("--ckpt", action="append", required=True, metavar="NAME",
                   help="registered checkpoint name or path (fairseq .pt or transformers folder); repeat or "
                        "comma-separate for several. Results are filed under the registered name, or for a path "
                        "under its folder (runs/F/checkpoint_best.pt -> F) or file/folder name; see --name")
    r.add_argument("--name", default=None, help="file the results under this name (one --ckpt only)")
    r.add_argument("--registry", default=None, help="checkpoint registry JSON (default runs/checkpoints.json)")
    r.add_argument("--table", required=True, help="utterance table (TSV) with train/valid/test split labels")
    r.add_argument("--corpus", default=None, help="only rows of these corpora (comma-separated)")
    r.add_argument("--layers", default="all",
                   help="all, last, or comma-separated layer numbers (0 = the transformer's input; default all)")
    r.add_argument("--probes", default="attention,mean,max,positions",
                   help="comma-separated: attention, mean, max, positions (default: all four)")
    r.add_argument("--out", required=True, help="output directory (results, plots)")
    r.add_argument("--db", default=None, help="also store the scores in this results DB (e.g. runs/results.db)")
    r.add_argument("--seed", type=int, default=0, help="seed for splits, probes and --random-init (default 0)")
    r.add_argument("--control", action="store_true",
                   help="also train every probe on shuffled labels (should stay near 50%% F1)")
    r.add_argument("--no-random-init", dest="random_init", action="store_false",
                   help="skip the random-init twin (by default every checkpoint is also probed with random weights "
                   "of the same architecture, seeded, so the table shows what pretraining added)")
    r.add_argument("--random-init", dest="random_init", action="store_true", help=argparse.SUPPRESS)
    r.add_argument("--max-train", type=int, default=1000, help="at most this many train utterances (default 1000)")
    r.add_argument("--max-valid", type=int, default=200, help="at most this many valid utterances (default 200)")
    r.add_argument("--max-test", type=int, default=400, help="at most this many test utterances (default 400)")
    r.add_argument("--lr", type=float, default=1e-4,
                   help="the attention probe's starting learning rate (default 1e-4, the paper's; "
                        "a larger one, e.g. 1e-3, ends sooner but is no longer the paper's recipe)")
    add_model_options(r)
    r.add_argument("--max-epochs", type=int, default=400,
                   help="cap on the attention probe's epochs (default 400; early stopping usually ends sooner)")
    r.set_defaults(func=run_probe)

    c = sub.add_parser("correlate", help="probe F1 against MuST-SHE gender accuracy across checkpoints",
                       description="Pearson r, R² and p-value of gender-translation accuracy (MuST-SHE rows) "
                                   "against probe macro F1, with a scatter plot (the probing paper's Figure 1).",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--db", required=True, help="results DB with probe and mustshe rows")
    c.add_argument("--probe", default="attention", help="which probe's F1 (default attention)")
    c.add_argument("--layer", default="last", help="last (default), best, or a layer number")
    c.add_argument("--subset", default="test", help="evaluation subset of both kinds of rows (default test)")
    c.add_argument("--out", default=None, help="output directory (default: probe_correlation/ next to the DB)")
    c.set_defaults(func=run_correlate)
