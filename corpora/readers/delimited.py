"""Header + rows files (CSV, TSV) read strictly: every row is where the file says it is.

Two ways Python's csv module gets a metadata file wrong without a word, handled here:

* An unbalanced quote. A field that opens with ``"`` runs until the next quote, across line
  ends, so a stray quote swallows the rows after it; when a later stray quote closes it before a
  separator, the swallowed rows even leave a row with the right field count (exit 0, rows gone).
  Quoted fields are parsed with ``strict=True`` (a quote never closed, or text after a closing
  quote, is an error), and a quoted field spanning lines is accepted only when none of the
  lines it covers looks like a row of its own (as many separators as the header). Errors name
  the line where the quoted field opens.
* csv's ``field_size_limit`` (128 KiB), a traceback on a long field: a whole-talk transcript
  can pass it, so the limit is lifted while reading (the quote checks above catch the usual
  cause of a huge field, an unbalanced quote that runs to the end of the file).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

from corpora.base.errors import UserError
from corpora.base.textfile import read_utf8

_NO_LIMIT = 2**31 - 1   # a C long on every platform csv is built for
QUOTE_FIX = 'close the quote; inside a quoted field write a quote twice ("")'


def read_delimited(path: Path, delimiter: str, quoting: int = csv.QUOTE_NONE) -> tuple[list[str], list[tuple[int, dict]]]:
    """A header + rows file: (header, [(line number, {column: value})]). A row with the wrong
    number of fields, or an unbalanced quote, is a UserError naming its line. Corpus TSVs
    (Common Voice, MuST-SHE) hold raw quotes in sentences, hence QUOTE_NONE by default."""
    text = read_utf8(path)
    if not text.strip():
        raise UserError("empty file", path=path, line=1, fix="the first line must be the header")
    quoted = quoting != csv.QUOTE_NONE
    lines = text.split("\n")
    sep_name = "tab" if delimiter == "\t" else repr(delimiter)
    old_limit = csv.field_size_limit(_NO_LIMIT)
    try:
        reader = csv.reader(io.StringIO(text), delimiter=delimiter, quoting=quoting, strict=quoted)
        rows: list[tuple[int, dict]] = []
        header: list[str] | None = None
        end = 0
        while True:
            start = end + 1      # a quoted cell may span lines: report where the row starts
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise _parse_error(path, lines, start, reader.line_num, delimiter, str(e)) from None
            end = reader.line_num
            if header is None:
                header = [h.strip() for h in fields]
                continue
            if not fields or (len(fields) == 1 and not fields[0].strip()):
                continue
            if quoted and end > start:
                _check_span(path, lines, start, end, delimiter, len(header), len(fields))
            if len(fields) != len(header):
                raise UserError(f"{len(fields)} fields, the header has {len(header)}", path=path, line=start,
                                fix=f"one row per line, {sep_name}-separated, no separator inside a field")
            rows.append((start, dict(zip(header, fields))))
    finally:
        csv.field_size_limit(old_limit)
    return header or [], rows


def _quoted_fields(lines: list[str], first: int, last: int, delimiter: str) -> list[tuple[int, int | None]]:
    """(line it opens on, line it closes on or None) of each quoted field in lines first..last
    (1-based), parsed the way csv does: a quote opens a field only at the field's start, and
    ``""`` inside a quoted field is a literal quote."""
    out: list[tuple[int, int | None]] = []
    in_quote, at_start = False, True
    for n in range(first, min(last, len(lines)) + 1):
        line = lines[n - 1]
        i = 0
        while i < len(line):
            c = line[i]
            if in_quote:
                if c == '"' and line[i + 1:i + 2] == '"':
                    i += 1
                elif c == '"':
                    in_quote = False
                    out[-1] = (out[-1][0], n)
            elif c == '"' and at_start:
                in_quote = True
                out.append((n, None))
            at_start = not in_quote and c == delimiter
            i += 1
        if not in_quote:
            at_start = True
    return out


def _parse_error(path, lines, start, line_num, delimiter, detail) -> UserError:
    spans = _quoted_fields(lines, start, max(line_num, start), delimiter)
    if "end of data" in detail:   # strict csv: the file ended inside a quoted field
        opened = next((o for o, c in reversed(spans) if c is None), start)
        return UserError("a quoted field opens here and is not closed before the end of the file "
                         "(an unbalanced quote)", path=path, line=opened, fix=QUOTE_FIX)
    if "expected after" in detail:   # strict csv: text after a closing quote
        opened = spans[-1][0] if spans else line_num
        return UserError(f"the quoted field opened here has text after a closing quote (line {line_num})",
                         path=path, line=opened, fix='quote the whole field and double each quote inside it ("")')
    return UserError(f"cannot parse this row ({detail})", path=path, line=start,
                     fix=f"one row per line, {'tab' if delimiter == chr(9) else repr(delimiter)}-separated")


def _check_span(path, lines, start, end, delimiter, n_header, n_fields) -> None:
    """A row over several lines: refuse it when a quote seems to have swallowed rows."""
    opened = next((o for o, c in _quoted_fields(lines, start, end, delimiter) if c and c > o), start)
    for n in range(opened + 1, end + 1):
        if lines[n - 1].count(delimiter) >= n_header - 1:
            raise UserError(f"the quoted field opened here runs over line {n}, which looks like a row of its own "
                            "(an unbalanced quote?)", path=path, line=opened, fix=QUOTE_FIX)
    if n_fields != n_header:
        raise UserError(f"the quoted field opened here runs to line {end} and the row has {n_fields} fields, "
                        f"the header {n_header} (an unbalanced quote?)", path=path, line=opened, fix=QUOTE_FIX)
