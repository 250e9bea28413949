"""Checks of an utterance table against what a job will ask of it, without running the job.

A study's sweep calls these before its first job (gendergap/steps: each step's ``check``), so a
table with duplicate ids, a task naming a corpus or split the table lacks, a missing
translation column or an unreadable audio file is reported once, before any job is queued,
instead of failing in every job at run time. Each function returns :class:`Finding` objects
(what is wrong, what to do) rather than raising, so that one pass lists every problem.

Cost: a check pass reads each table once and each audio header once (``one_pass``: within it,
tables and headers are cached by path), headers only, in parallel with a progress bar
(corpora.audio_info.probe_headers), never decoding the audio.

    with one_pass():
        problems = rows_findings("t.tsv", "mtedx-fr-en", {"train": "train", "valid": "valid", "test": "test"},
                                 tgt="en", audio=True)
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from corpora.base.errors import UserError
from corpora.utterances import UtteranceTable

EXAMPLES = 3   # how many ids a finding names before "..."


@dataclass(frozen=True)
class Finding:
    """One problem with a job's inputs: what is wrong, and what to do about it."""
    message: str
    fix: str
    scope: str = ""   # "table": about the table itself (duplicate ids...), not one task's use of it


@dataclass
class _Pass:
    tables: dict = field(default_factory=dict)    # path -> UtteranceTable | Finding
    headers: dict = field(default_factory=dict)   # audio path -> AudioInfo | HeaderError
    progress: bool = True


_PASS: contextvars.ContextVar[_Pass | None] = contextvars.ContextVar("corpora_checks_pass", default=None)


@contextlib.contextmanager
def one_pass(progress: bool = True):
    """Within this block each table is read, and each audio header probed, once."""
    token = _PASS.set(_Pass(progress=progress))
    try:
        yield
    finally:
        _PASS.reset(token)


def _current() -> _Pass:
    return _PASS.get() or _Pass(progress=False)


def provide_table(table: str | os.PathLike, value: UtteranceTable) -> None:
    """A table a step will write, already known in memory (the study's merge step merges its inputs
    in its check): later checks of this pass read ``value`` for ``table`` instead of the file."""
    _current().tables[os.path.abspath(table)] = value


def load_table(table: str | os.PathLike) -> tuple[UtteranceTable | None, list[Finding]]:
    """The table (the UtteranceTable value, read once per check pass), or the finding saying why it
    cannot be used (missing, unreadable, invalid: duplicate or empty ids, bad genders... as
    corpora.table.validate_table finds them)."""
    key = os.path.abspath(table)
    cache = _current().tables
    if key not in cache:
        try:
            cache[key] = UtteranceTable.load(key)   # audio absolute
        except UserError as e:
            where = (e.path or key) + (f":{e.line}" if e.line is not None else "")
            cache[key] = Finding(f"utterance table {where}: {e.message}", e.fix or "fix the table", scope="table")
    got = cache[key]
    return (None, [got]) if isinstance(got, Finding) else (got, [])


def _ids(df: pd.DataFrame) -> str:
    ids = [str(i) for i in df["id"].head(EXAMPLES)]
    return ", ".join(ids) + (", ..." if len(df) > EXAMPLES else "")


def rows_findings(table: str | os.PathLike, corpus: str | None, splits: dict[str, str], *, tgt: str | None = None,
                  src: str | None = None, gendered_test: bool = True, audio: bool = True,
                  corpus_of: dict[str, str] | None = None) -> list[Finding]:
    """What a task reading ``corpus``'s rows in ``splits`` (role -> split label, e.g. {"train":
    "train", "valid": "dev", "test": "test"}) needs from ``table``: the corpus has rows, each
    split has rows; with ``tgt``, a non-empty ``tgt_text_<tgt>`` on every row; with ``src``, rows
    in that language; with ``gendered_test``, every test speaker F or M (a gender gap is F against
    M: a U speaker's rows count in neither); with ``audio``, every audio file readable (headers).
    ``corpus_of`` gives another corpus for some roles (ST's valid/test from another pair)."""
    loaded, found = load_table(table)
    if loaded is None:
        return found
    name = Path(table).name
    parts = _role_parts(loaded, name, corpus, splits, corpus_of, found)
    for role, part in parts.items():
        found += _language_findings(role, part, name, src=src, tgt=tgt, split_label=splits[role])
    if gendered_test and "test" in parts:
        found += _test_gender_findings(parts["test"])
    if audio and parts:
        found += audio_findings(table, pd.concat(parts.values()).drop_duplicates("id"))
    return found


