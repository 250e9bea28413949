"""`gendergap corpus`: index corpora into utterance tables, print their statistics, measure their
voices, generate the built-in synthetic corpus. Thin wiring: the work is in corpora.index, .merge,
.stats, .synth and corpora.voice_measures."""
from __future__ import annotations

import argparse
import logging
import sys

from corpora.base.atomic import write_text
from corpora.base.errors import UserError
from gendergap.options import count, options_of, out_dir, out_file

log = logging.getLogger(__name__)

DESCRIPTION = """\
Turn a corpus, in its layout as distributed, into one utterance table (TSV: id, audio, offset,
duration, sample_rate, speaker, gender, corpus, lang, split, text, gender_raw, tgt_text_<lang>,
extras), print per-gender statistics, or generate the built-in synthetic corpus.

examples:
  gendergap corpus synth --out data/synth --size mini
  gendergap corpus index --kind mtedx --root mtedx --lang fr --tgt-lang en \\
      --speaker-genders fr_speakers.tsv --out tables/mtedx_fr-en.tsv
  gendergap corpus merge tables/mtedx_fr-fr.tsv tables/mtedx_fr-en.tsv --out tables/mtedx.tsv
  gendergap corpus stats tables/mtedx_fr-en.tsv --format markdown
  gendergap corpus measure tables/mtedx_fr-en.tsv --split test --out mtedx_test.measures.tsv
  gendergap corpus filter tables/cv_fr.tsv --drop-unknown-gender valid,test --out tables/cv_fr.known.tsv
"""

FILTER_DESCRIPTION = """\
Write a table without the speakers of unknown gender (U) in the splits named; the other splits keep
them. A gender gap compares women and men, so a study refuses test speakers of unknown gender;
Common Voice leaves most speakers' gender blank. Whether to drop them, and from which splits, is
yours to decide: pretraining rows of unknown gender are best kept (they are speech the model
hears, and Table 3 reports them as the U share). The original table is left as it is.

examples:
  gendergap corpus filter cv_fr.tsv --drop-unknown-gender test --out cv_fr.test-known.tsv
  gendergap corpus filter cv_fr.tsv --drop-unknown-gender valid,test --out cv_fr.known.tsv
"""

MEASURE_DESCRIPTION = """\
Measure every utterance's voice: median F0 and F0 range over voiced frames (Praat's
autocorrelation pitch tracker through praat-parselmouth, one 60-500 Hz search range for every
voice, so the gender label never chooses the measure), the share of voiced frames, duration and
speech length (leading and trailing silence left out), words and speaking rate (words of the
`text` column per second of speech), speech level (dBFS) and a simple SNR (speech frames against
the quietest tenth of frames, capped at 60 dB). One row per utterance; --speakers adds a
per-speaker table of medians. The study's mixed model (report section "The gap by utterance")
adjusts the gender gap for these.

Measures are cached by audio content under --cache: the same segment is measured once, an edited
file again.

examples:
  gendergap corpus measure study/corpus/utterances.tsv --split test --out test.measures.tsv
  gendergap corpus measure cv_fr.tsv --split test --corpus cv-fr --out cv.tsv --speakers cv.speakers.tsv
"""

