"""`gendergap report`: the paper's tables and plots from the results store (thin wiring)."""
from __future__ import annotations

import argparse

from gendergap.options import out_dir

EPILOG = """\
writes into DIR:
  report.md                        all tables, which Δrel gaps are significant, the figures
  table3_pretraining.{md,tex,csv}  updates, hours, M/F/U % of every registered checkpoint
                                   (with --registry)
  table4_asr.{md,tex,csv}          WER M, F, All, Δrel per checkpoint; one block per ASR task
                                   (asr-hybrid, asr-frozen, asr-e2e)
  table5_st.{md,tex,csv}           BLEU All [M, F] and Δrel per checkpoint and language pair (task st)
  gender_translation.{md,tex,csv}  MuST-SHE coverage / accuracy per category (when scored)
  winomt.csv, other_scores.csv     WinoMT scores; every row no table shows (probes, ...)
  probes.csv, probes_by_layer.png  gender-probe macro F1 per checkpoint, layer and probe
  delta_rel.png, per_speaker.png   Δrel with 95% CI bars; per-speaker score distributions
  conditions_<task>.{md,tex,csv}   the pretraining conditions compared: the primary, secondary and
                                   reference tests with their CIs, when the DB holds conditions
                                   rows (a sweep writes them); <task> adds _<pair> for ST
  trend_<task>.png                 Δrel against female share, with the fitted slope (4+ shares)
  mixed_<task>.{md,csv}            the per-utterance mixed model: F/M error-rate ratio per
                                   condition, before and after the voice measures (when fitted)
  f0_<task>.png                    per-speaker error against median F0
  .gendergap-outputs.json          the record of the files above that this report wrote
Tables 1 and 2 (table1_pretraining_data, table2_downstream_data: the data's hours and speakers)
need the study's manifests and tables: a sweep's report writes them, this command does not.

The report is built in a hidden folder beside DIR (.DIR.<pid>.*.partial) and swapped in at the end,
so a kill or a full disk leaves the previous report as it was. It replaces or removes only the files
its record lists: everything else in DIR (your notes, .git/, .gitignore, a table1_notes.md of your
own) is kept, whatever its name, and a file of yours named as a file the report writes is refused,
not replaced. DIR must be new, empty or written by an earlier report: any other folder is refused
(exit 2), never emptied. A report folder written before the record existed is accepted when it holds
report.md and nothing but files named as the report's; otherwise move your files out for one run.

examples:
  gendergap report --db runs/results.db --out report/
  gendergap report --db runs/results.db --out report-valid/ --subset valid
  gendergap report --db runs/results.db --out report/ --registry runs/checkpoints.json
"""


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description="Write the study's tables (Markdown, LaTeX, CSV) "
                              "and plots (PNG) from a results DB.", epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--db", default="runs/results.db", help="the results DB (default: runs/results.db)")
    p.add_argument("--out", type=out_dir("--out"), required=True, metavar="DIR", help="directory for the report files")
    p.add_argument("--subset", default="test", help="which evaluation subset to tabulate (default: test)")
    p.add_argument("--registry", metavar="FILE", default=None,
                   help="checkpoint registry JSON (as `gendergap ckpt add` writes, e.g. runs/checkpoints.json): "
                        "adds Table 3, each model's pre-training updates, hours and M/F/U %% (default: no Table 3)")
    p.set_defaults(func=run)


def run(args) -> int:
    from analysis.report import write_report
    written = write_report(args.db, args.out, subset=args.subset, registry=args.registry)
    for name, path in written.items():
        print(f"wrote {path}")
    return 0
