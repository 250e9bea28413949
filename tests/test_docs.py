"""The documentation (issue 49): the MkDocs site builds with warnings as errors (a broken link, an
anchor that is gone or a page missing from the navigation fails here), the README stays a short
manual whose links resolve, and every command-line leaf has a description and an example."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _build(root: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(out)], capture_output=True, text=True, timeout=300)


GENERATED = ("cli-reference.md", "config-reference.md", "changelog.md")   # docs/hooks/reference.py


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    """Every page under docs/ is built, and so are the pages made at build time from the code: the
    command reference (every --help), the config reference (the schema) and CHANGELOG.md. Those are
    never files under docs/ (a hand copy would go stale)."""
    r = _build(REPO, tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    site = tmp_path / "site"
    built = {p.name for p in site.glob("*.html")}
    pages = {p.stem + ".html" for p in (REPO / "docs").glob("*.md")}
    assert pages <= built, pages - built
    assert not [name for name in GENERATED if (REPO / "docs" / name).exists()]
    cli = (site / "cli-reference.html").read_text(encoding="utf-8")
    assert "usage: gendergap corpus index" in cli and "usage: gendergap sweep" in cli
    assert 'id="gendergap-corpus-index"' in cli
    config = (site / "config-reference.html").read_text(encoding="utf-8")
    assert "selections:" in config and "checkpoints:" in config
    changelog = (site / "changelog.html").read_text(encoding="utf-8")
    assert "[Unreleased]" in changelog and "Added" in changelog
    assert not (site / "hooks").exists(), "the build hook was published with the site"


def test_the_command_reference_is_every_help_at_a_fixed_width(monkeypatch):
    """The generated page holds each command's --help as argparse prints it at the page's width,
    whatever the terminal the site is built in."""
    import importlib.util
    import os

    from gendergap.cli import build_parser
    spec = importlib.util.spec_from_file_location("reference_hook", REPO / "docs" / "hooks" / "reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    monkeypatch.setenv("COLUMNS", "300")
    page = hook.cli_reference()
    assert os.environ["COLUMNS"] == "300", "the hook left its width in the environment"
    monkeypatch.setenv("COLUMNS", "40")
    assert hook.cli_reference() == page, "the page depends on the terminal it is built in"
    monkeypatch.setenv("COLUMNS", str(hook.HELP_COLUMNS))
    sweep = next(p for name, p in _leaves() if name == "sweep")
    assert sweep.format_help().rstrip() in page
    assert len(re.findall(r"^## gendergap", page, re.M)) == 1 + len(_groups(build_parser()))


def _groups(parser) -> list:
    import argparse
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += [sub, *_groups(sub)]
    return out


@pytest.mark.parametrize("breakage,words", [
    ("[gone](no-such-page.md)", "no-such-page.md"),
    ("[gone](index.md#no-such-heading)", "no-such-heading"),
])
def test_a_broken_link_fails_the_build(tmp_path, breakage, words):
    """The strictness is real: a copy of the docs with one broken link does not build."""
    shutil.copytree(REPO / "docs", tmp_path / "docs", symlinks=False)
    shutil.copy(REPO / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copy(REPO / "CHANGELOG.md", tmp_path / "CHANGELOG.md")   # the changelog page (docs/hooks)
    page = tmp_path / "docs" / "glossary.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\nSee {breakage}.\n", encoding="utf-8")
    r = _build(tmp_path, tmp_path / "site")
    assert r.returncode != 0 and words in r.stderr, r.stderr[-2000:]


def test_the_readme_is_a_short_manual_whose_paths_exist():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for ref in set(re.findall(r"`((?:docs|configs|scripts|benchmarks|tests)/[\w./-]+)`", text)):
        assert (REPO / ref).exists(), f"README names {ref}, which does not exist"
    for section in ("Δrel", "Install", "GPU", "Your own study", "Glossary", "Commands", "Limits", "Cite", "Licence"):
        assert section in text, f"README lacks {section}"


def test_the_readme_demo_results_are_the_recorded_run_of_the_current_config():
    """The README's expected results come from docs/demo-results.json (`gendergap study --record`):
    the block is that record's rendering, and the record was made with the config, corpus generator
    and shipped checkpoints `make study` uses now -- change one and this fails until the demo is run
    and recorded again."""
    from corpora.base.provenance import file_sha256
    from gendergap.demo_record import demo_inputs, load_record, readme_block, render
    rec = load_record(REPO / "docs" / "demo-results.json")
    again = "run `gendergap study --record docs/demo-results.json` (it rewrites the README's block too)"
    assert rec["config"]["sha256"] == file_sha256(REPO / "configs" / "mini.yaml"), (
        f"configs/mini.yaml changed since the demo was recorded: {again}")
    assert rec.get("inputs") == demo_inputs(), f"the corpus generator or a shipped checkpoint changed: {again}"
    assert readme_block((REPO / "README.md").read_text(encoding="utf-8")) == render(rec)
    assert {"asr-frozen", "st fr-en"} <= set(rec["scores"]) and rec["wall_s"] > 0 and rec["answers"]


def test_the_demo_record_counts_cpu_seconds_only_when_every_job_did(tmp_path):
    """The record states the jobs' CPU-seconds (the demo's budget is set in them), per stage and in
    all; a study with a job finished before they were counted records none rather than a part."""
    from gendergap.demo_record import make_record, render
    (tmp_path / "report").mkdir()
    (tmp_path / "report" / "report.md").write_text("## The answer\n\n- **asr-frozen (WER)**: no difference\n")
    config = tmp_path / "mini.yaml"
    config.write_text("name: x\n")
    rows = [{"job": "a", "kind": "st", "seconds": 10.0, "cpu_s": 9.4, "started": 0.0, "finished": 10.0},
            {"job": "b", "kind": "st", "seconds": 12.0, "cpu_s": 11.2, "started": 1.0, "finished": 13.0},
            {"job": "c", "kind": "report", "seconds": 2.0, "cpu_s": 1.5, "started": 13.0, "finished": 15.0}]
    rec = make_record(config, tmp_path, rows, parallel=2)
    assert rec["cpu_s"] == 22 and rec["stages"]["st"]["cpu_s"] == 21 and rec["stages"]["report"]["cpu_s"] == 2
    assert rec["wall_s"] == 15 and rec["job_s"] == 24
    assert "22 CPU-seconds (user + system) in its jobs" in render(rec)
    rows[2]["cpu_s"] = None
    rec = make_record(config, tmp_path, rows, parallel=2)
    assert "cpu_s" not in rec and all("cpu_s" not in s for s in rec["stages"].values())
    assert "CPU-seconds" not in render(rec)


def _leaves():
    import argparse

    from gendergap.cli import build_parser

    def walk(parser, prefix):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [(" ".join(prefix), parser)]
        return [leaf for name, sp in subs[0].choices.items() for leaf in walk(sp, prefix + [name])]
    return walk(build_parser(), [])


def test_every_command_leaf_has_a_description_and_an_example():
    """`gendergap X Y --help` teaches: a description of its own, and at least one example line that
    runs that very command (an epilog pasted under several leaves fails: its examples name another)."""
    problems = []
    for leaf, parser in _leaves():
        text = parser.format_help()
        if not (parser.description or "").strip():
            problems.append(f"{leaf}: no description")
        examples = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(f"gendergap {leaf}")]
        if not examples:
            problems.append(f"{leaf}: no example line starting `gendergap {leaf}`")
        group = leaf.split()[0]
        siblings = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(f"gendergap {group} ")
                    and " " in leaf and not ln.strip().startswith(f"gendergap {leaf}")
                    and not ln.strip().startswith(f"gendergap {group} --")]
        if len(siblings) > len(examples):   # mostly another leaf's examples: a group's epilog pasted here
            problems.append(f"{leaf}: {len(siblings)} example lines of other `{group}` commands "
                            f"(e.g. {siblings[0][:60]!r}) against {len(examples)} of its own")
    assert not problems, "\n".join(problems)


def test_the_demo_record_renders_one_column_per_condition(tmp_path):
    """With the report's conditions CSVs the README block has a column per pretraining condition (its
    runs' mean), highest female share first and the reference last, not one per checkpoint; the runs
    counted are the pretrained conditions'."""
    from gendergap.demo_record import make_record, render
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.md").write_text("## The answer\n\n- **asr-frozen (WER)**: no difference detected (this "
                                      "design detects 9.9 points): the slope\n")
    (report / "table4_asr.csv").write_text("task,lang_pair,checkpoint,all,delta_rel,n_seeds\n"
                                           "asr-frozen,,F-a,50.0,-30.0,1\nasr-frozen,,F-b,52.0,-20.0,1\n"
                                           "asr-frozen,,M-a,40.0,-10.0,1\nasr-frozen,,FBANK,60.0,-5.0,3\n")
    (report / "conditions_asr-frozen.csv").write_text(
        "checkpoint,task,lang_pair,row,female_share,runs,all,delta_rel\n"
        "male,asr-frozen,,condition,0.0,1,40.0,-10.0\nfemale,asr-frozen,,condition,100.0,2,51.0,-25.0\n"
        "FBANK,asr-frozen,,condition,,3,60.0,-5.0\nfemale vs male,asr-frozen,,test,,,11.0,-15.0\n")
    config = tmp_path / "mini.yaml"
    config.write_text("name: x\n")
    rows = [{"job": "a", "kind": "st", "seconds": 10.0, "cpu_s": 9.4, "started": 0.0, "finished": 10.0}]
    block = render(make_record(config, tmp_path, rows, parallel=2)).splitlines()
    assert block[0] == ("| task (metric: All, Δrel; runs per condition) | female (100 % F) | male (0 % F) | FBANK "
                        "| the report's answer |")
    assert block[2] == ("| asr-frozen (WER; 1-2 runs) | 51.0 (-25.0) | 40.0 (-10.0) | 60.0 (-5.0) | "
                        "no difference detected (this design detects 9.9 points) |")
