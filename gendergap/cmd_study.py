"""`gendergap study`: the demo (the whole study in miniature on the built-in corpus)."""
from __future__ import annotations

import argparse

from corpora.base.errors import UserError
from gendergap.cmd_sweep import TRUST_HELP
from gendergap.options import out_dir, out_file

DESCRIPTION = ("""\
Run the whole study in miniature on the built-in synthetic gendered corpus, on a CPU: generate
the corpus (12 test voices per gender), build pretraining manifests of five female shares (0, 25,
50, 75, 100 %), register nine tiny wav2vec 2.0 checkpoints (two pretraining runs per share, one for
25 %; shipped, or --pretrain them here), then: frozen-feature ASR and fr->en ST once per
pretraining run (FBANK, without pretraining, with three training seeds), fine-tuned CTC ASR, en->fr
ST on the gender set with MuST-SHE scoring and gender probes on each share's first run; score per
gender with speaker-level confidence intervals; compare the conditions per task, the pretraining
run as the unit (the trend over the shares, its lack of fit, the smallest difference the design
could detect); model each ASR task per utterance (a mixed model with the test voices' pitch,
speaking rate, length and SNR, fitted by R's glmmTMB); write report.md, which opens with the
answer (does the female share of pretraining change the gap?), then Tables 3, 4, 5, the
comparison tables and trend plots, the gap by utterance, gender translation, probes.

It is `gendergap sweep --config configs/mini.yaml` run here two jobs at a time. Re-running
skips finished jobs (a no-op when all are done); a killed study resumes where it stopped.

examples:
  gendergap study                        # everything, into ./study
  gendergap study --out /tmp/s --seed 1
  gendergap study --pretrain             # pretrain the nine tiny checkpoints too (hours: ~18 CPU-min each, """
               """plus seed retries)
  gendergap study --config configs/mini-full.yaml --out study-full   # longer frozen ASR and fine-tuning
  gendergap study --config my_study.yaml # another study config (see `gendergap sweep --schema`)
""")


def register(subparsers, group: str, help_: str) -> None:
    p = subparsers.add_parser(group, help=help_, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="study config YAML (default: configs/mini.yaml, the built-in study)")
    p.add_argument("--out", type=out_dir("--out"), default="study", help="output directory (default: ./study)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed for corpus, selections and training (default: the config's, 0)")
    p.add_argument("--pretrain", action="store_true",
                   help="pretrain the nine tiny checkpoints anew instead of using the shipped ones")
    p.add_argument("--parallel", type=int, default=None, help="jobs at once (default: the config's, 2)")
    p.add_argument("--retry-failed", action="store_true", help="run jobs that failed in an earlier run again")
    p.add_argument("--trust-checkpoint", action="store_true", help=TRUST_HELP)
    p.add_argument("--record", metavar="FILE", default=None, type=out_file("--record"),
                   help="after a finished study, write its results and times to FILE (JSON) and the README's "
                        "results block from them, when ./README.md has its markers (docs/demo-results.json "
                        "is the README's source)")
    p.set_defaults(func=run)


def run(args) -> int:
    from gendergap.study import run_study
    if args.record and (args.pretrain or args.seed is not None):
        raise UserError("--record records the config as it is: not with --pretrain or --seed",
                        fix="run `gendergap study --record FILE` without them (or record another config)")
    rc = run_study(args.config, args.out, pretrain=args.pretrain, parallel=args.parallel, seed=args.seed,
                   retry_failed=args.retry_failed, trust=args.trust_checkpoint)
    if rc == 0 and args.record:
        from gendergap.demo_record import record_study  # torch (the CPU's name): kept out of --help
        print(f"recorded: {record_study(args.config, args.out, args.parallel, args.record)}")
    return rc
