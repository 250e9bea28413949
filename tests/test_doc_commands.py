"""Every command the manual shows is one the CLI accepts (issue 65). Each `gendergap ...` line of
README.md and docs/*.md -- in fenced code blocks, and in inline code spans that start with
`gendergap ` -- and each example line of every command's `--help` is parsed by the real parser
(gendergap.cli.build_parser, option abbreviations off), so every subcommand, flag and choice it
names must exist. `make X` (in a block or a span) must name a Makefile target; `bash|python|sbatch
scripts/...` and `pip install -r FILE` must name files of the checkout. A `\\` continuation that went missing (a
code-block line starting with an option) or collapsed into a run of spaces (a single `\\` at the end
of a line of a Python string joins the lines) fails too. All failures are reported at once, each
with its file:line (or `gendergap X --help:line`) and the parser's message.

The lines are read as a shell reads them: `\\` continuations joined, a quote left open continued on
the next line, `# comments` dropped; `;`, `&&`, `||`, `|`, `&` and `( )` separate commands;
redirections (`> f`, `2>&1`, a `<<EOF` heredoc and its body) are dropped; `$(...)` is a command of
its own and one word where it stands; `for v in a b; do` sets `$v` to its first value; `{a,b}`
expands as in bash.

Placeholders written for the reader to fill in are read, not skipped:
- an upper-case word the parser refuses as a value (`--precision P`, `--gpus G`,
  `gendergap COMMAND --help`) stands for the first choice offered, else for 1;
- `[--flag VALUE]` is an optional part, parsed as given; `sweep/study` (two commands' names) is
  parsed as each;
- `...` stands for arguments left out: a line with one may lack required arguments;
- an inline code span names a command in a sentence: it may leave out required arguments
  (`gendergap ckpt add`), and the value of an option it ends on (`gendergap study --record`).
Not read: ```yaml/```python blocks (not shell) and CHANGELOG.md, whose entries name options as
they were in their release (a renamed option is named there on purpose).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
NOT_SHELL = {"yaml", "yml", "python", "py", "json", "toml", "r"}
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "|&", ";;"}
REDIRECTS = {">", ">>", "<", ">&", "&>", "<&", "<>", ">|", "&>>"}
HEREDOCS = {"<<", "<<-"}
PREFIXES = {"do", "then", "else", "time", "!", "exec", "nohup", "command"}
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
# a single `\` ending a line of a Python string joins it to the next: the indentation stays as a gap
COLLAPSED = re.compile(r"\S {5,}-")


@dataclass
class Command:
    where: str          # file:line, or `gendergap X --help:line` for a help example
    text: str           # the line as the reader sees it (continuations joined)
    argv: list[str]     # the words after the program
    kind: str           # gendergap | make | script | pip
    inline: bool = False


# -- reading the lines as a shell would ---------------------------------------------------------

def _brace_expand(word: str) -> list[str]:
    m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not m:
        return [word]
    return [w for alt in m.group(1).split(",") for w in _brace_expand(word[:m.start()] + alt + word[m.end():])]


def _words(line: str) -> list[str]:
    """The shell words and operators of one logical line (ValueError on a quote left open)."""
    line = re.sub(r"(?<![\w$])\d+(?=[<>])", "", line)        # `2>&1`: the descriptor is no word
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    return list(lex)


def _segments(line: str, variables: dict) -> tuple[list[list[str]], list[str]]:
    """(the simple commands of LINE as word lists, the heredoc delimiters it opens)."""
    inner = []
    while m := re.search(r"\$\(([^()]*)\)", line):
        inner.append(m.group(1))
        line = line[:m.start()] + "SUBST" + line[m.end():]
    segments, heredocs = [], []
    for text in [line, *inner]:
        words, current, i = _words(text), [], 0
        segments.append(current)
        while i < len(words):
            w = words[i]
            if w in SEPARATORS:
                current = []
                segments.append(current)
            elif w in REDIRECTS:
                i += 1                                       # and the file redirected to or from
            elif w in HEREDOCS:
                i += 1
                heredocs += words[i:i + 1]
            else:
                current.append(w)
            i += 1
    out = []
    for seg in segments:
        while seg and (seg[0] in PREFIXES or re.fullmatch(r"[A-Za-z_]\w*=.*", seg[0])):
            seg = seg[1:]                                    # `do gendergap ...`, `X=1 gendergap ...`
        if len(seg) >= 4 and seg[0] == "for" and seg[2] == "in":
            variables[seg[1]] = _brace_expand(seg[3])[0]     # every pass parses alike
            continue
        words = []
        for w in seg:
            for name, value in variables.items():
                w = re.sub(r"\$(?:\{%s\}|%s\b)" % (name, name), value, w)
            words += _brace_expand(w)
        if words:
            out.append(words)
    return out, heredocs


def _classify(words: list[str]) -> tuple[str, list[str]] | None:
    """(kind, argv) of a command this test checks, else None."""
    base = words[0].rsplit("/", 1)[-1]
    python = re.fullmatch(r"python[\d.]*", base)
    if base == "gendergap":
        return "gendergap", words[1:]
    if "-m" in words[:-1] and words[words.index("-m") + 1] == "gendergap.cli":   # python -m, torchrun -m
        return "gendergap", words[words.index("-m") + 2:]
    if base == "make":
        return "make", words[1:]
    if (base in ("bash", "sh", "sbatch") or python) and any(w.startswith("scripts/") for w in words[1:]):
        return "script", words[1:]
    if (base in ("pip", "pip3") or python and words[1:3] == ["-m", "pip"]) and "-r" in words:
        return "pip", words[1:]
    return None


def _looks_like_a_command(text: str) -> bool:
    return bool(re.search(r"(^|[\s;&|(])(\S*/)?gendergap(\s|$)|-m gendergap\.cli|^make\s|scripts/|pip3? install",
                          text))


def shell_commands(lines: list[tuple[int, str]], where: str, problems: list[str], *, inline: bool = False,
                   orphans: bool = True) -> list[Command]:
    """The commands of a block of shell lines (line number, text). ORPHANS: a line that starts with an
    option is a continuation whose `\\` went missing (true in a code block, not in help text)."""
    variables, found, i = {}, [], 0
    previous = None
    while i < len(lines):
        lineno, text = lines[i]
        i += 1
        while True:
            while text.rstrip().endswith("\\") and i < len(lines):
                text = text.rstrip()[:-1].rstrip() + " " + lines[i][1].strip()
                i += 1
            stripped = text.strip().removeprefix("$ ")        # a console prompt
            try:
                segments, heredocs = _segments(stripped, variables)
                break
            except ValueError as e:                           # a quote left open: the shell reads on
                if i < len(lines):
                    text += "\n" + lines[i][1]
                    i += 1
                    continue
                if _looks_like_a_command(stripped):
                    problems.append(f"{where}:{lineno}: `{stripped}`: not a shell line ({e})")
                segments, heredocs = [], []
                break
        for delimiter in heredocs:                            # the heredoc's body is data
            while i < len(lines) and lines[i][1].strip() != delimiter:
                i += 1
            i += 1
        if orphans and stripped.startswith("-") and previous:
            problems.append(f"{where}:{lineno}: `{stripped}`: continues `{previous}` but that line has no `\\`")
        previous = None
        for words in segments:
            if kind_argv := _classify(words):
                found.append(Command(f"{where}:{lineno}", stripped, kind_argv[1], kind_argv[0], inline))
                previous = stripped
                if COLLAPSED.search(stripped.split(" #")[0]):
                    problems.append(f"{where}:{lineno}: `{stripped}`: a run of spaces before an option: "
                                    "a `\\` continuation collapsed (write `\\\\` in a Python string)")
    return found


def doc_commands(paths, problems: list[str]) -> list[Command]:
    """Every command of the Markdown files PATHS (fenced shell blocks and `gendergap ...` spans);
    what cannot be read is added to PROBLEMS."""
    found = []
    for path in map(Path, paths):
        name = str(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
        prose, block, fence, language = [], [], None, ""
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = re.match(r"\s*(`{3,}|~{3,})\s*([\w-]*)", line)
            if fence is None and m:
                fence, language, block = m.group(1), m.group(2).lower(), []
                line = ""
            elif fence is not None and line.strip() == fence:
                if language not in NOT_SHELL:
                    found += shell_commands(block, name, problems)
                fence, line = None, ""
            elif fence is not None:
                block.append((lineno, line))
                continue
            prose.append((lineno, line))
        found += _inline_commands(prose, name, problems)
    return found


def _inline_commands(prose: list[tuple[int, str]], name: str, problems: list[str]) -> list[Command]:
    """The code spans of running text that start with a command this test checks (`gendergap ...`,
    `make ...`, `bash scripts/...`); a span may wrap onto the next line."""
    text = "\n".join(line for _, line in prose)
    starts, found = [0], []
    for _, line in prose:
        starts.append(starts[-1] + len(line) + 1)
    for m in re.finditer(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", text, re.S):
        if "\n\n" in m.group(2):                              # a span ends with its paragraph
            continue
        # Markdown joins a wrapped span; `\|` in a table is `|`
        span = " ".join(m.group(2).split()).replace("\\|", "|")
        if re.match(r"(\.venv/bin/)?gendergap |make |(bash|sh|sbatch|python3?) scripts/|pip3? install ", span):
            lineno = prose[max(i for i, s in enumerate(starts) if s <= m.start())][0]
            found += shell_commands([(lineno, span)], name, problems, inline=True)
    return found


def help_commands(problems: list[str]) -> list[Command]:
    """The example lines of every parser's --help (the top level, each group, each leaf) and their
    continuation lines."""
    from gendergap.cli import build_parser
    found = []

    def walk(parser, prefix):
        lines = parser.format_help().splitlines()
        examples, i = [], 0
        while i < len(lines):
            if re.match(r"\s*((\S*/)?gendergap |(torchrun|python\S*) .*-m gendergap\.cli )", lines[i]):
                examples.append((i + 1, lines[i]))
                while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    examples.append((i + 1, lines[i]))
            i += 1
        found.extend(shell_commands(examples, " ".join(["gendergap", *prefix, "--help"]), problems, orphans=False))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, prefix + [name])
    with mock.patch.dict("os.environ", {"COLUMNS": "100"}):   # the width argparse wraps at
        walk(build_parser(), [])
    return found


# -- checking them -----------------------------------------------------------------------------

class _Refused(Exception):
    pass


class _Exited(Exception):
    pass


def _error(self, message):
    raise _Refused(message)


def _exit(self, status=0, message=None):
    raise _Exited(status, message)


def _strict_parser():
    """gendergap's parser; an option must be written whole (`--spk` for `--speakers` is refused: a
    prefix stops working the day another option starts with it)."""
    from gendergap.cli import build_parser

    def walk(parser):
        parser.allow_abbrev = False
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    walk(sub)
    parser = build_parser()
    walk(parser)
    return parser


def parse_message(parser, argv: list[str]) -> str | None:
    """None if PARSER takes ARGV (`--help` included), else the parser's message."""
    from corpora.base.errors import UserError
    argv = list(argv)
    for i in [i for i, w in enumerate(argv) if w.startswith("[-")]:   # [--flag VALUE]: parsed as given
        argv[i] = argv[i][1:]
        j = next((k for k in range(i, len(argv)) if argv[k].endswith("]")), None)
        if j is not None:
            argv[j] = argv[j][:-1]
    for _ in range(len(argv) + 1):
        try:
            with mock.patch.object(argparse.ArgumentParser, "error", _error), \
                    mock.patch.object(argparse.ArgumentParser, "exit", _exit), \
                    contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                parser.parse_args(argv)
            return None
        except _Exited as e:
            return None if e.args[0] == 0 else str(e.args[1]).strip()
        except (_Refused, UserError) as e:
            message = str(e)
        choices = re.findall(r"'([^']*)'", message.partition("(choose from")[2])
        value = next((w for w in re.findall(r"'([^']*)'", message.partition("(choose from")[0]) if w in argv), None)
        if value and "/" in value and choices and set(value.split("/")) <= set(choices):   # `sweep/study`
            return next(filter(None, (parse_message(parser, [a if a != value else alt for a in argv])
                                      for alt in value.split("/"))), None)
        if not (value and PLACEHOLDER.fullmatch(value)):
            return message
        argv[argv.index(value)] = choices[0] if choices else "1"   # a placeholder: the first choice, else 1
    return message


