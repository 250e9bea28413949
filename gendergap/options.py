"""Options shared by every command that runs a model: where, in what precision, which feature store."""
from __future__ import annotations

import inspect
import os
from pathlib import Path

from analysis.bootstrap import check_resamples
from corpora.base.boundary import check_name, finite, is_special, output_dir, output_file, regular_file, whole
from corpora.feature_request import Layers
from ssl_pretrain.device_options import DEVICE_HELP, PRECISION_HELP, PRECISIONS

DEFAULT_STORE = Path("runs") / "features"


def path_name(what: str):
    """An argparse ``type=`` for a name that becomes part of a file or folder name (NAME.hyp.tsv, a
    store or registry entry): corpora.base.boundary.check_name, so `../../x`, `a/b` or a control or
    bidi character is refused before any work starts (cli.main prints the UserError as one line)."""
    def check(value: str) -> str:
        return check_name(value, what)
    check.__name__ = what   # argparse names the type in its own messages
    return check


def refuse_special_paths(args) -> None:
    """Every command-line value that names an existing FIFO, device or socket is refused, whatever
    the option: no gendergap command reads or writes one, and opening a FIFO blocks for ever (an
    input) or hands a rename target that is not a file (an output). One check for every command, so
    a new option is covered without a word; the readers of handed files check the paths *they*
    name themselves (corpora.base.boundary.regular_file)."""
    for dest, value in sorted(vars(args).items()):
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, (str, os.PathLike)) and str(v) and is_special(v):
                regular_file(v, f"{dest.replace('_', '-')} argument",
                             fix="gendergap reads and writes regular files and folders only: give one")


def out_file(what: str):
    """An argparse ``type=`` for an output FILE: boundary.output_file refuses a FIFO or device
    (`--out /dev/full`) before any work, rather than replacing it or blocking on it."""
    def check(value: str) -> str:
        output_file(value, what)
        return value
    check.__name__ = what
    return check


def out_dir(what: str):
    """An argparse ``type=`` for an output folder: boundary.output_dir refuses anything but a folder."""
    def check(value: str) -> str:
        output_dir(value, what)
        return value
    check.__name__ = what
    return check


def amount(what: str, hi: float | None = None, lo: float = 0):
    """An argparse ``type=`` for hours, a percentage, seconds or megabytes: boundary.finite, at least
    ``lo`` (NaN compares false with every bound, so `--hours nan` would select the whole table)."""
    def check(value: str) -> float:
        return finite(value, what, lo=lo, hi=hi)
    check.__name__ = what
    return check


def count(what: str, lo: int, hi: int):
    """An argparse ``type=`` for a whole number within [lo, hi] (threads, repeats, channels):
    boundary.whole, one line before any work (`--threads 0` or `--repeat 1e9` traced back deep
    inside torch or numpy)."""
    def check(value: str) -> int:
        return whole(value, what, lo=lo, hi=hi)
    check.__name__ = what
    return check


def resamples(what: str, lo: int = 0):
    """An argparse ``type=`` for a bootstrap or test resample count: analysis.bootstrap.check_resamples
    (a whole number up to MAX_RESAMPLES), so `--bootstrap 100000000` is refused before any work rather
    than allocating gigabytes of count matrices after it."""
    def check(value: str) -> int:
        return check_resamples(value, what, lo=lo)
    check.__name__ = what
    return check


def layer_spec(what: str, take=None, words: tuple = ()):
    """An argparse ``type=`` for a --layer/--layers value: corpora.feature_request.Layers.parse, the one
    layer grammar (all, last, N, a,b,c), and ``take`` (Layers.one, Layers.one_or_all) where the command
    reads one layer; ``words`` are the option's own other values (`probe correlate --layer best`). A
    bad spec is one line before any work; the text is passed on as given."""
    def check(value: str) -> str:
        if value.strip().lower() not in words:
            layers = Layers.parse(value, what)
            if take is not None:
                take(layers, what)
        return value
    check.__name__ = what
    return check


def add_trust_option(p) -> None:
    p.add_argument("--trust-checkpoint", action="store_true",
                   help="unpickle a .pt checkpoint fully (torch.load weights_only=False). Only for files from a "
                        "source you trust: by default checkpoints load with weights_only=True and an allowlist, "
                        "so a crafted file cannot run code")


def add_model_options(p, store: bool = True) -> None:
    """--device / --precision / --trust-checkpoint (and --feature-store where frozen features are read)."""
    add_trust_option(p)
    p.add_argument("--device", default="auto", help=DEVICE_HELP)
    p.add_argument("--precision", default="fp32", choices=PRECISIONS, help=PRECISION_HELP)
    if store:
        p.add_argument("--feature-store", default=None, metavar="DIR",
                       help="frozen features are read from (and extracted once into) this store, shared by "
                            "frozen ASR, ST, probes and exports (default $GENDERGAP_FEATURE_STORE or runs/features)")


def store_path(feature_store: str | None) -> str:
    """The feature store directory, absolute: the given one, else $GENDERGAP_FEATURE_STORE, else runs/features."""
    return str(Path(feature_store or os.environ.get("GENDERGAP_FEATURE_STORE") or DEFAULT_STORE).resolve())


def call(fn, args) -> int:
    """Run a command's keyword function with the parsed options it takes (a leaf's handler).

    Only the options named in fn's signature are passed (the top-level -q/--quiet included when it
    asks for ``quiet``); the exit status is fn's int, else 0 (a returned result dict or None is success)."""
    result = fn(**options_of(fn, args))
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def options_of(fn, args) -> dict:
    """The parsed options that fn's signature names: its keyword arguments, for a handler that prints fn's result."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in vars(args).items() if k in params}
