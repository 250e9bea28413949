"""MkDocs hook: the pages that come from the code and the repository, made at build time.

- `cli-reference.md`: every `gendergap` command's `--help`, walked from `gendergap.cli.build_parser`
  and formatted at a fixed width, so the page is what the installed command prints;
- `config-reference.md`: the study config's schema, `gendergap.config.schema_text` (what
  `gendergap sweep --schema` prints);
- `changelog.md`: the repository's CHANGELOG.md, served as a page (one file, no copy).

None of them is a file under docs/: a page of one of these names there is refused, so the site
can never show a stale hand copy. `mkdocs serve` rebuilds when CHANGELOG.md or the package changes.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

HELP_COLUMNS = 100   # the width every --help on the page is formatted at (reproducible output)
CLI_PAGE = "cli-reference.md"
CONFIG_PAGE = "config-reference.md"
CHANGELOG_PAGE = "changelog.md"


def _root(config) -> Path:
    return Path(config.config_file_path).resolve().parent


def on_config(config):
    # The pages describe the checkout being built: its package first on the import path.
    root = str(_root(config))
    if (Path(root) / "gendergap" / "__init__.py").is_file() and root not in sys.path:
        sys.path.insert(0, root)
    return config


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _block(text: str) -> str:
    fence = _fence(text)
    return f"{fence}text\n{text.rstrip()}\n{fence}\n"


def _parsers(parser: argparse.ArgumentParser, prefix: list[str]):
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, prefix + [name])


def cli_reference() -> str:
    from gendergap.cli import build_parser
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "LINES")}
    os.environ["COLUMNS"], os.environ["LINES"] = str(HELP_COLUMNS), "50"
    try:
        sections = [(" ".join(["gendergap", *prefix]), parser.format_help())
                    for prefix, parser in _parsers(build_parser(), [])]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    out = ["# Command reference", "",
           "Every `gendergap` command's `--help`, as the installed command prints it (generated from",
           "the command-line parser when the site is built; nothing here is written by hand). Groups come",
           "in the order of a study; each group's commands follow it.", ""]
    for command, _ in sections:
        depth = command.count(" ")
        out.append(f"{'    ' * max(depth - 1, 0)}- [`{command}`](#{_anchor(command)})")
    out.append("")
    for command, text in sections:
        out += [f"## {command}", "", _block(text)]
    return "\n".join(out)


def _anchor(command: str) -> str:
    # MkDocs' toc slugify of a heading "gendergap corpus index": lower case, spaces -> '-'
    return re.sub(r"[^\w\- ]", "", command).strip().lower().replace(" ", "-")


def config_reference() -> str:
    from gendergap.config import schema_text
    return "\n".join([
        "# Config reference",
        "",
        "Every key of a study config (the YAML file `gendergap sweep --config` reads), with its type,",
        "default, choices and meaning, every registered task type included. Generated from the config's",
        "schema when the site is built: it is what `gendergap sweep --schema` prints. How a config is",
        "put together, with examples: [The study config and sweeps](study-config.md).",
        "",
        _block(schema_text()),
    ])


def on_files(files, config):
    for name in (CLI_PAGE, CONFIG_PAGE, CHANGELOG_PAGE):
        if files.get_file_from_path(name) is not None:
            raise PluginError(f"docs/{name} is generated at build time (docs/hooks/reference.py): "
                              "remove the file under docs/")
    changelog = _root(config) / "CHANGELOG.md"
    if not changelog.is_file():
        raise PluginError(f"{changelog} is missing: the site's changelog page is that file")
    files.append(File.generated(config, CHANGELOG_PAGE, abs_src_path=str(changelog)))
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    files.append(File.generated(config, CONFIG_PAGE, content=config_reference()))
    return files


def on_serve(server, config, builder):
    root = _root(config)
    server.watch(str(root / "CHANGELOG.md"))
    server.watch(str(root / "gendergap"))
    return server
