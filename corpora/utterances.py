"""The utterance table as one value: what every command and package that reads tables gets.

``UtteranceTable.load(paths)`` is the one loader. One path is one TSV (corpora.table.read_table);
several are merged in memory by corpora.merge's rules (ids made unique, translations of one segment
joined), said in one log line; a gender map applies to either. Whatever was read, audio locations
are absolute (each relative path resolved against its own table's folder), so no caller carries the
table's path beside its rows to resolve them later. A Kaldi ``cmd |`` row is kept as given: it can
be indexed, counted and merged, and is refused only where audio is about to be read
(``audio_rows``), with the line of the table that holds it.

Small and plain, in the manner of lhotse's manifests: the rows (a DataFrame in the standard columns),
where they came from (``sources``, ``fingerprint``), and ``select`` to keep a split, corpus,
language or gender.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from corpora.base.boundary import is_special, regular_file
from corpora.base.errors import UserError
from corpora.merge import merge_tables
from corpora.table import (
    PIPE_FIX,
    absolute_audio,
    apply_gender_map,
    is_pipe,
    line_of_id,
    read_table,
    table_fingerprint,
    table_paths,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UtteranceTable:
    rows: pd.DataFrame            # standard columns (+ extras); audio absolute, Kaldi pipes as given
    sources: tuple[Path, ...]     # the table file(s) it was read from

    @classmethod
    def load(cls, paths, *, gender_map: dict[str, str] | None = None, validate: bool = True) -> UtteranceTable:
        """One table (a path) or several merged (a list of paths); ``validate=False`` reads a minimal
        table (id/speaker/gender) as given."""
        sources = tuple(table_paths(paths))
        if len(sources) == 1:
            rows = read_table(sources[0], validate=validate)
            if gender_map:
                rows = apply_gender_map(rows, gender_map, sources[0])
        else:
            rows, report = merge_tables(list(sources), gender_map=gender_map)
            log.info("read %d tables merged in memory: %s", len(sources), report["summary"])
        if "audio" in rows.columns:   # merged rows are absolute already (the same form)
            rows = rows.assign(audio=absolute_audio(rows["audio"], sources[0]))
        return cls(rows.reset_index(drop=True), sources)

    @property
    def source(self) -> str:
        """How messages name the table(s): its path, or ``A.tsv+B.tsv``."""
        return "+".join(os.fspath(p) for p in self.sources)

    @property
    def fingerprint(self):
        """What a run records of its table(s) (corpora.table.table_fingerprint)."""
        return table_fingerprint(list(self.sources) if len(self.sources) > 1 else self.sources[0])

    def __len__(self) -> int:
        return len(self.rows)

    def select(self, *, split=None, corpus=None, lang=None, gender=None, strict: bool = False) -> UtteranceTable:
        """The rows of the given split / corpus / language / gender: each a value, or several (a list,
        tuple or set: any of them); None: any. Empty is allowed: callers that need rows say what was
        asked (``nonempty``). ``strict``: a filter on a column the table lacks, or one that leaves no
        row, is a UserError naming the values the table has (the first filter that empties it)."""
        rows = self.rows
        for column, value in (("corpus", corpus), ("split", split), ("lang", lang), ("gender", gender)):
            if value is None:
                continue
            wanted = {str(v) for v in value} if isinstance(value, (list, tuple, set, frozenset)) else {str(value)}
            if column not in rows.columns:
                if not strict:
                    return UtteranceTable(rows.iloc[:0].reset_index(drop=True), self.sources)
                raise UserError(f"the table has no {column!r} column to select {column}={value!r}", path=self.source,
                                line=1, fix=f"drop the {column} filter, or add a {column} column")
            have = rows[column].astype(str)
            kept = rows[have.isin(wanted)]
            if strict and kept.empty:
                present = sorted(set(have))
                raise UserError(f"no rows with {column}={value!r} (the table has {', '.join(map(repr, present[:8]))})",
                                path=self.source, fix=f"pick one of the table's {column} values")
            rows = kept
        return UtteranceTable(rows.reset_index(drop=True), self.sources)

    def with_lines(self) -> UtteranceTable:
        """The rows with ``_line``, each row's line in its table file (header = 1), for messages that
        point into the file (one table; merged rows have no line of their own: 0)."""
        if "_line" in self.rows.columns:
            return self
        lines = range(2, len(self.rows) + 2) if len(self.sources) == 1 else [0] * len(self.rows)
        return UtteranceTable(self.rows.assign(_line=list(lines)), self.sources)

    def nonempty(self, what: str, fix: str) -> UtteranceTable:
        """self, or a UserError naming the table when no row is left (``what``: e.g. "split 'test'")."""
        if not len(self.rows):
            raise UserError(f"no rows with {what}", path=self.source, fix=fix)
        return self

    def audio_rows(self) -> pd.DataFrame:
        """The rows, for reading their audio: a Kaldi ``cmd |`` row is refused here, in one line naming
        the table's line (the engines open paths with libsndfile and would fail further from the
        cause), and so is a FIFO or device (its first read blocks for ever, in a loader worker that
        Ctrl-C cannot reach)."""
        audio = self.rows["audio"].astype(str)
        pipes = audio.map(is_pipe)
        if pipes.any():
            first = str(self.rows["id"][pipes].iloc[0])
            raise UserError(f"row {first!r} ({int(pipes.sum())} row(s) in all) names a piped command, not an audio "
                            f"file: {audio[pipes].iloc[0].strip()!r}", path=self.source,
                            line=line_of_id(self.sources[0], first) if len(self.sources) == 1 else None, fix=PIPE_FIX)
        special = next((a for a in sorted(set(audio)) if is_special(a)), None)
        if special is not None:
            regular_file(special, "audio file", fix=f"the table {self.source} must name audio files")
        return self.rows