def _role_parts(table: UtteranceTable, name: str, corpus: str | None, splits: dict[str, str],
                corpus_of: dict[str, str] | None, found: list[Finding]) -> dict[str, pd.DataFrame]:
    """{role: its rows} for the roles whose corpus and split have rows; a finding appended to
    ``found`` for each that has none (a missing corpus once)."""
    have = sorted(table.rows["corpus"].unique())
    parts = {}
    for role, label in splits.items():
        corp = (corpus_of or {}).get(role) or corpus
        rows = table.select(corpus=corp).rows
        if corp is not None and rows.empty:
            msg = Finding(f"corpus {corp!r} has no rows in {name} (its corpora: {', '.join(have[:8])}"
                          f"{', ...' if len(have) > 8 else ''})",
                          "set the task's corpus to one of those, or index that corpus into the table")
            if msg not in found:
                found.append(msg)
            continue
        part = table.select(corpus=corp, split=label).rows
        if part.empty:
            labels = sorted(rows["split"].unique())
            found.append(Finding(f"corpus {corp or '(all)'!r} has no rows in split {label!r} (the task's {role} "
                                 f"split) in {name} (its splits: {', '.join(labels)})",
                                 f"set splits.{role} to one of those in the task"))
            continue
        parts[role] = part
    return parts


def _language_findings(role: str, part: pd.DataFrame, name: str, *, src: str | None, tgt: str | None,
                       split_label: str) -> list[Finding]:
    """A role's rows are in the source language ``src`` and have a translation into ``tgt``."""
    found = []
    if src is not None and "lang" in part and not (part["lang"] == src).any():
        found.append(Finding(f"the {role} rows of corpus {part['corpus'].iloc[0]!r} are in "
                             f"{', '.join(sorted(part['lang'].unique()))}, not {src!r} (the pair's source)",
                             "fix the task's pairs, or the table's lang column"))
    if tgt is not None:
        col = f"tgt_text_{tgt}"
        if col not in part.columns:
            found.append(Finding(f"{name} has no column {col} (translations into {tgt!r}) for the {role} rows",
                                 f"index the corpus with its {tgt} translations (corpus index --tgt-lang {tgt}), "
                                 "or fix the task's pairs"))
        else:
            empty = part[part[col].astype(str).str.strip() == ""]
            if len(empty):
                found.append(Finding(f"{len(empty)} of {len(part)} {role} row(s) have an empty {col} "
                                     f"(ids {_ids(empty)})",
                                     f"fill in their translations, or leave those rows out of split "
                                     f"{split_label!r}"))
    return found


def _test_gender_findings(test: pd.DataFrame) -> list[Finding]:
    """Every test speaker is F or M, and both occur (a gender gap compares F and M)."""
    unknown = test[test["gender"] == "U"]
    if len(unknown):
        spk = sorted(unknown["speaker"].unique())
        return [Finding(f"{len(spk)} test speaker(s) have no gender (U): {', '.join(spk[:EXAMPLES])}"
                        f"{', ...' if len(spk) > EXAMPLES else ''} ({len(unknown)} row(s)); a gender gap "
                        "compares F and M, their rows count in neither",
                        "give their gender (corpus index --speaker-genders, or a gender map), or drop them "
                        "from the test split: gendergap corpus filter TABLE --drop-unknown-gender test "
                        "--out NEW.tsv")]
    if test["gender"].nunique() < 2:
        return [Finding(f"the test split holds {test['gender'].iloc[0]} speakers only: no gender gap "
                        "can be measured", "test on a split with female and male speakers")]
    return []


def gender_findings(table: str | os.PathLike, corpus: str | None) -> list[Finding]:
    """``corpus``'s rows (or the whole table's) include F and M speakers."""
    loaded, found = load_table(table)
    if loaded is None:
        return found
    rows = loaded.select(corpus=corpus).rows
    if rows.empty:
        return [Finding(f"corpus {corpus!r} has no rows in {Path(table).name} (its corpora: "
                        f"{', '.join(sorted(loaded.rows['corpus'].unique())[:8])})",
                        "set the task's corpus to one of those")]
    lacking = sorted({"F", "M"} - set(rows["gender"]))
    if lacking:
        return [Finding(f"{corpus or 'the table'} has no {' or '.join(lacking)} speakers: a gender probe needs both",
                        "probe a corpus with female and male speakers")]
    return []