INDEX_DESCRIPTION = ("""\
Index one corpus into an utterance table. Durations and sample rates come from the audio
headers (read in parallel, never decoded; only float-coded wavs, the one kind that can hold
NaN/Inf samples, are also scanned for them). Gender labels are normalised to F/M/U (the raw label
is kept in gender_raw; an unknown label is reported and mapped to U). Any problem -- missing or
corrupt audio, NaN/Inf samples, a rate or channel count not accepted, a duplicate id, non-UTF-8
text, an unbalanced quote in a CSV, a segment past the end of its recording -- stops with one
line naming the file and line; nothing is written then. Known defects of released corpora are """
                     """handled, counted and summarised in one
warning line instead: a zero-byte Common Voice clip is skipped, an mTEDx/MuST-C segment running
past the end of its talk is trimmed, a speaker missing from a gender list is U; --strict makes
each of them an error. docs/bad-inputs.md lists every case.

kinds and their --root:
  mls          an MLS language dir (mls_french/: metainfo.txt, <split>/transcripts.txt, audio/)
  mtedx        the mTEDx root (with --lang/--tgt-lang) or a pair dir (fr-en/data/<split>/txt/...)
  commonvoice  a Common Voice locale dir (fr/: train.tsv dev.tsv test.tsv clips/)
               (any sample rate accepted by default: clips are 48 kHz mp3)
  covost2      the dir holding CoVoST 2's covost_v2.<src>_<tgt>.tsv (or the file), with --cv-root
               the Common Voice locale dir it was built on (validated.tsv, clips/): joined on path
               as fairseq does, train_covost rows are train, gender resolved per client_id over
               validated.tsv (any sample rate accepted by default, as for commonvoice)
  fleurs       a language dir of the google/fleurs dataset (data/fr_fr/: train.tsv dev.tsv
               test.tsv, audio/<split>/ extracted from audio/<split>.tar.gz); FLEURS has no
               speaker ids: each recording is its own speaker (warned: CIs too narrow)
  voxpopuli    what voxpopuli.get_asr_data wrote: R, R/transcribed_data or R/transcribed_data/fr
               (asr_<split>.tsv, <year>/<id>.ogg); gender resolved per speaker_id
  mustc        the MuST-C root (with --tgt-lang) or a pair dir (en-de/data/<split>/...)
  mustshe      the MuST-SHE release dir (tsv/ beside wav/), its tsv/ dir, or one TSV
  winost       a dir with WinoMT's en.txt and the WinoST wavs (any sample rate accepted by
               default: they are 48 kHz; *.wav.gz read as downloaded, decompressed in memory;
               __MACOSX/ and ._* are ignored)
  kaldi        a Kaldi data dir (wav.scp, [segments], text, utt2spk, [spk2gender], [utt2dur]);
               relative paths resolve against the recipe dir (parent of data/, or --kaldi-root);
               `cmd |` entries are kept as given and never run unless --allow-pipes
  lebenchmark  a LeBenchmark JSON file (or a dir of them)
  generic      a CSV/TSV file, with --map id=COL,audio=COL,speaker=COL,gender=COL,...
               (no path column: --path-template "{root}/{id[:4]}/{id}.ogg")
  lhotse       a lhotse CutSet file (cuts.jsonl.gz), a RecordingSet file with --supervisions,
               or a folder of lhotse recipe output (<corpus>_recordings_<split>.jsonl.gz +
               <corpus>_supervisions_<split>.jsonl.gz) or of `manifest build --format lhotse`
               output (<split>/recordings.jsonl.gz ...); one row per supervision; relative
               audio paths start from the working dir, as for lhotse, or --audio-dir
  hf           a Hugging Face datasets folder: save_to_disk output (dataset_dict.json or
               state.json) or <split>-*.parquet files (also under data/), as on the Hub;
               columns by --audio-column/--gender-column/... (defaults: the Hub's common
               names); embedded audio bytes are written once to --audio-dir as <id>.<ext>

--gender-map 'LABEL=F|M|U,...' maps labels gendergap does not know (or re-maps known ones), matched
case-insensitively, e.g. MuST-Speakers' Multi-Mix or a corpus's own words; every label still
unknown is listed, with its count, in one warning line and becomes U (gender_raw keeps it).

--speaker-genders takes `id<TAB>gender` lines or FBK's MuST-Speakers list as distributed
(header TALK-ID, TED-PRONOUN; keys are bare talk numbers such as 767); how many talks matched
is reported, with a warning when some or all did not.

examples:
  gendergap corpus index --kind mls --root mls_french --split train,dev --out mls_fr.tsv
  gendergap corpus index --kind commonvoice --root cv-corpus-17.0/fr --split train --out cv_fr.tsv
  gendergap corpus index --kind mustc --root MUSTC_v1.0 --tgt-lang de --speaker-genders MuST-Speakers.tsv """
                     """--out mustc.tsv
  gendergap corpus index --kind generic --root meta.csv --map audio=path,speaker=spk,gender=sex --out t.tsv
  gendergap corpus index --kind covost2 --root covost_tsv --cv-root cv-corpus-4-2019-12-10/fr \\
      --out covost_fr_en.tsv
  gendergap corpus index --kind fleurs --root fleurs/data/fr_fr --out fleurs_fr.tsv
  gendergap corpus index --kind voxpopuli --root voxpopuli/transcribed_data/fr --out voxpopuli_fr.tsv
  gendergap corpus index --kind kaldi --root s5/data/train --strict --out kaldi_train.tsv
  gendergap corpus index --kind winost --root winost --out winost.tsv
  gendergap corpus index --kind lhotse --root manifests/librispeech_cuts_dev-clean.jsonl.gz --out ls.tsv
  gendergap corpus index --kind lhotse --root data/manifests --split train,dev --out lhotse.tsv
  gendergap corpus index --kind hf --root cv_fr_saved --audio-dir cv_fr_audio --sample-rates any --out cv_hf.tsv
  gendergap corpus index --kind hf --root fleurs_fr_parquet --split train,validation --audio-dir fleurs_wav \\
      --speaker-column path --out fleurs_hf.tsv
  gendergap corpus index --kind mustc --root MUSTC_v1.0 --tgt-lang de --speaker-genders MuST-Speakers.tsv \\
      --gender-map 'Multi-Mix=U' --out mustc.tsv
""")

