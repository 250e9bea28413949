"""Release documents: the package has one version, CITATION.cff and the docs' BibTeX carry it, the
changelog is release notes in the Keep a Changelog form, and no user-facing text (README, docs,
changelog, the header comment of each script) reads like a development diary."""
from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import yaml

import gendergap

REPO = Path(__file__).resolve().parent.parent
VERSION = gendergap.__version__

# Words of a development diary or of the machinery around the project, not of a manual. Matched
# case-insensitively at word boundaries.
DIARY_WORDS = (
    "tonight", "this morning", "this afternoon", "this evening", "this session", "last session",
    "the session", "review mend", "review mends", "last code", "earlier today", "yesterday",
    "helper", "helpers", "the lead", "grader", "graders", "the workplace", "device machine",
    "of mine", r"issue \d+", r"issues? #\d+",
)
DIARY = re.compile(r"\b(?:" + "|".join(w if "\\" in w else re.escape(w) for w in DIARY_WORDS) + r")\b",
                   re.IGNORECASE)


def test_the_package_version_is_one_value():
    """setup.cfg reads the version from gendergap/__init__.py; nothing else states it."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg", encoding="utf-8")
    assert cfg["metadata"]["version"].strip() == "attr: gendergap.__version__"
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION)


def test_version_prints_the_package_version(capsys):
    from gendergap.cli import main
    assert main(["--version"]) == 0
    first = capsys.readouterr().out.splitlines()[0].split()
    assert first == ["gendergap", VERSION]


def test_citation_cff_parses_and_carries_the_version():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert cff["title"] == "gendergap"
    assert cff["version"] == VERSION
    assert cff["message"] and cff["authors"]
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg", encoding="utf-8")
    assert cff["license"] == cfg["metadata"]["license"].strip()
    titles = [ref["title"] for ref in cff.get("references", [])]
    assert "A Study of Gender Impact in Self-supervised Models for Speech-to-Text Systems" in titles


def test_the_docs_bibtex_entry_carries_the_version():
    text = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    entry = re.search(r"@misc\{gendergap,(.*?)\n\}", text, re.S)
    assert entry, "docs/index.md's Citing section has no @misc{gendergap, ...} entry"
    assert re.search(r"version\s*=\s*\{" + re.escape(VERSION) + r"\}", entry.group(1))


KEEP_A_CHANGELOG_SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_changelog_is_release_notes_by_version():
    """`## [Unreleased]` first, then `## [X.Y.Z] - YYYY-MM-DD` newest first, the newest release the
    package's version; only Keep a Changelog's subsections under each."""
    lines = (REPO / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "# Changelog"
    releases = [ln for ln in lines if ln.startswith("## ")]
    assert releases[0] == "## [Unreleased]", releases[:1]
    versions = []
    for heading in releases[1:]:
        m = re.fullmatch(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})", heading)
        assert m, f"not a release heading: {heading!r}"
        versions.append(tuple(int(x) for x in m.groups()[:3]))
    assert versions, "no released version"
    assert versions == sorted(versions, reverse=True), "releases are not newest first"
    assert ".".join(map(str, versions[0])) == VERSION, "the newest release is not the package's version"
    subsections = {ln[4:].strip() for ln in lines if ln.startswith("### ")}
    assert subsections <= KEEP_A_CHANGELOG_SECTIONS, subsections - KEEP_A_CHANGELOG_SECTIONS


def _script_header(path: Path) -> str:
    """The first comment block of a script: the `#` lines after the shebang, or the module docstring."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".py":
        m = re.match(r'\s*(?:#.*\n)*\s*(?:"""(.*?)"""|\'\'\'(.*?)\'\'\')', text, re.S)
        if m:
            return m.group(1) or m.group(2) or ""
    block, started = [], False
    for line in text.splitlines():
        if line.startswith("#!") and not started:
            continue
        if line.lstrip().startswith("#"):
            block.append(line)
            started = True
        elif started or line.strip():
            break
    return "\n".join(block)


def _user_facing_texts():
    for path in [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]:
        if path.is_symlink():
            continue
        yield path.relative_to(REPO), path.read_text(encoding="utf-8")
    for path in sorted((REPO / "scripts").rglob("*")):
        if path.is_file() and path.suffix in (".sh", ".py", ""):
            yield f"{path.relative_to(REPO)} (header comment)", _script_header(path)


def test_no_development_diary_words_in_user_facing_text():
    hits = []
    for name, text in _user_facing_texts():
        for no, line in enumerate(text.splitlines(), 1):
            for m in DIARY.finditer(line):
                hits.append(f"{name}:{no}: {m.group(0)!r} in {line.strip()[:100]!r}")
    assert not hits, "\n".join(hits)


@pytest.mark.parametrize("text,hit", [
    ("Measured tonight on the VM.", "tonight"),
    ("Measured in this session.", "this session"),
    ("Review mends: one reader.", "Review mends"),
    ("Fixed in issue 61.", "issue 61"),
    ("A test Helper reads it.", "Helper"),
])
def test_the_diary_check_finds_what_it_should(text, hit):
    m = DIARY.search(text)
    assert m and m.group(0) == hit


def test_the_diary_check_reads_script_headers_only(tmp_path):
    script = tmp_path / "x.sh"
    script.write_text("#!/bin/bash\n# Runs the thing.\n\nset -e\n# measured tonight\n", encoding="utf-8")
    assert _script_header(script) == "# Runs the thing."
    py = tmp_path / "x.py"
    py.write_text('#!/usr/bin/env python\n"""Checks the voices.\n\nMore."""\nx = 1  # tonight\n',
                  encoding="utf-8")
    assert _script_header(py) == "Checks the voices.\n\nMore."
