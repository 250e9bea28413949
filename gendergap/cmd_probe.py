"""`gendergap probe run|correlate`: gender probes per layer, and probe F1 vs gender accuracy.

Wiring only: features come from the feature store (ssl_pretrain.feature_store; extracted once
per checkpoint and rows, shared with frozen ASR and ST), the probes, scores, store rows and
plots from analysis.probing.
"""
from __future__ import annotations

import argparse

from corpora.feature_request import Layers
from gendergap.options import add_model_options, call, layer_spec, out_dir, path_name
from gendergap.runs.probe import probe_run

EPILOG = """\
what it does (Fucci et al. 2025, "Different Speech Translation Models Encode and Translate
Speaker Gender Differently", Appendices A and B):
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
(`probe run` probes every checkpoint's random-init twin unless --no-random-init; a study's sweep
probes the twin of its first pretrained checkpoint only.)
"""
CORRELATE_EPILOG = """\
The DB needs probe rows (`probe run --db`, or a study's probes task) and MuST-SHE rows (`score
mustshe --db`, or a study's gender-st task) for the same checkpoints.
examples:
  gendergap probe correlate --db runs/results.db --probe attention --layer last
  gendergap probe correlate --db study/results.db --layer best --out study/report/probe_correlation
"""


def run_correlate(args) -> int:
    from analysis.probing.figures import correlate_db

    r = correlate_db(db=args.db, probe=args.probe, layer=args.layer, subset=args.subset, out=args.out)
    print(r["points"].round(2).to_string(index=False))
    print(f"\nn = {r['n']}  Pearson r = {r['pearson_r']:.3f}  R² = {r['r2']:.3f}  p = {r['p_value']:.3g}")
    print(f"wrote {r['json']}, {r['png']}")
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
    r.add_argument("--name", default=None, type=path_name("--name"),
                   help="file the results under this name (one --ckpt only)")
    r.add_argument("--registry", default=None, help="checkpoint registry JSON (default runs/checkpoints.json)")
    r.add_argument("--table", required=True, action="append", help="utterance table (TSV) with train/valid/test split "
                   "labels; repeat it for several: they are merged as `corpus merge` does")
    r.add_argument("--corpus", default=None, help="only rows of these corpora (comma-separated)")
    r.add_argument("--layers", default="all", type=layer_spec("--layers"),
                   help="all, last, or comma-separated layer numbers (0 = the transformer's input; default all)")
    r.add_argument("--probes", default="attention,mean,max,positions",
                   help="comma-separated: attention, mean, max, positions (default: all four)")
    r.add_argument("--out", type=out_dir("--out"), required=True, help="output directory (results, plots)")
    r.add_argument("--db", default=None, help="also store the scores in this results DB (e.g. runs/results.db)")
    r.add_argument("--seed", type=int, default=0, help="seed for splits, probes and the random-init twin (default 0)")
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
    r.set_defaults(func=lambda a: call(probe_run, a))

    c = sub.add_parser("correlate", help="probe F1 against MuST-SHE gender accuracy across checkpoints",
                       description="Pearson r, R² and p-value of gender-translation accuracy (MuST-SHE rows) "
                                   "against probe macro F1, with a scatter plot (the probing paper's Figure 1).",
                       epilog=CORRELATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--db", required=True, help="results DB with probe and mustshe rows")
    c.add_argument("--probe", default="attention", help="which probe's F1 (default attention)")
    c.add_argument("--layer", default="last", type=layer_spec("--layer", Layers.one, words=("best",)),
                   help="last (default), best, or a layer number")
    c.add_argument("--subset", default="test", help="evaluation subset of both kinds of rows (default test)")
    c.add_argument("--out", type=out_dir("--out"), default=None,
                   help="output directory (default: probe_correlation/ next to the DB)")
    c.set_defaults(func=run_correlate)