MERGE_DESCRIPTION = """Merge utterance tables into one (every command also takes several tables -- `--table` repeated,
a list in a study config -- and merges them in memory by these same rules; nothing is dropped):

  * audio paths become absolute (each table's relative paths are relative to its own dir);
  * rows of the SAME corpus name that are the same segment (same recording -- same path, or same
    file name and size, as each mTEDx pair ships its own copy of a talk -- offset, duration,
    speaker, source text, split) become ONE row with every table's tgt_text_<lang> columns;
  * rows of DIFFERENT corpus names are never joined, so a task's rows (selected by `corpus`)
    are exactly those of its own table; the segments such corpora share are counted, and an
    empty tgt_text_<lang> takes the same segment's translation from another corpus (a fr-fr
    row gets fr-en's English: ST can validate and test on fr-fr's sets, as the paper does);
  * --gender-map re-maps gender from gender_raw for the labels it names;
  * an id still on several rows becomes <corpus>/<id> (plus #<n>, n the position of its input
    table, when one corpus has two different segments under one id, which is warned about);
    the original id stays in the orig_id column and every rename is in the report;
  * the same audio segment under two different ids is warned about (both rows kept);
  * OUT.merge.json holds the report: inputs (path, size, mtime, rows), joins, renames with
    file and line, duplicates. One summary line is printed.

The mTEDx subsets of the reference study share talks and segment ids. Index them with their
corpus names (what the tasks of configs/boito2022.yaml select), then merge:

  gendergap corpus index --kind mtedx --root mtedx --lang fr --tgt-lang fr --corpus mtedx-fr \\
      --speaker-genders fr_speakers.tsv --out tables/mtedx_fr-fr.tsv
  for p in en es pt; do
    gendergap corpus index --kind mtedx --root mtedx --lang fr --tgt-lang $p --corpus mtedx-fr-$p \\
        --speaker-genders fr_speakers.tsv --out tables/mtedx_fr-$p.tsv
  done
  gendergap corpus merge tables/mtedx_fr-{fr,en,es,pt}.tsv --out tables/mtedx.tsv
  # every shared id becomes mtedx-fr/<id>, mtedx-fr-en/<id>, ...; an ST task on corpus
  # mtedx-fr-en reads tgt_text_en of exactly the fr-en rows; tables/mtedx.tsv.merge.json
  # lists every rename. Or list the four tables under corpus.table in the study config.

Indexed under one corpus name instead (--corpus mtedx for each pair), the pairs' translations
of one segment land in one row (tgt_text_en, tgt_text_es, tgt_text_pt):

  gendergap corpus merge mtedx_fr-en.tsv mtedx_fr-es.tsv mtedx_fr-pt.tsv --out mtedx_all.tsv
  gendergap corpus merge mls_fr.tsv cv_fr.tsv lebenchmark.tsv --out pretrain_pool.tsv \\
      --gender-map 'Multi-Mix=U'
"""

