"""The own-study path as a new user reads it: docs/quickstart.md's blocks and the README's "Your own
study" commands, run as written in an empty folder, with the page's stand-ins (the built-in corpus
written out as a plain TSV, a tiny random-weight transformers wav2vec 2.0 folder).

Everything runs up to the dry run, which reads every input the way the sweep will (tables, audio
headers, the model folder, hyper-parameters) and costs the plan. The sweep itself (17 jobs, ~4 min
on 2 cores) is left out to keep `make test` short; its jobs' engines are run for real by the
sweep, ASR, ST and probe tests.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "docs" / "quickstart.md"
README = ROOT / "README.md"
LONG_RUN = "gendergap sweep --config study.yaml --out"   # the sweep itself: not run here (see above)


def blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order."""
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def readme_commands() -> str:
    """The README's "Your own study" block, without the editor line (the test writes the config)."""
    section = README.read_text().split("## Your own study", 1)[1]
    body = blocks(section)[0][1]
    return "\n".join(line for line in body.splitlines() if not line.startswith("$EDITOR"))


def run_shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """A block as a user's shell runs it, with the project's environment active."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT)}
    prelude = f'set -e\ngendergap() {{ "{sys.executable}" -m gendergap.cli "$@"; }}\n'
    return subprocess.run(["bash", "-c", prelude + script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """An empty folder with the page's stand-ins made by its own blocks (a corpus TSV, a model
    folder) and its config written as study.yaml: what a user has before the five commands."""
    root = tmp_path_factory.mktemp("quickstart")
    page = blocks(QUICKSTART.read_text())
    yaml = [body for lang, body in page if lang == "yaml"]
    assert len(yaml) == 1, "the quickstart has one study config"
    (root / "study.yaml").write_text(yaml[0])
    shell = [body for lang, body in page if not lang]
    for block in (shell[0], shell[2]):   # the stand-in corpus TSV, the stand-in model folder
        r = run_shell(block, root)
        assert r.returncode == 0, f"{block}\n{r.stdout}\n{r.stderr}"
    assert (root / "my_corpus.tsv").is_file() and (root / "models" / "my-wav2vec2" / "config.json").is_file()
    return root


def test_the_quickstart_runs_as_written_up_to_the_dry_run(folder):
    shell = [body for lang, body in blocks(QUICKSTART.read_text()) if not lang]
    r = run_shell(shell[1], folder)   # corpus index, corpus stats
    assert r.returncode == 0 and (folder / "tables" / "mine.tsv").is_file(), r.stderr
    dry = "\n".join(line for line in shell[3].splitlines() if not line.startswith(LONG_RUN))
    assert "--dry-run" in dry
    r = run_shell(dry, folder)
    assert r.returncode == 0, r.stderr
    assert "inputs checked: no problem found" in r.stdout and re.search(r"^  total +\d+ ", r.stdout, re.M), r.stdout
    assert "Step(" not in r.stdout, "the plan lists jobs, not their fields (those come with --verbose)"
    assert not (folder / "runs").exists(), "a dry run writes nothing"


def test_the_readme_own_study_commands_run_as_written_up_to_the_dry_run(folder):
    """The README's five commands (the editor line replaced by the quickstart's config, the sweep left out)."""
    commands = "\n".join(line for line in readme_commands().splitlines() if not line.startswith(LONG_RUN))
    r = run_shell(commands, folder)
    assert r.returncode == 0, f"{commands}\n{r.stdout}\n{r.stderr}"
    assert "TOTAL" in r.stdout and "inputs checked: no problem found" in r.stdout, r.stdout


def test_the_config_length_the_pages_give_is_the_config_s():
    lines = len(next(body for lang, body in blocks(QUICKSTART.read_text()) if lang == "yaml").strip().splitlines())
    assert f"`study.yaml`, {lines} lines" in QUICKSTART.read_text()
    assert f"a {lines}-line config" in README.read_text()
