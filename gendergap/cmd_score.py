"""`gendergap score`: per-gender WER/BLEU with speaker-level CIs, Δrel, paired comparisons.

Thin wiring over analysis.score_file / analysis.delta / analysis.compare; MuST-SHE and WinoMT
leaves come from gendergap/cmd_score_gender.py when it is there.
"""
from __future__ import annotations

import argparse
import logging
from pathlib import Path

from analysis.bootstrap import MAX_RESAMPLES
from corpora.base.atomic import write_json
from gendergap import cmd_score_gender
from gendergap.options import options_of, out_file, path_name, resamples

log = logging.getLogger("gendergap.score")

SCORES = """\
inputs: references and hypotheses are UTF-8 `id<TAB>text` lines (an empty hypothesis is `id<TAB>`);
the utterance table (corpora/table.py) gives each id's speaker and gender (F or M).

scores are corpus-level, in percent: WER = total errors / total reference words, BLEU = corpus
BLEU from summed n-gram statistics (never a mean of per-utterance scores), computed for all,
F and M. delta_rel = 100 * (F - M) / (0.5 * (F + M)). CIs (default 95%) are percentile
bootstrap intervals that resample SPEAKERS within each gender (--bootstrap resamples, --seed;
0 is a real seed). With a single speaker in a gender the CI is undefined and written as null.
"""
SCORE_EPILOG = SCORES + """
examples (each subcommand's --help has its own):
  gendergap score asr --refs test.ref.tsv --hyps test.hyp.tsv --speakers test.tsv --json asr.json
  gendergap score st --refs test.en.tsv --hyps st.hyp.tsv --speakers test.tsv --json st.json --lang-pair fr-en
  gendergap score delta --female 22.3 --male 25.7          # prints -14.17
  gendergap score compare --a F-tiny.json --b M-tiny.json   # paired speaker-level test
"""
LEAF_EXAMPLES = {
    "asr": """
examples:
  gendergap score asr --refs test.ref.tsv --hyps test.hyp.tsv --speakers test.tsv --json asr.json
  gendergap score asr ... --hyps nbest.tsv --hyp-column 2   # id<TAB>text<TAB>score lines
  gendergap score asr ... --normalize lc-nopunct --db runs/results.db --checkpoint F-tiny --task asr-e2e
""",
    "st": """
examples:
  gendergap score st --refs test.en.tsv --hyps st.hyp.tsv --speakers test.tsv --json st.json --lang-pair fr-en
  gendergap score st ... --metric chrf --lowercase          # chrF, case-insensitive
  gendergap score st ... --db runs/results.db --checkpoint F-tiny --task st --lang-pair fr-en
""",
}


