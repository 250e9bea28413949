"""The one error type for problems the user can fix (bad input, bad options).

The CLI prints it as a single line -- ``file:line: what is wrong -- what to do`` -- and exits
with code 2, without a traceback (``--debug`` shows one). Anything else that escapes is a bug.
"""
from __future__ import annotations

import os
import unicodedata

# control, bidi/format and line-separator characters: printed raw they move the cursor, clear the
# screen, reorder text or start a new line (a forged line of output)
_HIDDEN = ("Cc", "Cf", "Zl", "Zp")


def printable(text) -> str:
    """``text`` with control, bidi and line-separator characters escaped (``\\x1b``, ``\\u202e``)."""
    s = str(text)
    if not any(unicodedata.category(c) in _HIDDEN for c in s):
        return s
    return "".join(c.encode("unicode_escape").decode("ascii") if unicodedata.category(c) in _HIDDEN else c
                   for c in s)


class UserError(Exception):
    """A problem in the user's input, reported as one line naming the file, the line and the fix."""

    exit_code = 2

    def __init__(self, message: str, *, path: str | os.PathLike | None = None,
                 line: int | None = None, fix: str | None = None):
        super().__init__(message)
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.line = line
        self.fix = fix

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path + (f":{self.line}" if self.line is not None else "") + ": "
        fix = f" -- {self.fix}" if self.fix else ""
        # one line whatever a handed file put into a name or path (corpora.base.boundary)
        return printable(f"{where}{self.message}{fix}")
