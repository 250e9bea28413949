"""Issue 29, analysis/audio/error paths: hostile or broken inputs made here, each refused in one line
(exit 2, no traceback) with the old files intact, or read safely (a marker file never appears)."""
import json
import subprocess
import sys

import pytest

from gendergap import cli
from scoring_data import make_corpus, write_inputs


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_error_line(err):
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1, err
    assert lines[0].startswith("gendergap: error: ") and "Traceback" not in err
    return lines[0]


@pytest.fixture()
def perfect(tmp_path):
    """A corpus whose hypotheses equal the references (WER 0, BLEU 100) and the three files."""
    ids, refs, _, spk, gen = make_corpus(n_utts=40, n_speakers=4, seed=1)
    write_inputs(tmp_path, ids, refs, refs, spk, gen)
    return ids, refs, tmp_path


# --- item 6: a decoder's third column is refused, or read when named ------------------------------------
def test_hypotheses_with_a_score_column_are_refused_at_the_line(perfect, capsys):
    ids, refs, d = perfect
    (d / "scored.tsv").write_text("".join(f"{i}\t{t}\t0.93\n" for i, t in zip(ids, refs)), encoding="utf-8")
    for kind in ("asr", "st"):
        rc, out, err = run(capsys, "score", kind, "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                           "--speakers", d / "utts.tsv", "--bootstrap", 0, "--json", d / f"{kind}.json")
        line = one_error_line(err)
        assert rc == 2 and f"scored.tsv:1: 3 tab-separated fields" in line and "--hyp-column" in line
        assert not (d / f"{kind}.json").exists()


def test_hyp_column_reads_the_named_field_and_scores_perfectly(perfect, capsys):
    ids, refs, d = perfect
    (d / "scored.tsv").write_text("".join(f"{i}\t{t}\t0.93\n" for i, t in zip(ids, refs)), encoding="utf-8")
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0, "--hyp-column", 2, "--json", d / "a.json")
    assert rc == 0, err
    assert json.loads((d / "a.json").read_text())["all"] == 0.0
    rc, out, err = run(capsys, "score", "st", "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0, "--hyp-column", 2, "--json", d / "b.json")
    assert rc == 0, err
    assert json.loads((d / "b.json").read_text())["all"] == pytest.approx(100.0)
    # column 3 is the score: a different number, so the option really chooses the field
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "scored.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0, "--hyp-column", 3, "--json", d / "c.json")
    assert rc == 0 and json.loads((d / "c.json").read_text())["all"] > 80


def test_mustshe_hypotheses_with_a_third_field_are_refused(tmp_path):
    from types import SimpleNamespace

    from analysis.mustshe import read_hypotheses
    from corpora.base.errors import UserError

    rows = [SimpleNamespace(id=f"s{i}") for i in range(3)]
    p = tmp_path / "hyp.tsv"
    p.write_text("ID\tTEXT\ns0\tbonjour\ns1\tmerci\t0.5\ns2\tau revoir\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        read_hypotheses(p, rows)
    assert str(e.value).startswith(f"{p}:3: 3 tab-separated fields")
    p.write_text("s0\tbonjour\ns1\tmerci\ns2\tau revoir\n", encoding="utf-8")
    assert read_hypotheses(p, rows) == ["bonjour", "merci", "au revoir"]


# --- item 13: NUL bytes in hypotheses --------------------------------------------------------------------
def test_nul_bytes_in_hypotheses_are_refused_at_the_line(perfect, capsys):
    ids, refs, d = perfect
    lines = [f"{i}\t{t}\n" for i, t in zip(ids, refs)]
    lines[4] = f"{ids[4]}\t{refs[4]}\x00\x00\n"
    (d / "nul.tsv").write_text("".join(lines), encoding="utf-8")
    rc, out, err = run(capsys, "score", "asr", "--refs", d / "ref.tsv", "--hyps", d / "nul.tsv",
                       "--speakers", d / "utts.tsv", "--bootstrap", 0)
    assert rc == 2 and "nul.tsv:5: NUL byte in the hypotheses file" in one_error_line(err)
