"""`gendergap` command line: one subcommand group per user task.

Each group lives in its own module ``gendergap/cmd_<group>.py`` exposing
``register(subparsers, group, help)``.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from corpora.base.errors import UserError
from corpora.base.provenance import engine_versions, git_sha
from gendergap import __version__
from gendergap.logs import setup_logging
from gendergap.options import refuse_special_paths

# group -> one-line help; the order is the order of a study.
GROUPS = {
    "corpus": "index corpora into utterance tables; generate the built-in synthetic corpus",
    "manifest": "gender-filtered / balanced selections exported for fairseq, SpeechBrain, Kaldi",
    "pretrain": "wav2vec 2.0 pretraining with fairseq, locally or on SLURM",
    "ckpt": "register, list and convert SSL checkpoints",
    "asr": "downstream ASR: CTC fine-tuning, frozen-feature ASR, Kaldi export",
    "st": "downstream speech translation on frozen features (fairseq s2t)",
    "probe": "gender probes on each layer's hidden states",
    "score": "per-gender WER/BLEU, Δrel with speaker-level CIs, MuST-SHE, WinoMT",
    "bench": "measure this machine's throughput for the cost table of `sweep --dry-run`",
    "sweep": "every downstream task per checkpoint, locally or on SLURM",
    "report": "the paper's tables and plots from the results store",
    "trace": "a report cell, score or run -> its run, its step, the command that redoes it",
    "study": "the demo: the whole study in miniature on the built-in corpus",
}

EPILOG = """\
typical flow (each line feeds the next):
  gendergap corpus index --kind mtedx --root mTEDx/ --lang fr --out data/mtedx.tsv   # or: corpus synth --out data/synth
  gendergap manifest build --table data/mtedx.tsv --gender F --format fairseq --valid-hours 1 --out m/F
  gendergap pretrain run --preset base --manifest m/F --out runs/ssl/F       # or pretrain launch on SLURM
  gendergap ckpt --registry runs/checkpoints.json add F runs/ssl/F --manifest m/F
  gendergap sweep --config study.yaml --out runs/study     # study.yaml: registry: runs/checkpoints.json, tasks
  gendergap report --db runs/study/results.db --registry runs/checkpoints.json --out report/
or all of it at once on the built-in corpus:  gendergap study
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gendergap", description=__doc__.splitlines()[0].rstrip(".") + ".",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="store_true", help="print gendergap's and the engines' versions")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for user errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors")
    sub = parser.add_subparsers(dest="group", metavar="COMMAND")
    for group, help_ in GROUPS.items():
        importlib.import_module(f"gendergap.cmd_{group}").register(sub, group, help_)
    # `gendergap trace` renders command lines through this parser: handed over, not imported
    # (cmd_trace importing cli would close a circle)
    parser.set_defaults(top_parser=parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UserError as e:   # an option's type= check (options.path_name): one line, like every user error
        print(f"gendergap: error: {e}", file=sys.stderr)
        return e.exit_code
    setup_logging(args.quiet)
    if args.version:
        # gendergap's own line is the package's __version__ (the installed metadata can lag a checkout)
        try:
            for name, version in {**engine_versions(), "gendergap": __version__}.items():
                print(f"{name:16s} {version}")
            print(f"{'git sha':16s} {git_sha()}", flush=True)
        except BrokenPipeError:   # `gendergap --version | head -1`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        refuse_special_paths(args)
        rc = args.func(args)
    except UserError as e:
        if args.debug:
            raise
        print(f"gendergap: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("gendergap: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gendergap ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:
        fix = OS_FIXES.get(e.errno)
        if fix is None or args.debug:
            raise  # anything else is a bug: keep its traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"gendergap: error: {where}{e.strerror or e} -- {fix}", file=sys.stderr)
        return 2
    return int(rc or 0)


# Errors of the place the user chose to write to (or read from), not of gendergap: one line naming the
# path. Outputs are written to temp names and renamed, so what was there before is still whole.
OS_FIXES = {
    errno.ENOSPC: "free space on that file system (or write elsewhere) and run again; earlier outputs are unchanged",
    errno.EDQUOT: "your disk quota is used up: free space (or write elsewhere) and run again",
    errno.EFBIG: "the file grew past the file system's or your limit (ulimit -f): write elsewhere or raise it",
    errno.EROFS: "that file system is read-only: choose a writable output path",
    errno.EACCES: "no permission there: choose a path you can write (and read), or fix its permissions",
    errno.EPERM: "not permitted there: choose another path, or fix its permissions",
    errno.ENOTDIR: "a part of that path is a file, not a directory: choose another path",
}


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
