"""`gendergap score`: per-gender WER/BLEU with speaker-level CIs, Δrel, paired comparisons.

Thin wiring over analysis.scoring / analysis.delta / analysis.compare; MuST-SHE and WinoMT
leaves come from gendergap/cmd_score_gender.py when it is there.
"""
from __future__ import annotations

import argparse
import errno
import logging
import os
from pathlib import Path

from corpora.base.errors import UserError

log = logging.getLogger("gendergap.score")

SCORE_EPILOG = """\
inputs: references and hypotheses are UTF-8 `id<TAB>text` lines (an empty hypothesis is `id<TAB>`);
the utterance table (corpora/table.py) gives each id's speaker and gender (F or M).

scores are corpus-level, in percent: WER = total errors / total reference words, BLEU = corpus
BLEU from summed n-gram statistics (never a mean of per-utterance scores), computed for all,
F and M. delta_rel = 100 * (F - M) / (0.5 * (F + M)). CIs (default 95%) are percentile
bootstrap intervals that resample SPEAKERS within each gender (--bootstrap resamples, --seed;
0 is a real seed). With a single speaker in a gender the CI is undefined and written as null.

examples:
  gendergap score asr --refs test.ref.tsv --hyps test.hyp.tsv --speakers test.tsv --json asr.json
  gendergap score asr ... --hyps nbest.tsv --hyp-column 2   # id<TAB>text<TAB>score lines
  gendergap score asr ... --normalize lc-nopunct --db runs/results.db --checkpoint F-tiny --task asr-e2e
  gendergap score st --refs test.en.tsv --hyps st.hyp.tsv --speakers test.tsv --json st.json --lang-pair fr-en
  gendergap score delta --female 22.3 --male 25.7          # prints -14.17
  gendergap score compare --a F-tiny.json --b M-tiny.json   # paired speaker-level test
"""


