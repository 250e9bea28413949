"""`gendergap score mustshe` and `gendergap score winomt`: gender-translation scores.

Thin wiring over analysis.gender_translation (analysis.mustshe, analysis.winomt); the `score`
group itself is created by gendergap/cmd_score.py, which calls add_gender_commands().
"""
from __future__ import annotations

import argparse

from gendergap.options import options_of, out_file, path_name

MUSTSHE_EPILOG = """\
protocol (the official MuST-SHE script's counting):
  per row, each GENDERTERMS pair `correct wrong` is looked up among the lower-cased hypothesis
  tokens (each token matches once); coverage = found / terms, accuracy = correct / (correct+wrong),
  in percent, overall, per CATEGORY (1F 1M 2F 2M), per gender form (F M) and per speaker gender;
  plus sacreBLEU against REF and WRONG-REF (diff = correct - wrong).

hypotheses: one line per TSV row in the TSV's order (an empty line for an empty output), or
`id<TAB>text` lines keyed by the TSV's ID column.

examples:
  gendergap score mustshe --tsv MONOLINGUAL.fr.v1.2.tsv --hyps hyp.fr.txt --tokenize --json ms.json
  gendergap score mustshe --tsv ms.tsv --hyps hyp.txt --json ms.json --db runs/results.db --checkpoint F-tiny
"""

WINOMT_EPILOG = ("""\
gold: WinoMT's en.txt (tab-separated: gender, entity index, English sentence, entity profession).
translations (--format, default auto):
  mt_gender  `English sentence ||| translation` per line, as mt_gender ships its systems'
             outputs (translations/<system>/en-fr.txt); chosen when the first line has ` ||| `.
             Each English side must be its gold line's sentence (the first that is not is refused,
             naming the line); a file with other lines than the gold (e.g. --gold en_pro.txt with
             the full file) is paired by English sentence, as mt_gender pairs it.
  plain      one translation per gold line, in order (or `index<TAB>text`, 0-based).

methods (how the entity's gender is read from the translation):
  aligned  (default) mt_gender's: the English sentence is word-aligned to the translation
           (eflomal, forward links, the whole set at once; 2,700 sentences/s on one core), """
                 """the target words aligned to the
           entity and to the article before it are parsed by spaCy (fr/es/it_core_news_sm) and
           their morphological Gender votes. Nothing aligned, or no Gender feature: unknown
           (n_unaligned counts the first). The one difference from mt_gender is the aligner:
           mt_gender used fast_align, which pip cannot install; eflomal samples, so its links
           vary a little run to run -- --save-alignments keeps them, --alignments reuses them.
  lexicon  no aligner: the profession lexicon's masculine/feminine forms (extend it with
           --lexicon FILE, same columns as analysis/lexicons/<lang>.tsv), the determiner before
           an epicene form, spaCy morphology when a model is installed. No aligner.
An entity that cannot be gendered counts as wrong (n_unknown says how many).
delta_g = F1(male) - F1(female); delta_s = acc(pro) - acc(anti) with --pro/--anti (subsets of gold).

--reference: which mt_gender the figures follow, when an entity is found in the translation
but carries no gender (spaCy gives no Gender feature; lexicon: an epicene form, no determiner):
  current  (default) mt_gender since commit 5d72d59 (2020-10-06, "fixing neutral bug") and at
           its HEAD: unknown, always wrong.
  acl2019  mt_gender at 57d8b48 (2019-08-22), which produced the paper's logs: neutral, which
           counts as correct on the 240 neutral-gold (Winogender) lines of en.txt -- e.g. 52 for
           Google Translate in its fr log. Use it to compare with the published 2019 figures.
  Nothing found at all (unaligned) is unknown in both. ΔG is the same in both (male and female
  F1 do not count neutral predictions); accuracy moves.
pro/anti lines are matched to the gold as mt_gender matches them: each line once (the last gold
line with the same four columns), so n_pro = n_anti = 1,584 on the 2019 en.txt.

rounding: by default every figure is computed at full precision and only printed to one decimal.
--official-rounding rounds as mt_gender's evaluate.py does (at both commits): accuracy,
precision and recall rounded to one decimal first, F1 from the rounded P and R (rounded
again), ΔG and ΔS as differences of rounded figures (it can move a figure by 0.1). Rounding
and --reference are independent: mt_gender's 2019 logs are --reference acl2019
--official-rounding.

--predictions FILE writes mt_gender's per-sentence file (CSV: Sentence, Predicted gender) for
either method, so the two methods, or this scorer and mt_gender, can be diffed line by line.

examples:
  gendergap score winomt --gold en.txt --translations hyp.fr.txt --lang fr \\
      --pro en_pro.txt --anti en_anti.txt --json wino.json --predictions wino.pred.csv \\
      --save-alignments wino.fr.align
  gendergap score winomt --gold en.txt --translations hyp.fr.txt --lang fr --alignments wino.fr.align \\
      --official-rounding --json wino.json          # the same links again: the same figures
  # mt_gender's own files, as it ships them (2019 en.txt + Google's `English ||| French` file),
  # scored as its ACL 2019 log was (that log: acc 63.6, F1 male 69.7, female 63.3):
  gendergap score winomt --gold mt_gender/data/aggregates/en.txt \\
      --translations mt_gender/translations/google/en-fr.txt --lang fr \\
      --pro mt_gender/data/aggregates/en_pro.txt --anti mt_gender/data/aggregates/en_anti.txt \\
      --reference acl2019 --official-rounding --json google.json
""")