def _tolerated(c: Command, message: str) -> bool:
    """Whether MESSAGE is only about what the line leaves out on purpose (`...`, a span in a sentence)."""
    if "..." in c.argv or c.inline:
        if message.startswith("the following arguments are required"):
            return True
        unknown = message.partition("unrecognized arguments: ")[2]
        if unknown and set(unknown.split()) == {"..."}:
            return True
    m = re.fullmatch(r"argument (\S+): expected (one|at least one) argument", message)
    return bool(c.inline and m and c.argv and c.argv[-1] in m.group(1).split("/"))


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return {t for m in re.finditer(r"^([^\s:=#][^:=]*?)\s*::?(?!=)", text, re.M) for t in m.group(1).split()}


def check(commands: list[Command]) -> list[str]:
    """One line per command the CLI or the checkout does not have. The parser's --out checks look at
    the file system: call it in a fresh folder, as a user's would be."""
    parser, targets, problems = _strict_parser(), _make_targets(), []
    for c in commands:
        if c.kind == "gendergap":
            message = parse_message(parser, c.argv)
            if message and not _tolerated(c, message):
                problems.append(f"{c.where}: `{c.text}`: {message}")
        elif c.kind == "make":
            problems += [f"{c.where}: `{c.text}`: the Makefile has no target {t!r}"
                         for t in c.argv if not t.startswith("-") and "=" not in t and t not in targets]
        elif c.kind == "script":
            problems += [f"{c.where}: `{c.text}`: {w} does not exist"
                         for w in c.argv if w.startswith("scripts/") and not (REPO / w).exists()]
        elif c.kind == "pip":           # a relative path is the checkout's; /path/to/... is the reader's own
            problems += [f"{c.where}: `{c.text}`: {w} does not exist" for flag, w in zip(c.argv, c.argv[1:])
                         if flag in ("-r", "-c") and not w.startswith("/") and not (REPO / w).exists()]
    return problems


