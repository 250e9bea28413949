"""Running the CLI in-process from a test, and reading its one-line errors."""
from __future__ import annotations

from gendergap import cli


def run_lines(capsys, *argv):
    """(exit code, stdout, the non-empty stderr lines) of `gendergap ARGV`."""
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, [line for line in err.splitlines() if line.strip()]


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
