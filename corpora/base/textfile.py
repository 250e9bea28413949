"""Reading the user's text files: UTF-8 or a one-line error naming the file and the line."""
from __future__ import annotations

import os
from pathlib import Path

from corpora.base.boundary import regular_file
from corpora.base.errors import UserError


def read_utf8(path: str | os.PathLike, what: str = "file") -> str:
    """The whole file as text, BOM dropped. Missing, unreadable or non-UTF-8 -> UserError.

    ``what`` names the file's role in the message ("references", "MuST-SHE TSV", ...).
    """
    path = Path(path)
    if path.exists():
        regular_file(path, what)   # a FIFO or device would block the read for ever
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{what} not found", path=path, fix="check the path") from None
    except OSError as e:
        raise UserError(f"cannot read {what} ({e.strerror})", path=path, fix="check the path and permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise UserError(f"{what} is not UTF-8 (byte 0x{raw[e.start]:02x})", path=path, line=line,
                        fix="re-encode it as UTF-8 (e.g. iconv -f latin1 -t utf-8 FILE > FILE.utf8)") from None
    return text.removeprefix("\ufeff")  # a BOM from some editors is not part of the first field
