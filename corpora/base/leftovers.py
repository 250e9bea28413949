"""What a killed process of ours left in a shared folder (the temp dir), and when it may go.

A process that dies by SIGKILL never runs its ``finally``: its folder in the temp dir stays. Such
folders are named ``PREFIX<pid>-<rest>`` so that a later run can tell whose they were. But the temp
dir is shared: with other users (a name anyone can plant, a link to anywhere), with other hosts or
PID namespaces (a shared /tmp, a container), where a pid that is dead here is a live process
there. So a leftover is removed only when all of these hold:

- its name is ``PREFIX`` + a pid of at most 9 digits + ``-`` + a short word (a huge number is no
  pid; it is skipped, never handed to ``os.kill``);
- it is a real directory (``lstat``: a symlink is never followed into ``rmtree``) that this user owns;
- it has not changed for ``STALE_AFTER_S`` (a live run elsewhere keeps its folder);
- no process of that pid is alive here.
"""
from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

from corpora.base.boundary import special_kind

# a folder untouched this long belongs to no live run, even one on another host or in another PID
# namespace sharing the folder, whose pid says nothing here (analysis/report.py's clean_stale uses
# it for its staging folders too)
STALE_AFTER_S = 24 * 3600
_PID = r"([0-9]{1,9})"   # Linux pids stop at 2**22; nine digits always fit a C int for os.kill
_REST = r"[A-Za-z0-9_]{1,64}"   # tempfile.mkdtemp's random part, or a word


def pid_alive(pid: int) -> bool:
    """True when a process of this pid exists here (another user's too); this process counts."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):   # another user's; a number no pid has: kept
        return True
    return True


def stale_dirs(parent: str | os.PathLike, prefix: str, *, older_than: float = STALE_AFTER_S) -> list[Path]:
    """The folders ``parent/PREFIX<pid>-<rest>`` that are safe to remove (the module doc's rules)."""
    pattern = re.compile(re.escape(prefix) + _PID + "-" + _REST)
    try:
        names = os.listdir(parent)
    except OSError:   # no temp dir, or not ours to read: nothing to clean
        return []
    now, uid = time.time(), os.getuid()
    found = []
    for name in sorted(names):
        m = pattern.fullmatch(name)
        if not m:
            continue
        path = Path(parent) / name
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if (special_kind(st.st_mode) == "a directory" and st.st_uid == uid and now - st.st_mtime >= older_than
                and not pid_alive(int(m.group(1)))):
            found.append(path)
    return found


def remove_stale_dirs(parent: str | os.PathLike, prefix: str, *, older_than: float = STALE_AFTER_S) -> list[Path]:
    """Remove the stale leftovers ``stale_dirs`` finds; returns them. ``shutil.rmtree`` follows no
    link inside, and refuses a folder swapped for a link since it was looked at."""
    gone = stale_dirs(parent, prefix, older_than=older_than)
    for path in gone:
        shutil.rmtree(path, ignore_errors=True)
    return gone