# -- the tests ---------------------------------------------------------------------------------

def test_every_command_in_the_manual_parses(tmp_path, monkeypatch):
    problems = []
    commands = doc_commands(PAGES, problems)
    kinds = [c.kind for c in commands]
    # a reader that stopped seeing the manual's commands would pass with nothing checked
    assert kinds.count("gendergap") > 100 and "make" in kinds and "script" in kinds, kinds
    monkeypatch.chdir(tmp_path)
    problems += check(commands)
    assert not problems, f"{len(problems)} command(s) of the manual fail:\n" + "\n".join(problems)


def test_every_example_of_the_help_parses(tmp_path, monkeypatch):
    problems = []
    commands = help_commands(problems)
    assert len(commands) > 100, len(commands)
    monkeypatch.chdir(tmp_path)
    problems += check(commands)
    assert not problems, f"{len(problems)} --help example(s) fail:\n" + "\n".join(problems)


@pytest.mark.parametrize("old,new,words", [
    ("gendergap score asr ", "gendergap score asr --no-such-flag ", "unrecognized arguments: --no-such-flag"),
    ("--lang fr --pro", "--lang de --pro", "argument --lang: invalid choice: 'de'"),   # a continued line
    ("gendergap score delta", "gendergap score no-such-command", "invalid choice: 'no-such-command'"),
])
def test_a_planted_bad_flag_is_reported_with_its_file_and_line(tmp_path, monkeypatch, old, new, words):
    """A copy of a page with one bad flag, choice or command fails, naming that copy, that line and
    the parser's words; the copy as shipped passes, so what is reported is the plant."""
    page = tmp_path / "scoring.md"
    lines = (REPO / "docs" / "scoring.md").read_text(encoding="utf-8").splitlines()
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    problems = []
    assert not check(doc_commands([page], problems)) and not problems
    lineno = next(n for n, line in enumerate(lines, 1) if line.startswith("gendergap ") and old in line)
    lines[lineno - 1] = lines[lineno - 1].replace(old, new, 1)
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    problems += check(doc_commands([page], problems))
    assert len(problems) == 1 and problems[0].startswith(f"{page}:{lineno}: ") and words in problems[0], problems


