"""Running the CLI in-process from a test, and reading its one-line errors."""
from __future__ import annotations

import io
import logging
import sys
import warnings

from gendergap import cli

# what a fresh `python -m gendergap.cli` does not print (Python's default warning filters)
_SILENT_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


def run_lines(capsys, *argv):
    """(exit code, stdout, the non-empty stderr lines) of `gendergap ARGV`."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, [line for line in err.splitlines() if line.strip()]


def run_fresh(capfd, *argv, stdin: str = ""):
    """run_lines as a fresh `python -m gendergap.cli ARGV` process would show it, with capfd (fd-level writes
    count): stdin holds STDIN (default: empty, like /dev/null), logging handlers made by earlier imports
    write to this stderr, and each warning a fresh process would print is one more stderr line."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    handlers = [h for lg in loggers if isinstance(lg, logging.Logger) for h in lg.handlers
                if type(h) is logging.StreamHandler]
    streams = [h.stream for h in handlers]
    real_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        for h in handlers:
            h.stream = sys.stderr
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")
            rc = cli.main([str(a) for a in argv])
    finally:
        sys.stdin = real_stdin
        for h, stream in zip(handlers, streams):
            h.stream = stream
    out, err = capfd.readouterr()
    shown = [f"{w.category.__name__}: {w.message}" for w in caught if not issubclass(w.category, _SILENT_WARNINGS)]
    return rc, out, [line for line in err.splitlines() if line.strip()] + shown


def run_text(capsys, *argv):
    """(exit code, stdout, stderr) of `gendergap ARGV`."""
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(err: str) -> str:
    """The one line a user error prints (no traceback), asserted to be the only one."""
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1, err
    assert lines[0].startswith("gendergap: error: ") and "Traceback" not in err
    return lines[0]
