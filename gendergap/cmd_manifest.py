"""`gendergap manifest build|stats`: thin wiring over manifests.build and manifests.stats."""
from __future__ import annotations

import argparse
import logging

from gendergap.options import amount, options_of, out_dir

log = logging.getLogger(__name__)

BUILD_EPILOG = """\
gender: F, M, balanced, any, or p=SHARE (female share, e.g. p=0.3).
examples:
  # the study's pretraining sets: female-only, male-only, balanced, as much as the table allows
  gendergap manifest build --table lb.tsv --gender F --format fairseq --valid-hours 1 --out m/F
  gendergap manifest build --table lb.tsv --gender balanced --downsample-corpus EPAC --format fairseq --out m/B
  # the study's balanced ASR set (Table 2): 34:09 per gender, 1 h valid (0:30 per gender), test speakers kept out
  gendergap manifest build --table mtedx.tsv --gender balanced --hours-per-gender 34.15 --valid-hours 1 \\
      --exclude-speakers mtedx_test.tsv --format speechbrain --out m/asr
  # Common Voice (48 kHz mp3, some 32 kHz) for fairseq pretraining: 16 kHz FLAC copies, written
  # once into the prepared-audio cache (re-runs reuse them; a killed run resumes), 4 threads
  gendergap manifest build --table cv.tsv --gender F --format fairseq --resample 16000 --jobs 4 --out m/cvF
  # 30% female, 10 h, for fr->en ST on features a later stage writes
  gendergap manifest build --table mtedx.tsv --gender p=0.3 --hours 10 --format s2t \\
      --text-column tgt_text_en --tgt-lang en --out m/st
  # lhotse manifests of a balanced ASR set (OUT/<split>/recordings|supervisions|cuts.jsonl.gz, gender kept)
  gendergap manifest build --table mtedx.tsv --gender balanced --valid-hours 1 --format lhotse --out m/lhotse
the output dir gets selection_<split>.tsv, selection_report.json (what was dropped and why)
and the format's files; it appears complete or not at all.
fairseq pretraining and Kaldi recipes read 16 kHz audio only: a table with other rates is refused
here, naming the rates and their counts, unless --resample 16000 is given (nothing is resampled
without asking: copies of a large corpus take disk space). The corpus itself is never modified.
"""

STATS_EPILOG = """\
examples:
  gendergap manifest stats m/asr                  # a manifest dir (its selection_<split>.tsv)
  gendergap manifest stats mtedx.tsv --format markdown   # a whole table, by its split column
"""


def run_build(args) -> int:
    from manifests.build import build_from_options, dropped_lines, prepared_audio_line, split_lines

    report = build_from_options(**options_of(build_from_options, args))
    for line in split_lines(report):
        print(line)
    for line in dropped_lines(report):
        log.info("%s", line)
    audio = prepared_audio_line(report, args.resample)
    if audio:
        print(audio)
    print(f"wrote {args.out} ({args.format}); see selection_report.json")
    return 0


def run_stats(args) -> int:
    from manifests.stats import format_stats, load_selection

    print(format_stats(load_selection(args.path), args.format, with_seconds=args.seconds), end="")
    return 0