def register(subparsers, group: str, help: str) -> None:
    """Add the `score` group and its leaves (asr, st, delta, compare, mustshe, winomt)."""
    p = subparsers.add_parser(group, help=help, description=help, epilog=SCORE_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="score_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    _add_metric_leaves(sub)
    _add_delta_and_compare(sub)
    from gendergap import cmd_score_gender
    cmd_score_gender.add_gender_commands(sub)


def _add_metric_leaves(sub) -> None:
    """`score asr` and `score st`: one hypothesis file against its references, per gender."""
    from analysis.normalize import DESCRIPTIONS

    for name, metric_help in (("asr", "per-gender WER (jiwer) with speaker-level CIs and delta_rel"),
                              ("st", "per-gender BLEU (sacrebleu) with speaker-level CIs and delta_rel")):
        q = sub.add_parser(name, help=metric_help, description=metric_help, epilog=SCORE_EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        q.add_argument("--refs", required=True, help="references, `id<TAB>text` per line (UTF-8)")
        q.add_argument("--hyps", required=True, help="hypotheses, `id<TAB>text` per line (UTF-8); a line with "
                                                      "more fields is refused unless --hyp-column names the text")
        q.add_argument("--hyp-column", type=int, default=None, metavar="N",
                       help="read the hypothesis text from field N (1-based; field 1 is the id), for decoders "
                            "that write e.g. `id<TAB>text<TAB>score`: --hyp-column 2")
        q.add_argument("--speakers", required=True, metavar="TABLE",
                       help="utterance table TSV with id, speaker, gender columns")
        if name == "asr":
            q.add_argument("--normalize", default="none", choices=sorted(DESCRIPTIONS),
                           help="text normalisation applied to refs and hyps before WER: "
                                + "; ".join(f"{k}: {v}" for k, v in DESCRIPTIONS.items()) + " (default: none)")
        else:
            q.add_argument("--metric", default="bleu", choices=("bleu", "chrf"), help="default: bleu")
            q.add_argument("--tokenize", default="13a", help="sacrebleu tokeniser (default: 13a)")
            q.add_argument("--lowercase", action="store_true", help="case-insensitive (default: case-sensitive)")
        _add_bootstrap_options(q)
        q.add_argument("--level", type=float, default=0.95, help="CI level (default: 0.95)")
        q.add_argument("--json", metavar="OUT", default=None, help="write the full result here (JSON)")
        q.add_argument("--db", default=None, help="also store the rows in this results DB (e.g. runs/results.db)")
        q.add_argument("--checkpoint", default=None, help="model/checkpoint name for --db")
        q.add_argument("--task", default=None, help=f"task name for --db (default: {name})")
        q.add_argument("--lang-pair", default="", help="language pair for --db, e.g. fr-en")
        q.add_argument("--subset", default="test", help="subset name for --db (default: test)")
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
    q.add_argument("--resamples", type=int, default=None, help="default: 1000 (bootstrap), 10000 (ar)")
    q.add_argument("--seed", type=int, default=12345, help="RNG seed (default: 12345; 0 is a real seed)")
    q.add_argument("--json", metavar="OUT", default=None, help="write the test result here (JSON)")
    q.set_defaults(func=run_compare)


def _add_bootstrap_options(q) -> None:
    q.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                   help="speaker-level bootstrap resamples for the CIs (default: 1000; 0: no CI)")
    q.add_argument("--seed", type=int, default=12345, help="bootstrap seed (default: 12345; 0 is a real seed)")


def run_score(args) -> int:
    from analysis.score_runs import print_result
    from analysis.scoring import score_files, store_result
    from corpora.base.atomic import write_json

    if args.db and not args.checkpoint:
        raise UserError("--db needs --checkpoint", fix="name the model the hypotheses come from")
    metric = "wer" if args.score_kind == "asr" else args.metric
    opts = ({"normalization": args.normalize} if args.score_kind == "asr"
            else {"tokenize": args.tokenize, "lowercase": args.lowercase})
    if not 0 < args.level < 1:
        raise UserError(f"--level {args.level} is not between 0 and 1", fix="e.g. --level 0.95")
    result = score_files(metric, args.refs, args.hyps, args.speakers, bootstrap=args.bootstrap, seed=args.seed,
                         level=args.level, hyp_column=args.hyp_column, **opts)
    print_result(result)
    if args.db:  # the DB first: a failing --db step leaves no JSON behind
        config = {"refs": str(Path(args.refs).resolve()), "hyps": str(Path(args.hyps).resolve()),
                  "table": str(Path(args.speakers).resolve()), "bootstrap": args.bootstrap, "seed": args.seed,
                  "level": args.level, **opts, **({"hyp_column": args.hyp_column} if args.hyp_column else {})}
        run_id = store_result(args.db, result, checkpoint=args.checkpoint, task=args.task or args.score_kind,
                              lang_pair=args.lang_pair, subset=args.subset, config=config)
        log.info("stored run %d in %s", run_id, args.db)
    if args.json:
        try:
            write_json(args.json, result)
        except OSError as e:  # a full or read-only disk: name the file asked for, not the temp name
            if isinstance(e, FileExistsError) and not Path(args.json).parent.is_dir():  # mkdir met a file
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), args.json) from e
            raise OSError(e.errno, e.strerror, args.json) from e
        log.info("wrote %s", args.json)
    return 0


def run_delta(args) -> int:
    from analysis.delta import delta_rel

    negative = [f"--{k} {v:g}" for k, v in (("female", args.female), ("male", args.male)) if v < 0]
    if negative:  # WER and BLEU are never negative: a sign slip, not a score
        raise UserError(f"{', '.join(negative)}: a WER or BLEU score cannot be negative",
                        fix="pass the two scores as printed, e.g. --female 22.3 --male 25.7")
    d = delta_rel(args.female, args.male)
    if d is None:
        raise UserError("delta_rel is undefined when female + male = 0", fix="pass the two scores, e.g. 22.3 25.7")
    print(f"{d:.2f}")
    return 0


