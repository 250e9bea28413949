"""A study's inputs checked against the data before any job runs (`sweep`, `study`, `--dry-run`):
every step's problem printed as one line on the config key it is about."""
from __future__ import annotations

import sys
from pathlib import Path

from corpora.base.errors import UserError


def preflight(cfg, jobs, out) -> None:
    """Check every step's inputs against the data before any job runs (gendergap.sweep.check_steps:
    tables, corpora, splits, translation columns, audio headers, speakers' genders, fairseq's
    batching, checkpoint files), print every problem as one line naming the config line and the
    fix, and refuse (exit 2) while there is any: nothing is submitted, no job state is written."""
    from gendergap.sweep import check_steps

    found = check_steps(jobs, out)
    if not found:
        return
    lines = _key_lines(cfg)
    errors = [problem_error(cfg, lines, p) for p in found]
    if len(errors) == 1:
        raise errors[0]
    for e in errors:
        print(e, file=sys.stderr)
    raise UserError(f"{len(found)} problem(s) with the study's inputs, listed above; nothing was submitted",
                    path=cfg.path, fix="fix each one, then run again (`sweep --dry-run` checks without running)")


def _key_lines(cfg) -> dict:
    """Every key path of the config file -> its line (``corpus.table`` -> 34)."""
    from corpora.base.strict_yaml import read_yaml
    try:
        _, marks = read_yaml(Path(cfg.path), missing_fix="")
    except UserError:
        return dict(cfg.lines)
    return {**{".".join(map(str, k)): v for k, v in marks.items()}, **cfg.lines}


def problem_error(cfg, lines: dict, p) -> UserError:
    """A step's problem as the one-line error ``config.yaml:LINE: task 'fr-en-st': what -- fix``, on
    the line of the config key it is about."""
    key = p.key or ""
    line = lines.get(key)
    if line is None and "." in key:
        line = lines.get(key.split(".")[0])
    kind, _, name = key.partition(".")
    if kind == "selections":   # selections.<name>.<key>: the line is the key's, the subject the selection
        name = name.split(".")[0]
    subject = {"tasks": "task", "checkpoints": "checkpoint", "selections": "selection"}.get(kind)
    if subject:
        who = f"{subject}{'s' if p.also else ''} {', '.join(repr(n) for n in (name, *p.also))}: "
    else:
        who = f"{key}: " if key else ""
    return UserError(who + p.message, path=cfg.path, line=line, fix=p.fix)