def register(subparsers, group: str, help: str) -> None:
    p = subparsers.add_parser(group, help=help, description=help[0].upper() + help[1:] + ".")
    sub = p.add_subparsers(dest="manifest_cmd", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    _add_build(sub)

    s = sub.add_parser("stats",
                       help="hours:minutes and speakers per gender, per split and corpus (the study's Tables 1-2)",
                       description="Print duration (hours:minutes) and speaker counts per gender, per split "
                                   "and per corpus, in the layout of the reference study's Tables 1 and 2.",
                       epilog=STATS_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("path", help="a manifest dir (from `manifest build`) or an utterance table TSV")
    s.add_argument("--format", choices=["text", "csv", "markdown"], default="text")
    s.add_argument("--seconds", action="store_true", help="durations as h:mm:ss (for small sets)")
    s.set_defaults(func=run_stats)


def _add_build(sub) -> None:
    b = sub.add_parser("build", help="select utterances by gender and duration, export for an engine",
                       description="Select a gender-filtered, duration-targeted, speaker-disjoint train "
                                   "(+ valid) set from an utterance table and export it.",
                       epilog=BUILD_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--table", required=True, action="append",
                   help="utterance table TSV (gendergap corpus index/synth); "
                   "repeat it for several: they are merged as `corpus merge` does (see its --help), never one kept")
    b.add_argument("--gender", required=True, help="F, M, balanced, any, or p=SHARE (female share)")
    b.add_argument("--format", required=True, choices=["fairseq", "s2t", "speechbrain", "kaldi", "lhotse"],
                   help="fairseq = wav2vec manifest; s2t = fairseq speech_to_text TSV + config + spm; speechbrain = "
                        "CSV per split; kaldi = data dir per split; lhotse = recordings/supervisions/cuts.jsonl.gz "
                        "per split (gender kept: F, M, or none for U)")
    b.add_argument("--out", type=out_dir("--out"), required=True,
                   help="output directory (must be new or empty, unless --overwrite)")
    b.add_argument("--hours", type=amount("--hours"),
                   help="train hours overall, split by the gender share (default: all the table allows)")
    b.add_argument("--hours-per-gender", type=amount("--hours-per-gender"),
                   help="train hours per gender (F, M, balanced)")
    b.add_argument("--valid-hours", type=amount("--valid-hours"),
                   help="valid hours overall, split by the share (balanced 1 = 0:30 F + 0:30 M); the table's "
                        "valid rows first, then whole training speakers. Default: the table's valid rows as they are")
    b.add_argument("--seed", type=int, default=0, help="sampling seed (same seed + table = same selection)")
    b.add_argument("--exclude-speakers", metavar="FILE",
                   help="speakers to leave out: one per line, or a table (its speaker column), e.g. the test set")
    b.add_argument("--exclude-ids", metavar="FILE", help="utterance ids to leave out: one per line, or a table")
    b.add_argument("--holdout-split", action="append", default=None,
                   help="split whose rows and speakers are never selected (default: test; repeatable)")
    b.add_argument("--train-split", action="append", metavar="SPLIT",
                   help="split label that feeds train, e.g. pretrain (repeatable; default: all but valid/dev/test)")
    b.add_argument("--corpus", action="append", help="keep only this corpus (repeatable)")
    b.add_argument("--corpus-hours", action="append", metavar="CORPUS=H",
                   help="cap a corpus at H hours, keeping its gender mix")
    b.add_argument("--downsample-corpus", action="append", metavar="CORPUS",
                   help="only this corpus may lose rows to meet the targets (the study: EPAC); repeatable")
    b.add_argument("--drop-mixed-speakers", action="store_true",
                   help="leave out speakers with both F and M rows instead of failing")
    b.add_argument("--keep-unknown", action="store_true", help="keep gender U rows (only meaningful with --gender any)")
    b.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    _add_build_export_options(b)
    b.set_defaults(func=run_build)


def _add_build_export_options(b) -> None:
    e = b.add_argument_group("export options")
    e.add_argument("--root", help="fairseq: the manifest's root line (default: the common directory)")
    e.add_argument("--materialise", choices=["auto", "always", "never"], default="auto",
                   help="fairseq: cut segments into wavs under OUT/audio (auto: segments only)")
    e.add_argument("--resample", type=int, metavar="RATE",
                   help="fairseq/kaldi: read audio at another rate, stereo, mp3/opus or .wav.gz from RATE Hz mono "
                        "copies (fairseq and Kaldi read 16000 only), e.g. --resample 16000")
    e.add_argument("--audio-cache", metavar="DIR",
                   help="where --resample writes its copies, shared by every manifest built from the same audio "
                        "(default $GENDERGAP_AUDIO_CACHE, else prepared-audio beside the feature store: "
                        "runs/prepared-audio)")
    e.add_argument("--audio-format", choices=["flac", "wav"], default="flac",
                   help="fairseq --resample: format of the copies, 16-bit (default flac; kaldi always gets wav)")
    e.add_argument("--jobs", type=int, metavar="N",
                   help="threads preparing or cutting audio (default: cores, at most 8)")
    e.add_argument("--text-column", help="s2t/speechbrain/kaldi/lhotse: the text column (default: text)")
    e.add_argument("--tgt-lang", help="s2t: tgt_lang column value")
    e.add_argument("--vocab-size", type=int,
                   help="s2t: sentencepiece vocabulary size (default 1000, fewer on tiny text)")
    e.add_argument("--feature-template", help="s2t: feature path per row, e.g. 'fbank80/{safe_id}.npy'")
    e.add_argument("--n-frames-column",
                   help="s2t: table column holding n_frames (default: 25/10 ms frames of the duration)")
    e.add_argument("--audio-root", help="s2t: config.yaml audio_root")
    e.add_argument("--data-root", help="speechbrain: write wav paths as $data_root/... under this dir")