def run_compare(args) -> int:
    from analysis.score_runs import fmt_score
    from analysis.compare import compare_results, load_result_json, result_from_db, sacrebleu_utterance_tests
    from corpora.base.atomic import write_json

    if args.db:
        if args.run_a is None or args.run_b is None:
            raise UserError("--db needs --run-a and --run-b", fix="pass the two scoring runs' ids")
        a, b = result_from_db(args.db, args.run_a), result_from_db(args.db, args.run_b)
        name_a, name_b = f"{args.db} run {args.run_a}", f"{args.db} run {args.run_b}"
    elif args.a and args.b:
        a, b, name_a, name_b = load_result_json(args.a), load_result_json(args.b), args.a, args.b
    else:
        raise UserError("compare needs --a and --b (result JSONs) or --db with --run-a and --run-b",
                        fix="e.g. gendergap score compare --a F.json --b M.json")
    n = args.resamples or (1000 if args.method == "bootstrap" else 10000)
    res = compare_results(a, b, n_resamples=n, seed=args.seed, method=args.method, name_a=name_a, name_b=name_b)
    if a["metric"] == "bleu":
        texts = _unchanged_texts(a, b)
        if texts:
            opts = a.get("options") or {}
            sp = sacrebleu_utterance_tests(*texts, seed=args.seed, tokenize=opts.get("tokenize", "13a"),
                                           lowercase=opts.get("lowercase", False))
            if sp["a"] == a["all"] and sp["b"] == b["all"]:  # the files still give the scored numbers
                res["sacrebleu_paired"] = sp
    print(f"{res['metric'].upper()} paired {res['method']} over speakers ({n} resamples, seed {args.seed}): A - B")
    for k in ("all", "F", "M", "delta_rel"):
        d, p = res["difference"][k], res["p_value"][k]
        ci = res["ci_difference"][k]
        print(f"  {k:9s} A {fmt_score(res['a'][k])}  B {fmt_score(res['b'][k])}  diff {fmt_score(d, ci)}  "
              f"p {'undefined' if p is None else f'{p:.4f}'}")
    if "sacrebleu_paired" in res:
        sp = res["sacrebleu_paired"]
        print(f"  sacrebleu utterance-level: bootstrap p {sp['bootstrap']['p_value']:.4f}, "
              f"ar p {sp['ar']['p_value']:.4f}")
    print(f"signature: {res['signature']}")
    if args.json:
        write_json(args.json, res)
    return 0


def _unchanged_texts(a: dict, b: dict):
    """(refs, hyps_a, hyps_b) when both runs' input files are still as they were scored, else None."""
    from analysis.scoring import align_texts, read_texts
    from corpora.base.provenance import file_fingerprint

    ia, ib = a.get("inputs") or {}, b.get("inputs") or {}
    try:
        for fp in (ia["refs"], ia["hyps"], ib["refs"], ib["hyps"]):
            now = file_fingerprint(fp["path"])
            if (now["size"], now["mtime"]) != (fp["size"], fp["mtime"]):
                return None
        if ia["refs"]["path"] != ib["refs"]["path"]:
            return None
        refs = read_texts(ia["refs"]["path"], "references")
        col_a, col_b = ((r.get("options") or {}).get("hyp_column") for r in (a, b))
        ids, ref_list, hyp_a = align_texts(refs, read_texts(ia["hyps"]["path"], "hypotheses", col_a),
                                           ia["refs"]["path"], ia["hyps"]["path"])
        _, _, hyp_b = align_texts(refs, read_texts(ib["hyps"]["path"], "hypotheses", col_b), ib["refs"]["path"],
                                  ib["hyps"]["path"])
    except (KeyError, OSError, UserError):
        return None
    return ref_list, hyp_a, hyp_b