STATS_DESCRIPTION = """\
Per-gender statistics of one or more utterance tables, laid out like Table 1 of the reference
study: durations as hours:minutes, speakers and utterances per gender (M / F, and U when any),
one row per corpus and style (or split, when the table has no style), and a TOTAL row.
Every row is counted in its corpus: rows of a table with no style column fall in group (none).
Speakers are (corpus, speaker) pairs: equal ids in two corpora are two speakers in the TOTAL row, unless
they speak on the same recording (file name): the mTEDx subsets under their own corpus names
(mtedx-fr-en, mtedx-fr-es...) share talks, and a talk's speaker counts once. Several tables are
merged as `corpus merge` does (a segment two tables of one corpus share counts once). The TOTAL
row counts each audio segment once (same recording -- path, or file name and size --, offset and
duration), as the mTEDx subsets of one release hold the same segments, and a line under the
table says how many rows that left out (csv: on stderr); the per-corpus rows count all their
rows. Seconds are rounded to the millisecond.

examples:
  gendergap corpus stats mls_fr.tsv cv.tsv
  gendergap corpus stats synth/utterances.tsv --format markdown --by split
  gendergap corpus stats mls_fr.tsv --format csv > stats.csv
  gendergap corpus stats tables/mtedx_fr-fr.tsv tables/mtedx_fr-en.tsv tables/mtedx_fr-es.tsv
"""

SYNTH_DESCRIPTION = """\
Generate the built-in synthetic gendered corpus (French sentences by female and male espeak-ng
voices, English translations, a MuST-SHE-style first-person set), deterministic for a seed, and
write its utterance table.

--out must be a new or empty folder, or one this command wrote: it records the files it writes
there (.gendergap-outputs.json) and replaces only those. Any other non-empty folder, or a file of
yours where the corpus writes one (an utterances.tsv of your own), is refused (exit 2); your other
files in the folder are left as they are.

examples:
  gendergap corpus synth --out data/synth
  gendergap corpus synth --out data/synth_small --size small --seed 3
"""

