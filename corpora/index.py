"""Index one corpus into an utterance table with the options of `gendergap corpus index`.

    df = index_corpus(kind="mls", root="mls_french", out="mls_fr.tsv", split="train,dev")
    log.info("%s", index_summary(df, "mls_fr.tsv"))

The reader (corpora.readers.READERS[kind]) does the reading; this module turns the CLI's
options into its keywords, fills in the columns the user named, and writes the table.
"""
from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pandas as pd

from corpora.base.boundary import MAX_RATE, MIN_RATE
from corpora.base.errors import UserError
from corpora.readers import READERS, AudioCheck
from corpora.table import is_pipe, parse_gender_map, write_table

# CLI option -> reader keyword. `--split` is a list for corpora with several split files.
READER_OPTIONS = {
    "lang": "lang", "tgt_lang": "tgt_lang", "speaker_genders": "speaker_genders", "map": "mapping",
    "audio_dir": "audio_dir", "winomt_file": "winomt_file", "first_index": "first_index",
    "speaker_gender": "speaker_gender", "kaldi_root": "kaldi_root", "allow_pipes": "allow_pipes",
    "path_template": "path_template",
    "cv_root": "cv_root",
    "supervisions": "supervisions", "audio_column": "audio_column", "gender_column": "gender_column",
    "speaker_column": "speaker_column", "text_column": "text_column", "id_column": "id_column",
}
# The accepted sample rates when --sample-rates is not given: 16 kHz (what the study's models
# read), except where a release has no 16 kHz audio at all (Common Voice and CoVoST 2, which reads
# Common Voice's clips: 48 kHz mp3; WinoST: 48 kHz wav), whose rate is accepted and recorded in
# sample_rate, so the corpus indexes as released. The rate a model needs is checked where audio is
# read for it, not here.
DEFAULT_RATES = {"commonvoice": "any", "covost2": "any", "winost": "any"}


def parse_sample_rates(spec: str) -> tuple[int, ...] | None:
    """``'16000,48000'`` -> (16000, 48000); ``'any'`` -> None (every rate accepted)."""
    if spec.strip().lower() == "any":
        return None
    try:
        rates = tuple(int(x) for x in spec.split(",") if x.strip())
    except ValueError:
        rates = ()
    if not rates or min(rates) < MIN_RATE or max(rates) > MAX_RATE:   # the bounds a table's sample_rate meets
        raise UserError(f"bad --sample-rates {spec!r}", fix=f"comma-separated rates in Hz, {MIN_RATE}-{MAX_RATE} "
                                                            "(e.g. 16000,48000), or `any`")
    return rates


def reader_kwargs(kind: str, *, split: str | None = None, corpus: str | None = None, **options) -> dict:
    """The reader's keyword arguments from the CLI options (READER_OPTIONS, None = not given);
    an option the kind does not use is an error."""
    params = inspect.signature(READERS[kind]).parameters
    kwargs = {}
    for opt, kw in READER_OPTIONS.items():
        value = options.get(opt)
        if value is None:
            continue
        if kw not in params:
            if opt == "lang":  # every table has a lang column: set it after reading
                continue
            raise UserError(f"--{opt.replace('_', '-')} does not apply to --kind {kind}",
                            fix=f"see `gendergap corpus index --help` for the options of {kind}")
        kwargs[kw] = value
    if split is not None:
        splits = [s.strip() for s in split.split(",") if s.strip()]
        if "splits" in params:
            kwargs["splits"] = splits
        elif len(splits) != 1:
            raise UserError(f"--kind {kind} reads one split: --split names it", fix="give one name, e.g. --split train")
        elif "split" in params:
            kwargs["split"] = splits[0]
        # else: a corpus without split files; index_corpus writes the name into the split column
    if corpus and "corpus" in params:
        kwargs["corpus"] = corpus
    return kwargs


def index_corpus(*, kind: str, root, out, split=None, corpus=None, style=None, sample_rates=None,
                 max_channels: int = 1, workers=None, strict: bool = False, gender_map=None,
                 relative: bool = False, no_progress: bool = False, lang=None, tgt_lang=None,
                 speaker_genders=None, map=None, audio_dir=None, winomt_file=None, first_index=None,
                 speaker_gender=None, kaldi_root=None, allow_pipes=None, path_template=None,
                 cv_root=None, supervisions=None, audio_column=None, gender_column=None,
                 speaker_column=None, text_column=None, id_column=None) -> pd.DataFrame:
    """Read corpus ``root`` of layout ``kind`` and write its utterance table to ``out``; returns it.
    The keywords are `gendergap corpus index`'s options (see its --help); None = not given."""
    rates = sample_rates if sample_rates is not None else DEFAULT_RATES.get(kind, "16000")
    check = AudioCheck(sample_rates=parse_sample_rates(rates), max_channels=max_channels,
                       workers=workers, progress=not no_progress and sys.stderr.isatty(),
                       strict=strict, gender_map=tuple(parse_gender_map(gender_map).items()))
    kwargs = reader_kwargs(kind, split=split, corpus=corpus, lang=lang, tgt_lang=tgt_lang,
                           speaker_genders=speaker_genders, map=map, audio_dir=audio_dir, winomt_file=winomt_file,
                           first_index=first_index, speaker_gender=speaker_gender, kaldi_root=kaldi_root,
                           allow_pipes=allow_pipes, path_template=path_template,
                           cv_root=cv_root, supervisions=supervisions, audio_column=audio_column,
                           gender_column=gender_column, speaker_column=speaker_column, text_column=text_column,
                           id_column=id_column)
    df = READERS[kind](root, check=check, **kwargs)
    if corpus:
        df["corpus"] = corpus
    if lang and "lang" not in kwargs:
        df["lang"] = lang
    if style:
        df["style"] = style
    if split and not ({"split", "splits"} & set(inspect.signature(READERS[kind]).parameters)):
        df["split"] = split.strip()
    df["audio"] = audio_paths(df, Path(out), relative=relative)
    write_table(df, out)
    return df


def audio_paths(df: pd.DataFrame, out: Path, *, relative: bool = False) -> pd.Series:
    """Absolute audio paths, or relative to the directory of table ``out``. A Kaldi `cmd |`
    entry is a command, not a path: it stays as given (its audio_cwd column says where it runs)."""
    audio = df["audio"].copy()
    paths = ~audio.map(is_pipe)
    if relative:
        base = out.resolve().parent
        audio[paths] = audio[paths].map(lambda a: os.path.relpath(os.path.abspath(a), base))
    else:
        audio[paths] = audio[paths].map(os.path.abspath)
    return audio


def index_summary(df: pd.DataFrame, out) -> str:
    """'wrote OUT: N utterances, H h, S speakers (F / M / U utterances)': what index_corpus wrote."""
    counts = df["gender"].value_counts()
    speakers = len(df[["corpus", "speaker"]].drop_duplicates())   # equal ids in two corpora: two speakers
    return (f"wrote {Path(out)}: {len(df)} utterances, {df['duration'].sum() / 3600:.2f} h, {speakers} speakers "
            f"(F {counts.get('F', 0)} / M {counts.get('M', 0)} / U {counts.get('U', 0)} utterances)")