def test_a_missing_or_collapsed_continuation_is_reported(tmp_path, monkeypatch):
    """The `\\` that joins a long example's lines: dropped, its next line is a command of its own
    (`--translations ...`) and the first lacks the arguments that line gives; collapsed into spaces
    (a single `\\` ending a line of a Python string), the line parses but no longer shows its parts."""
    page = tmp_path / "p.md"
    page.write_text("```\n"
                    "gendergap score winomt --gold en.txt\n"
                    "    --translations hyps.txt --lang fr\n"
                    "gendergap score delta --female 24.3       --male 20.1\n"
                    "```\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    problems = []
    problems += check(doc_commands([page], problems))
    assert [p.split(": `")[0] for p in problems] == [f"{page}:3", f"{page}:4", f"{page}:2"], problems
    assert "has no `\\`" in problems[0] and "collapsed" in problems[1] and "--translations" in problems[2]


SHELL_PAGE = """Run `gendergap corpus synth --out d`, then `make
study`.

```bash
for p in en es; do
  gendergap corpus index --kind mtedx --root m --lang fr --tgt-lang $p \\
      --out t/fr-$p.tsv   # one table per pair
done
$ gendergap corpus stats t/fr-{en,es}.tsv --format markdown | head -3 && make test
cat $(gendergap trace --report r table4) > out.txt 2>&1
gendergap corpus filter t.tsv --drop-unknown-gender test --out u.tsv <<END
gendergap this is the heredoc's body: data, not a command
END
bash scripts/no_such_script.sh; make no-such-target
```

```yaml
x: 1   # gendergap --not-a-command, in YAML
```
"""


def test_the_lines_are_read_as_a_shell_runs_them(tmp_path, monkeypatch):
    page = tmp_path / "p.md"
    page.write_text(SHELL_PAGE, encoding="utf-8")
    problems = []
    commands = doc_commands([page], problems)
    assert not problems
    assert [(c.where.rsplit(":", 1)[1], c.kind, " ".join(c.argv)) for c in commands] == [
        ("6", "gendergap", "corpus index --kind mtedx --root m --lang fr --tgt-lang en --out t/fr-en.tsv"),
        ("9", "gendergap", "corpus stats t/fr-en.tsv t/fr-es.tsv --format markdown"),
        ("9", "make", "test"),
        ("10", "gendergap", "trace --report r table4"),
        ("11", "gendergap", "corpus filter t.tsv --drop-unknown-gender test --out u.tsv"),
        ("14", "script", "scripts/no_such_script.sh"),
        ("14", "make", "no-such-target"),
        ("1", "gendergap", "corpus synth --out d"),
        ("1", "make", "study"),
    ]
    monkeypatch.chdir(tmp_path)
    assert check(commands) == [
        f"{page}:14: `bash scripts/no_such_script.sh; make no-such-target`: scripts/no_such_script.sh does not exist",
        f"{page}:14: `bash scripts/no_such_script.sh; make no-such-target`: "
        "the Makefile has no target 'no-such-target'"]


@pytest.mark.parametrize("argv,in_a_block,in_a_span", [
    ("bench --check-precision --precision P --device D", True, True),     # P: the first choice
    ("COMMAND --help", True, True),
    ("report --db r.db --out rep/ [--registry c.json]", True, True),
    ("sweep/study --trust-checkpoint", True, True),
    ("st train --gpus G", False, True),                  # G: 1; a span may leave out required arguments
    ("study --record", False, True),                     # a span may end on the option it names
    ("score asr ... --hyps n.tsv --hyp-column 2", True, True),           # `...`: the arguments left out
    ("sweep/nosuch --trust-checkpoint", False, False),
    ("bench --precision fp33", False, False),
    ("bench --check-prec", False, False),                # an abbreviation is not the option
])
def test_placeholders_are_read_not_skipped(tmp_path, monkeypatch, argv, in_a_block, in_a_span):
    """What the manual writes for the reader to fill in stands for a value the parser takes; the
    options and commands around it are still checked."""
    monkeypatch.chdir(tmp_path)
    for inline, ok in ((False, in_a_block), (True, in_a_span)):
        problems = check([Command("p.md:1", "gendergap " + argv, argv.split(), "gendergap", inline)])
        assert (not problems) is ok, (inline, problems)