def add_gender_commands(score_subparsers) -> None:
    """Add the `mustshe` and `winomt` leaves to the `score` group's subparsers."""
    p = score_subparsers.add_parser(
        "mustshe", help="MuST-SHE term coverage, gender accuracy and correct/wrong-reference BLEU",
        description="Score translations on MuST-SHE.", epilog=MUSTSHE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tsv", required=True, help="the MuST-SHE TSV (REF, WRONG-REF, CATEGORY, GENDERTERMS columns)")
    p.add_argument("--hyps", required=True, help="the system's translations (UTF-8)")
    p.add_argument("--tokenize", action="store_true",
                   help="Moses-tokenise the hypotheses first (the official protocol expects tokenised text)")
    p.add_argument("--lang", default=None, help="target language for --tokenize (default: from the LANG column)")
    p.add_argument("--json", type=out_file("--json"), required=True, metavar="OUT", help="write the scores here (JSON)")
    _add_store_options(p)
    p.set_defaults(func=run_mustshe)

    p = score_subparsers.add_parser(
        "winomt", help="WinoMT/WinoST gender accuracy, F1 per gender, ΔG and ΔS",
        description="Score translations of WinoMT-style sentences (WinoST's text side).", epilog=WINOMT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gold", required=True, help="WinoMT en.txt (gender, index, sentence, profession)")
    p.add_argument("--translations", required=True,
                   help="the translations (UTF-8): mt_gender's `English ||| translation` lines or one per gold line")
    p.add_argument("--format", default="auto", choices=("auto", "plain", "mt_gender"), dest="translations_format",
                   help="--translations' format (default: auto, mt_gender when the first line has ` ||| `)")
    p.add_argument("--lang", required=True, choices=("fr", "es", "it"), help="target language")
    p.add_argument("--pro", default=None, help="pro-stereotypical subset of the gold lines (for ΔS)")
    p.add_argument("--anti", default=None, help="anti-stereotypical subset of the gold lines (for ΔS)")
    p.add_argument("--method", default="aligned", choices=("aligned", "lexicon"),
                   help="aligned: mt_gender's alignment + spaCy morphology (default); lexicon: no model")
    p.add_argument("--alignments", default=None, metavar="FILE",
                   help="aligned: Pharaoh links (i-j, one line per gold line) instead of running eflomal")
    p.add_argument("--save-alignments", default=None, metavar="FILE",
                   help="aligned: keep eflomal's links here (rescore exactly with --alignments)")
    p.add_argument("--lexicon", default=None,
                   help="lexicon: extra profession lexicon TSV (profession, masculine, feminine; forms separated by |)")
    p.add_argument("--reference", default="current", choices=("current", "acl2019"),
                   help="mt_gender semantics for a found but genderless entity: current (default; 5d72d59, "
                        "2020: unknown) or acl2019 (57d8b48, the paper's logs: neutral, correct on neutral gold)")
    p.add_argument("--official-rounding", action="store_true",
                   help="round as mt_gender reports (P/R to 0.1 before F1); default: full precision")
    p.add_argument("--predictions", default=None, metavar="FILE",
                   help="write mt_gender's per-sentence predictions (CSV) here")
    p.add_argument("--json", type=out_file("--json"), required=True, metavar="OUT", help="write the scores here (JSON)")
    _add_store_options(p)
    p.set_defaults(func=run_winomt)


def _add_store_options(p) -> None:
    p.add_argument("--db", default=None, help="also store the scores in this results DB (e.g. runs/results.db)")
    p.add_argument("--checkpoint", default=None, type=path_name("--checkpoint"),
                   help="the checkpoint/model name to file the scores under (with --db)")
    p.add_argument("--lang-pair", default="", help="language pair recorded with --db, e.g. en-fr")
    p.add_argument("--subset", default="test", type=path_name("--subset"),
                   help="subset name recorded with --db (default: test)")


def _config(args) -> dict:
    """The run's config in the results DB: every option given (the same options again add no run)."""
    return {k: v for k, v in vars(args).items() if k not in ("func", "db", "debug", "quiet", "version")}


def run_mustshe(args) -> int:
    from analysis.gender_translation import mustshe_summary, score_mustshe_files
    print(mustshe_summary(score_mustshe_files(**options_of(score_mustshe_files, args), config=_config(args))))
    return 0


def run_winomt(args) -> int:
    from analysis.gender_translation import score_winomt_files, winomt_summary
    print(winomt_summary(score_winomt_files(**options_of(score_winomt_files, args), config=_config(args))))
    return 0