def manifest_findings(table: str | os.PathLike, corpus: str | None, split: str, gender: str, *,
                      rate: int | None = 16000) -> list[Finding]:
    """A pretraining manifest of ``split`` (``corpus``'s rows, or all) with ``gender`` (F, M,
    balanced, p=SHARE): the rows exist, hold the genders asked for, their audio reads, and with
    ``rate`` is at that rate (fairseq's audio_pretraining reads task.sample_rate files only)."""
    loaded, found = load_table(table)
    if loaded is None:
        return found
    rows = loaded.select(corpus=corpus).rows
    if corpus is not None and rows.empty:
        return [Finding(f"pretraining.corpus {corpus!r} has no rows in {Path(table).name} (its corpora: "
                        f"{', '.join(sorted(loaded.rows['corpus'].unique())[:8])})",
                        "set pretraining.corpus to one of those")]
    rows = loaded.select(corpus=corpus, split=split).rows
    if rows.empty:
        return [Finding(f"no rows in split {split!r} (pretraining.split) of {corpus or 'the table'}",
                        "set pretraining.split to the split holding the pretraining audio")]
    need = {"F": {"F"}, "M": {"M"}}.get(str(gender).upper(), {"F", "M"})
    lacking = sorted(need - set(rows["gender"]))
    if lacking:
        found.append(Finding(f"pretraining set {gender!r} needs {' and '.join(lacking)} speakers, and split {split!r} "
                             f"has none", "give those speakers' genders, or change pretraining.sets"))
    fix = ("prepare 16 kHz copies (`manifest build --resample 16000`), or point the table at 16 kHz audio: "
           "fairseq's audio_pretraining reads 16 kHz files only")
    return found + audio_findings(table, rows[rows["gender"].isin(need)], rate=rate, rate_fix=fix)


def audio_findings(table: str | os.PathLike, rows: pd.DataFrame, *, rate: int | None = None,
                   rate_fix: str = "") -> list[Finding]:
    """Every audio file of ``rows`` exists and its header reads; the header's sample rate is the
    table's; segments end inside their file; with ``rate``, every file is at that rate. Headers
    only, each file once per pass."""
    from corpora.audio_info import AudioInfo, probe_headers

    rows = rows.reset_index(drop=True)   # rows looked up by label below: one label per row
    files = rows.drop_duplicates("audio").reset_index(drop=True)   # many segments share a recording
    try:   # rows of load_table: audio absolute; a Kaldi pipe or a FIFO is a finding
        UtteranceTable(files, (Path(table),)).audio_rows()
    except UserError as e:
        return [Finding(str(e).split(" -- ")[0], e.fix or "")]
    paths = rows["audio"]
    state = _current()
    todo = [p for p in dict.fromkeys(paths) if p not in state.headers]
    if todo:
        state.headers.update(probe_headers(todo, progress=state.progress, desc="checking audio headers"))
    info = paths.map(state.headers.get)
    found = []
    bad = rows[~info.map(lambda i: isinstance(i, AudioInfo))]
    if len(bad):
        first = state.headers[paths[bad.index[0]]]
        found.append(Finding(f"{bad['audio'].nunique()} audio file(s) of {len(bad)} row(s) cannot be read "
                             f"(ids {_ids(bad)}): first, {first.message()}", first.fix()))
    good = info.map(lambda i: isinstance(i, AudioInfo))
    if good.any():
        ok, heads = rows[good], info[good]
        header_rate = heads.map(lambda i: i.sample_rate)
        wrong = ok[header_rate != ok["sample_rate"].astype(int)]
        if len(wrong):
            found.append(Finding(f"{len(wrong)} row(s) give a sample_rate other than their file's header (ids "
                                 f"{_ids(wrong)}: {int(wrong['sample_rate'].iloc[0])} Hz in the table, "
                                 f"{heads[wrong.index[0]].sample_rate} Hz in the file)",
                                 "the audio changed since the table was indexed: index it again"))
        ends = ok["offset"].astype(float) + ok["duration"].astype(float)
        past = ok[ends > heads.map(lambda i: i.duration) + 0.05]
        if len(past):
            found.append(Finding(f"{len(past)} segment(s) end after their audio file does (ids {_ids(past)})",
                                 "index the corpus again (it trims segments to the file's length), or fix "
                                 "their offset/duration"))
        if rate is not None:
            other = ok[header_rate != rate]
            if len(other):
                rates = ", ".join(f"{r} Hz" for r in sorted(set(header_rate[other.index])))
                found.append(Finding(f"{len(other)} of {len(ok)} row(s) are not at {rate} Hz ({rates}; ids "
                                     f"{_ids(other)})", rate_fix or f"resample them to {rate} Hz"))
    return found