def register(subparsers, group: str, help_: str) -> None:
    p = subparsers.add_parser(group, help=help_, description=DESCRIPTION,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="corpus_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])
    _add_index(sub)

    st = sub.add_parser("stats", help="per-gender hours, speakers, utterances (Table 1 layout)",
                        description=STATS_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    st.add_argument("tables", nargs="+", metavar="TABLE.tsv", help="utterance table(s)")
    st.add_argument("--format", default="text", choices=["text", "csv", "markdown"],
                    help="output format (default text)")
    st.add_argument("--by", help="group rows by this column (default: style when filled in, else split)")
    st.add_argument("--out", type=out_file("--out"), help="write to this file instead of stdout")
    st.set_defaults(func=run_stats)

    mg = sub.add_parser("merge", help="merge utterance tables into one (ids made unique, translations joined)",
                        description=MERGE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    mg.add_argument("tables", nargs="+", metavar="TABLE.tsv", help="utterance tables, in order (the #<n> of a "
                    "renamed id is a table's position here)")
    mg.add_argument("--out", type=out_file("--out"), required=True,
                    help="merged table to write (TSV); the report goes to OUT.merge.json")
    mg.add_argument("--gender-map", metavar="LABEL=F|M|U,...", help="re-map gender from gender_raw for these labels, "
                    "e.g. 'Multi-Mix=U,Frau=F'")
    mg.set_defaults(func=run_merge)

    ms = sub.add_parser("measure", help="per-utterance voice measures: F0, speaking rate, length, level",
                        description=MEASURE_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    ms.add_argument("table", metavar="TABLE.tsv", help="utterance table")
    ms.add_argument("--out", type=out_file("--out"), required=True,
                    help="measures to write (TSV, one row per utterance)")
    ms.add_argument("--split", help="only this split's rows (e.g. test; default: every row)")
    ms.add_argument("--corpus", help="only this corpus's rows (the table's corpus column; default: every row)")
    ms.add_argument("--speakers", type=out_file("--speakers"), metavar="FILE.tsv",
                    help="also write the per-speaker medians here")
    ms.add_argument("--cache", default="runs/voice-measures", help="cache folder (default: runs/voice-measures)")
    ms.set_defaults(func=run_measure)

    fl = sub.add_parser("filter", help="drop the speakers of unknown gender from the splits named",
                        description=FILTER_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    fl.add_argument("table", metavar="TABLE.tsv", help="utterance table")
    fl.add_argument("--drop-unknown-gender", required=True, metavar="SPLIT[,SPLIT]",
                    type=lambda v: [x.strip() for x in v.split(",") if x.strip()],
                    help="splits whose speakers of unknown gender are dropped (e.g. test or valid,test)")
    fl.add_argument("--out", type=out_file("--out"), required=True, help="the filtered table to write (TSV)")
    fl.set_defaults(func=run_filter)

    sy = sub.add_parser("synth", help="generate the built-in synthetic gendered corpus", description=SYNTH_DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    sy.add_argument("--out", type=out_dir("--out"), required=True, help="output directory")
    sy.add_argument("--size", default="mini", choices=["tiny", "mini", "small"],
                    help="corpus size: mini (default, about a minute on 2 cores), small; tiny is for tests")
    sy.add_argument("--seed", type=int, default=0, help="seed: same seed, same corpus (default: 0)")
    sy.set_defaults(func=run_synth)


def _add_index(sub) -> None:
    from corpora.readers import READERS
    ix = sub.add_parser("index", help="index a corpus into an utterance table", description=INDEX_DESCRIPTION,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    ix.add_argument("--kind", required=True, choices=sorted(READERS), help="corpus layout (see above)")
    ix.add_argument("--root", required=True, help="corpus directory or metadata file (see above)")
    ix.add_argument("--out", type=out_file("--out"), required=True, help="utterance table to write (TSV)")
    ix.add_argument("--split", help="comma-separated splits to read (default: all found); for kinds with one "
                    "split (kaldi, generic, lebenchmark, mustshe, winost) the name to record")
    ix.add_argument("--lang", help="source language code (mls, mtedx, commonvoice, kaldi, lebenchmark, generic; "
                    "covost2, fleurs, voxpopuli: default from the file or folder name)")
    ix.add_argument("--tgt-lang", help="translation language: mtedx fr-<tgt>, mustc en-<tgt>, mustshe; covost2: "
                    "picks covost_v2.<src>_<tgt>.tsv when the folder holds several")
    ix.add_argument("--cv-root", metavar="DIR", help="covost2: the Common Voice locale dir CoVoST 2 was built on "
                    "(e.g. cv-corpus-4-2019-12-10/fr: validated.tsv, clips/)")
    ix.add_argument("--speaker-genders", metavar="FILE", help="speaker (or talk) -> gender list, one "
                    "`id<TAB>gender` per line (mtedx, mustc; lhotse: for supervisions with no gender)")
    ix.add_argument("--map", help="generic: table key -> file column, e.g. id=utt_id,audio=path,gender=sex")
    ix.add_argument("--audio-dir", help="mustshe/winost: where the wavs are (default: next to the metadata); lhotse: "
                    "where relative audio paths start (default: the working dir); hf: where embedded audio is "
                    "written, once, as <id>.<ext>")
    ix.add_argument("--winomt-file", help="winost: WinoMT en.txt (default: ROOT/en.txt)")
    ix.add_argument("--first-index", type=count("--first-index", 0, 10**9),
                    help="winost: the number in the first wav's name (default 1)")
    ix.add_argument("--speaker-gender", help="winost: the speaker's gender (default female, per the WinoST paper)")
    ix.add_argument("--corpus", help="value of the corpus column (default: the kind)")
    ix.add_argument("--style", help="value of the style column, e.g. read, spontaneous (Table 1 groups by it)")
    ix.add_argument("--sample-rates",
                    help="accepted sample rates in Hz, comma-separated, or `any` (default: 16000; commonvoice, "
                         "covost2, winost: any)")
    ix.add_argument("--max-channels", type=count("--max-channels", 1, 64), default=1,
                    help="accepted channel count, 1-64 (default 1: mono)")
    ix.add_argument("--workers", type=count("--workers", 1, 256),
                    help="threads reading audio headers, 1-256 (default: 4 x cores, at most 32)")
    ix.add_argument("--strict", action="store_true", help="refuse what would be skipped, trimmed or set to U with a "
                    "warning (zero-byte clips, segments past the end, speakers missing from a gender list)")
    ix.add_argument("--kaldi-root", metavar="DIR", help="kaldi: the recipe dir relative wav.scp paths start from "
                    "(default: the parent of data/)")
    ix.add_argument("--allow-pipes", action="store_true", default=None,
                    help="kaldi: run a `cmd |` wav.scp entry once when its duration or rate is not in the data dir "
                         "(never run otherwise)")
    ix.add_argument("--path-template", metavar="TEMPLATE", help="generic: audio path from the row, e.g. "
                    "\"{root}/{id[:4]}/{id}.ogg\" ({root}: the file's dir; {COL}, {COL[a:b]}: a column)")
    ix.add_argument("--supervisions", metavar="FILE",
                    help="lhotse: the SupervisionSet of the RecordingSet --root names")
    ix.add_argument("--audio-column", metavar="COL",
                    help="hf: the audio column, an Audio feature or paths (default audio)")
    ix.add_argument("--gender-column", metavar="COL",
                    help="hf: the gender column, labels or a ClassLabel (default gender)")
    ix.add_argument("--speaker-column", metavar="COL", help="hf: the speaker column (default: speaker_id, client_id or "
                    "speaker, the first there)")
    ix.add_argument("--text-column", metavar="COL", help="hf: the transcript column (default: text, sentence, "
                    "raw_transcription, transcription, raw_text or normalized_text, the first there)")
    ix.add_argument("--id-column", metavar="COL", help="hf: the utterance id column (default: id when unique, else the "
                    "file names of a path column, else <split>-<row>)")
    ix.add_argument("--gender-map", metavar="LABEL=F|M|U,...", help="map gender labels gendergap does not know "
                    "(case-insensitive), e.g. 'Multi-Mix=U,Frau=F'; still unknown ones become U, listed in one warning")
    ix.add_argument("--relative", action="store_true", help="write audio paths relative to the table's directory")
    ix.add_argument("--no-progress", action="store_true", help="no progress bar")
    ix.set_defaults(func=run_index)


def run_index(args) -> int:
    from corpora.index import index_corpus, index_summary

    df = index_corpus(**options_of(index_corpus, args))
    log.info("%s", index_summary(df, args.out))
    return 0


def run_merge(args) -> int:
    from corpora.merge import merge_files, merge_report_path

    report = merge_files(**options_of(merge_files, args))
    print(f"wrote {args.out}: {report['summary']} (report: {merge_report_path(args.out)})")
    return 0


def run_stats(args) -> int:
    from corpora.stats import table_stats

    text = table_stats(**options_of(table_stats, args))
    if args.out:
        write_text(args.out, text)
    else:
        sys.stdout.write(text)
    return 0


def run_measure(args) -> int:
    from corpora.utterances import UtteranceTable
    from corpora.voice_measures import measure_table, speaker_medians, write_measures

    table = UtteranceTable.load(args.table).rows
    rows = table
    for col in ("split", "corpus"):
        want = getattr(args, col)
        if want is not None:
            if want not in set(rows[col]):
                raise UserError(f"no rows of {col} {want!r} in this table "
                                f"(it has: {', '.join(sorted(set(table[col])))})",
                                path=args.table, fix=f"pass --{col} one of those")
            rows = rows[rows[col] == want]
    measures = measure_table(rows, args.table, args.cache)
    write_measures(measures, args.out)
    if args.speakers:
        write_measures(speaker_medians(measures), args.speakers)
    f0 = measures.groupby("gender")["f0_median_hz"].median()
    print(f"wrote {args.out}: {len(measures)} utterances, {measures['speaker'].nunique()} speakers; median F0 "
          + ", ".join(f"{g} {v:.0f} Hz" for g, v in f0.items() if v == v))
    return 0


def run_filter(args) -> int:
    from corpora.filter import filter_table

    for s in filter_table(args.table, args.out, args.drop_unknown_gender):
        print(f"{s['split']}: {s['speakers_dropped']} speaker(s), {s['rows_dropped']} row(s) "
              f"of unknown gender dropped; "
              f"{s['speakers_kept']} speaker(s), {s['rows_kept']} row(s) kept")
    print(f"wrote {args.out}")
    return 0


def run_synth(args) -> int:
    from corpora.synth import synthesize  # lazy: pulls in the espeak-ng engine

    table = synthesize(args.out, size=args.size, seed=args.seed)
    print(table)
    return 0
