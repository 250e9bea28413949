"""Reading the user's text files: the one line-file reader (``read_lines``) and the one table reader
(``read_delimited``, a header and rows: TSV, CSV).

Every handed text file -- corpus metadata, speaker->gender lists, id lists, hypotheses, references,
MuST-SHE and WinoMT files, Kaldi output, a model folder's label list -- is read here, one way: UTF-8
(a BOM dropped) or a one-line UserError naming the file and the line of the first bad byte; a FIFO,
device or directory refused before anything opens it (a read would block for ever); a size bound
where the caller gives one (a label file: ``MAX_LABEL_BYTES``); lines split on ``\\n`` only (see
``split_lines``). tests/test_code_shape.py keeps every other module from parsing such a file itself
(pandas.read_csv, csv.reader, csv.DictReader, str.splitlines), each remaining exception named there
with its reason.

Two ways Python's csv module gets a metadata file wrong without a word, handled by ``read_delimited``:

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
import os
from pathlib import Path

from corpora.base.boundary import regular_file
from corpora.base.errors import UserError

# A label file (a speaker -> gender list, Kaldi's spk2gender, MLS's metainfo.txt) holds one short line
# per speaker: a million speakers fit in ~30 MB, so a larger one is not the file meant (and is read whole).
MAX_LABEL_BYTES = 64 << 20

_NO_LIMIT = 2**31 - 1   # a C long on every platform csv is built for
QUOTE_FIX = 'close the quote; inside a quoted field write a quote twice ("")'


def read_utf8(path: str | os.PathLike, what: str = "file", *, max_bytes: int | None = None,
              fix: str | None = None) -> str:
    """The whole file as text, BOM dropped. Missing, unreadable, special (a FIFO), over ``max_bytes``
    or non-UTF-8 -> UserError. ``what`` names the file's role in the message ("references", "MuST-SHE
    TSV", ...); ``fix``, when given, is the advice every error gives."""
    path = Path(path)
    if path.exists():
        regular_file(path, what, max_bytes=max_bytes, fix=fix)   # a FIFO or device would block the read for ever
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{what} not found", path=path, fix=fix or "check the path") from None
    except OSError as e:
        raise UserError(f"cannot read {what} ({e.strerror})", path=path,
                        fix=fix or "check the path and permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise UserError(f"{what} is not UTF-8 (byte 0x{raw[e.start]:02x})", path=path, line=line,
                        fix=fix or "re-encode it as UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8)") from None
    return text.removeprefix("\ufeff")  # a BOM from some editors is not part of the first field


def check_no_nul(text: str, path: str | os.PathLike, what: str) -> None:
    """A NUL byte is never text: a truncated or binary file would otherwise be scored as words."""
    at = text.find("\x00")
    if at >= 0:
        raise UserError(f"NUL byte in the {what}: a binary or corrupted file, not text", path=path,
                        line=text.count("\n", 0, at) + 1,
                        fix="regenerate the file (or strip the NULs, e.g. tr -d '\\000' < FILE > FILE.txt)")


def split_lines(text: str) -> list[str]:
    """Lines split on ``\n`` only (a ``\r`` before it is dropped; a final newline does not
    make an extra empty line). Not ``str.splitlines``: it also splits on U+0085, U+2028,
    U+2029, U+001C-U+001E, \v and \f, which occur inside real transcripts and would shift
    every later line of a line-aligned text file against its yaml/segments."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_lines(path: str | os.PathLike, what: str = "file", *, max_bytes: int | None = None,
               fix: str | None = None, refuse_nul: bool = False) -> list[str]:
    """A handed line file: its lines without their line ends, split on ``\n`` only (``split_lines``);
    read by ``read_utf8`` (a file over ``max_bytes`` -- a label file: MAX_LABEL_BYTES -- is refused
    before it is read). ``refuse_nul``: a NUL byte is an error naming its line (hypotheses,
    references: text to be scored)."""
    text = read_utf8(path, what, max_bytes=max_bytes, fix=fix)
    if refuse_nul:
        check_no_nul(text, path, what)
    return split_lines(text)


def read_delimited(path: str | os.PathLike, delimiter: str = "\t", quoting: int = csv.QUOTE_NONE, *,
                   what: str = "file", max_bytes: int | None = None, fix: str | None = None,
                   refuse_nul: bool = False, skip_blank: bool = False) -> tuple[list[str], list[tuple[int, dict]]]:
    """A header + rows file: (header, [(line number, {column: value})]). A row with the wrong
    number of fields, or an unbalanced quote, is a UserError naming its line. Corpus TSVs
    (Common Voice, MuST-SHE) hold raw quotes in sentences, hence QUOTE_NONE by default. A blank
    line is skipped; ``skip_blank`` skips a row whose every field is blank too. ``what``, ``max_bytes``,
    ``fix`` and ``refuse_nul`` as for ``read_lines``."""
    path = Path(path)
    text = read_utf8(path, what, max_bytes=max_bytes, fix=fix)
    if refuse_nul:
        check_no_nul(text, path, what)
    if not text.strip():
        raise UserError(f"empty {what}", path=path, line=1, fix=fix or "the first line must be the header")
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
                raise _parse_error(path, lines, start, reader.line_num, delimiter, str(e), fix) from None
            end = reader.line_num
            if header is None:
                header = [h.strip() for h in fields]
                continue
            if not fields or (len(fields) == 1 and not fields[0].strip()) or \
                    (skip_blank and not any(f.strip() for f in fields)):
                continue
            if quoted and end > start:
                _check_span(path, lines, start, end, delimiter, len(header), len(fields), fix)
            if len(fields) != len(header):
                raise UserError(f"{len(fields)} fields, the header has {len(header)}", path=path, line=start,
                                fix=fix or f"one row per line, {sep_name}-separated, no separator inside a field")
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


def _parse_error(path, lines, start, line_num, delimiter, detail, fix=None) -> UserError:
    spans = _quoted_fields(lines, start, max(line_num, start), delimiter)
    if "end of data" in detail:   # strict csv: the file ended inside a quoted field
        opened = next((o for o, c in reversed(spans) if c is None), start)
        return UserError("a quoted field opens here and is not closed before the end of the file "
                         "(an unbalanced quote)", path=path, line=opened, fix=fix or QUOTE_FIX)
    if "expected after" in detail:   # strict csv: text after a closing quote
        opened = spans[-1][0] if spans else line_num
        return UserError(f"the quoted field opened here has text after a closing quote (line {line_num})",
                         path=path, line=opened,
                         fix=fix or 'quote the whole field and double each quote inside it ("")')
    return UserError(f"cannot parse this row ({detail})", path=path, line=start,
                     fix=fix or f"one row per line, {'tab' if delimiter == chr(9) else repr(delimiter)}-separated")


def _check_span(path, lines, start, end, delimiter, n_header, n_fields, fix=None) -> None:
    """A row over several lines: refuse it when a quote seems to have swallowed rows."""
    opened = next((o for o, c in _quoted_fields(lines, start, end, delimiter) if c and c > o), start)
    for n in range(opened + 1, end + 1):
        if lines[n - 1].count(delimiter) >= n_header - 1:
            raise UserError(f"the quoted field opened here runs over line {n}, which looks like a row of its own "
                            "(an unbalanced quote?)", path=path, line=opened, fix=fix or QUOTE_FIX)
    if n_fields != n_header:
        raise UserError(f"the quoted field opened here runs to line {end} and the row has {n_fields} fields, "
                        f"the header {n_header} (an unbalanced quote?)", path=path, line=opened, fix=fix or QUOTE_FIX)
