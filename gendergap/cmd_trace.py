"""`gendergap trace`: a report cell, a score or a run -> its run, its study step, and the
command lines that redo exactly that step (analysis.trace reads and renders the chain; this
module renders the command lines, through the CLI's own parsers)."""
from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from corpora.base.errors import UserError
from gendergap.options import options_of
from gendergap.runs.leaf import leaf_of

DESCRIPTION = """\
Trace a number back to what made it: the score row(s), the run that stored them (config, git sha,
package versions, seed, input files with size and mtime, log), the study step that ran it (kind,
name, key, typed fields) and the gendergap command lines that redo exactly that step. The
commands write into --into (default ./rerun), never over the study: the same inputs give the same
number there."""

EPILOG = """\
examples:
  gendergap trace --report study/report table4 asr-frozen:B-tiny "WER All"
  gendergap trace --report study/report table5 B-tiny "fr-en All"
  gendergap trace --db study/results.db --score 42
  gendergap trace --db study/results.db --run 7 --json
A row is the checkpoint, qualified by task or pair when it is on several rows (asr-e2e:F-tiny,
fr-en:F-tiny); a column as the Markdown table heads it (WER All, F, M, Δrel, fr-en All). Every
table CSV carries each cell's score id (<col>_score_id) and the row's run ids (run_ids).
"""


def register(subparsers, group: str, help_: str) -> None:
    p = subparsers.add_parser(group, help=help_, description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cell", nargs="*", metavar="TABLE ROW COLUMN",
                   help="with --report: the table (table4, table5), the row and the column of a cell")
    p.add_argument("--report", metavar="DIR", help="a report directory (`gendergap report`, a study's report/)")
    p.add_argument("--db", help="the results DB (default: the report's study DB, <report>/../results.db)")
    p.add_argument("--score", type=int, action="append", help="a score row id (repeatable)")
    p.add_argument("--run", type=int, help="a run id")
    p.add_argument("--into", default="rerun", metavar="DIR",
                   help="where the printed commands write their output and DB (default ./rerun)")
    p.add_argument("--json", action="store_true", help="print the chain as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from analysis.trace import render_chain, trace_scores, trace_target

    ids, db = trace_target(**options_of(trace_target, args))
    chain = trace_scores(db, ids, run_id=args.run)
    for run_ in chain["runs"]:
        run_["commands"] = rerun_commands(run_["step"], args.into, args.top_parser) if run_["step"] else []
    print(json.dumps(chain, indent=2, default=str) if args.json else render_chain(chain, db))
    return 0


# --- the commands that redo a step ---------------------------------------------------------------

def step_of_record(step: dict):
    """The Step object a results-DB step record ({kind, name, fields}) describes."""
    from gendergap.steps import base

    for cls in _subclasses(base.Step):
        kinds = getattr(cls, "KINDS", None) or ((cls.KIND,) if cls.KIND else ())
        if step["kind"] in kinds:
            return cls(name=step["name"], **step["fields"])
    raise UserError(f"step kind {step['kind']!r} is unknown to this gendergap",
                    fix="trace with the version that made it")


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def rerun_commands(step: dict, into: str | Path, top: argparse.ArgumentParser) -> list[str]:
    """Shell lines redoing ``step`` (a results-DB step record) with its own inputs, its outputs
    and DB moved under ``into``, rendered through ``top``, the `gendergap` parser. Empty when the
    step is no CLI leaf's work."""
    import gendergap.steps  # noqa: F401 (registers every step class)

    obj = step_of_record(step)
    into = Path(into)
    moved = {}
    if getattr(obj, "out", None):
        moved[str(obj.out)] = str(into / Path(obj.out).name)
    if getattr(obj, "db", None):
        moved[str(obj.db)] = str(into / "results.db")
    return [shlex.join(argv_of(top, _leaf(function, step), {k: _move(v, moved) for k, v in kwargs.items()}))
            for function, kwargs in obj.calls()]


def _leaf(function, step: dict) -> str:
    """The leaf ``function`` declares (@cli_leaf). A step runs only functions that declare one
    (gendergap.steps.base.run_calls), so a miss is a step record this gendergap runs differently."""
    leaf = leaf_of(function)
    if leaf is None:
        raise UserError(f"step kind {step['kind']!r} now runs {function.__module__}.{function.__qualname__}, "
                        "which no CLI leaf declares", fix="trace with the gendergap version that made the run")
    return leaf


def _move(value, moved: dict):
    if isinstance(value, str):
        for old, new in moved.items():
            if value == old or value.startswith(old + "/"):
                return new + value[len(old):]
    if isinstance(value, list):
        return [_move(v, moved) for v in value]
    return value


def argv_of(top: argparse.ArgumentParser, leaf: str, kwargs: dict) -> list[str]:
    """``gendergap <leaf> --opt value ...`` calling the leaf's function with ``kwargs`` (the
    options' dests are its parameter names: gendergap.options.call). ``top`` is the `gendergap`
    parser, handed in by cli.build_parser (args.top_parser): importing gendergap.cli here would
    close a circle, cli -> cmd_trace -> cli."""
    parser = leaf_parser(top, leaf)
    actions = {a.dest: a for a in parser._actions}
    top_actions = {a.dest: a for a in top._actions if a.option_strings}
    before, opts, positional = [], [], []
    for key, value in kwargs.items():
        action = actions.get(key) or top_actions.get(key)
        if action is None:
            raise UserError(f"`gendergap {leaf}` has no option for {key!r}", fix="a bug: report it")
        target = before if key in top_actions and key not in actions else opts
        if value is None:
            continue
        if not action.option_strings:
            positional += [str(v) for v in (value if isinstance(value, list) else [value])]
        elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            target += _flag(parser if key in actions else top, key, value)
        elif isinstance(action, argparse._AppendAction):
            for v in value if isinstance(value, list) else [value]:
                target += [action.option_strings[-1], str(v)]
        elif action.nargs in ("*", "+"):
            target += [action.option_strings[-1], *map(str, value)]
        else:
            target += [action.option_strings[-1], str(value)]
    return ["gendergap", *before, *leaf.split(), *opts, *positional]


def _flag(parser: argparse.ArgumentParser, dest: str, value: bool) -> list[str]:
    """The flag that sets the boolean ``dest`` to ``value``; none when the leaf's default is already
    ``value``. Chosen among all the flags of that dest, shown ones first: `probe run` has
    `--no-random-init` and a hidden `--random-init`, and the last of them alone could not say False."""
    if parser.get_default(dest) == value:
        return []
    flags = sorted((a for a in parser._actions if a.dest == dest and a.const == value and a.option_strings),
                   key=lambda a: a.help == argparse.SUPPRESS)
    if not flags:
        raise UserError(f"no flag of `{parser.prog}` sets {dest} to {value}", fix="a bug: report it")
    return [flags[0].option_strings[-1]]


def leaf_parser(top: argparse.ArgumentParser, leaf: str) -> argparse.ArgumentParser:
    """The parser of `gendergap <leaf>` (words of subcommands under ``top``); a leaf the CLI lacks is
    a function declaring a leaf that does not exist (@cli_leaf): one line, not a KeyError."""
    parser = top
    for word in leaf.split():
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            raise UserError(f"`gendergap {leaf}` is no command line of this gendergap",
                            fix="a bug: the function's @cli_leaf names a leaf the CLI lacks; report it")
        parser = sub.choices[word]
    return parser
