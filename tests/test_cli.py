"""The CLI contract: --version, unbuilt groups, user errors as one line with exit code 2."""
import subprocess
import sys

import pytest

from gendergap import cli


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gendergap.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_version_lists_engines():
    proc = run_cli("--version")
    assert proc.returncode == 0
    for engine in ("torch", "fairseq-fixed", "speechbrain", "transformers", "sacrebleu", "jiwer", "git sha"):
        assert engine in proc.stdout
    assert "not installed" not in proc.stdout.split("espeakng")[0]


def test_every_group_is_listed_in_help():
    out = run_cli("--help").stdout
    for group in cli.GROUPS:
        assert group in out


def test_user_error_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from corpora.base.errors import UserError

    def boom(args):
        raise UserError("bad thing", path=tmp_path / "x.tsv", line=3, fix="do the other thing")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    sub = next(a for a in parser._actions if a.dest == "group")
    p = sub.add_parser("boom")
    p.set_defaults(func=boom)
    assert cli.main(["boom"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gendergap: error: {tmp_path / 'x.tsv'}:3: bad thing -- do the other thing"]
    with pytest.raises(UserError):
        cli.main(["--debug", "boom"])


def test_no_command_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage" in capsys.readouterr().out