def register(subparsers, group: str, help: str) -> None:
    """Add the `score` group and its leaves (asr, st, delta, compare, mustshe, winomt)."""
    p = subparsers.add_parser(group, help=help, description=help, epilog=SCORE_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="score_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    _add_metric_leaves(sub)
    _add_delta_and_compare(sub)
    cmd_score_gender.add_gender_commands(sub)


def _add_metric_leaves(sub) -> None:
    """`score asr` and `score st`: one hypothesis file against its references, per gender."""
    from analysis.normalize import DESCRIPTIONS

    for name, metric_help in (("asr", "per-gender WER (jiwer) with speaker-level CIs and delta_rel"),
                              ("st", "per-gender BLEU (sacrebleu) with speaker-level CIs and delta_rel")):
        q = sub.add_parser(name, help=metric_help, description=metric_help, epilog=SCORES + LEAF_EXAMPLES[name],
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        q.add_argument("--refs", required=True, help="references, `id<TAB>text` per line (UTF-8)")
        q.add_argument("--hyps", required=True, help="hypotheses, `id<TAB>text` per line (UTF-8); a line with "
                                                      "more fields is refused unless --hyp-column names the text")
        q.add_argument("--hyp-column", type=int, default=None, metavar="N",
                       help="read the hypothesis text from field N (1-based; field 1 is the id), for decoders "
                            "that write e.g. `id<TAB>text<TAB>score`: --hyp-column 2")
        q.add_argument("--speakers", required=True, metavar="TABLE",
                       help="utterance table TSV with id, speaker, gender columns")
        # the metrics of analysis.metrics.METRICS of this kind, named here without importing them
        # (jiwer and sacrebleu: ~0.4 s on every --help); get_metric refuses any other name
        if name == "asr":
            q.add_argument("--metric", default="wer", metavar="{wer,cer}",
                           help="wer (words; default) or cer (characters, spaces included, as jiwer.cer)")
            q.add_argument("--normalize", default="none", choices=sorted(DESCRIPTIONS),
                           help="text normalisation applied to refs and hyps before WER/CER: "
                                + "; ".join(f"{k}: {v}" for k, v in DESCRIPTIONS.items()) + " (default: none)")
        else:
            q.add_argument("--metric", default="bleu", metavar="{bleu,chrf}", help="bleu (default) or chrf")
            q.add_argument("--tokenize", default="13a",
                           help="sacrebleu tokeniser (default: 13a; also intl, none, char, zh, ja-mecab, ko-mecab); "
                                "one that downloads a SentencePiece model (spm, flores101, flores200, spBLEU-1K) is "
                                "refused before anything is read: scoring runs offline")
            q.add_argument("--lowercase", action="store_true", help="case-insensitive (default: case-sensitive)")
        _add_bootstrap_options(q)
        q.add_argument("--level", type=float, default=0.95, help="CI level (default: 0.95)")
        q.add_argument("--json", type=out_file("--json"), metavar="OUT", default=None,
                       help="write the full result here (JSON)")
        q.add_argument("--db", default=None, help="also store the rows in this results DB (e.g. runs/results.db)")
        q.add_argument("--checkpoint", default=None, type=path_name("checkpoint name"),
                       help="model/checkpoint name for --db")
        q.add_argument("--task", default=None, type=path_name("--task"), help=f"task name for --db (default: {name})")
        q.add_argument("--lang-pair", default="", help="language pair for --db, e.g. fr-en")
        q.add_argument("--subset", default="test", type=path_name("--subset"),
                       help="subset name for --db (default: test)")
        q.set_defaults(func=run_score, score_kind=name)


def _add_delta_and_compare(sub) -> None:
    """`score delta` (Eq. 1 on two numbers) and `score compare` (a paired test of two systems)."""
    q = sub.add_parser("delta", help="print delta_rel of a female and a male score",
                       description="Print Δrel = 100 * (F - M) / (0.5 * (F + M)) to 2 decimals (Eq. 1 of the "
                                   "reference study).", epilog="example:\n  gendergap score delta --female 22.3 "
                                                               "--male 25.7    # -14.17",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--female", type=float, required=True, help="score on female speakers")
    q.add_argument("--male", type=float, required=True, help="score on male speakers")
    q.set_defaults(func=run_delta)

    q = sub.add_parser(
        "compare", help="paired speaker-level test: do two systems' scores or delta_rel differ?",
        description="Paired test of system A vs B on F, M, all and delta_rel. Both are resampled with ONE "
                    "shared speaker count matrix (bootstrap) or one shared swap matrix (ar), which is what "
                    "makes the test paired.",
        epilog="examples:\n  gendergap score compare --a F-tiny.json --b M-tiny.json\n"
               "  gendergap score compare --a A.json --b B.json --method ar --resamples 10000\n"
               "  gendergap score compare --db runs/results.db --run-a 3 --run-b 4\n"
               "For BLEU, when the hypothesis files named in the JSONs are unchanged, sacrebleu's own "
               "utterance-level paired tests are added as a cross-check.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    q.add_argument("--a", default=None, metavar="RUN_A.json", help="result JSON of system A (score asr|st --json)")
    q.add_argument("--b", default=None, metavar="RUN_B.json", help="result JSON of system B")
    q.add_argument("--db", default=None, help="instead of JSONs: the results DB holding both scoring runs")
    q.add_argument("--run-a", type=int, default=None, help="run id of system A in --db")
    q.add_argument("--run-b", type=int, default=None, help="run id of system B in --db")
    q.add_argument("--method", default="bootstrap", choices=("bootstrap", "ar"),
                   help="paired bootstrap (default) or approximate randomisation")
    q.add_argument("--resamples", type=resamples("--resamples", lo=1), default=None,
                   help=f"default: 1000 (bootstrap), 10000 (ar); at most {MAX_RESAMPLES:,}")
    q.add_argument("--seed", type=int, default=12345, help="RNG seed (default: 12345; 0 is a real seed)")
    q.add_argument("--json", type=out_file("--json"), metavar="OUT", default=None,
                   help="write the test result here (JSON)")
    q.set_defaults(func=run_compare)


def _add_bootstrap_options(q) -> None:
    q.add_argument("--bootstrap", type=resamples("--bootstrap"), default=1000, metavar="N",
                   help=f"speaker-level bootstrap resamples for the CIs (default: 1000; 0: no CI; at most "
                        f"{MAX_RESAMPLES:,})")
    q.add_argument("--seed", type=int, default=12345, help="bootstrap seed (default: 12345; 0 is a real seed)")


def run_score(args) -> int:
    from analysis.score_file import score_hypotheses, store_score, write_result
    from analysis.score_runs import print_result

    if args.db and Path(args.db).exists():   # a DB that will be refused is refused before the scoring work
        from analysis.store import ResultsStore
        ResultsStore(args.db, readonly=True).close()
    result = score_hypotheses(**options_of(score_hypotheses, args))
    print_result(result)
    if args.db:  # the DB first: a failing --db step leaves no JSON behind
        log.info("stored run %d in %s", store_score(result, **options_of(store_score, args)), args.db)
    if args.json:
        write_result(args.json, result)
        log.info("wrote %s", args.json)
    return 0


def run_delta(args) -> int:
    from analysis.delta import checked_delta_rel

    print(f"{checked_delta_rel(female=args.female, male=args.male):.2f}")
    return 0


def run_compare(args) -> int:
    from analysis.compare import compare_runs, comparison_text

    res = compare_runs(**options_of(compare_runs, args))
    print(comparison_text(res))
    if args.json:
        write_json(args.json, res)
    return 0
