"""MuST-SHE scoring: the official counting on hand-made cases, BLEU on correct/wrong refs, bad input."""
import argparse
import json

import pytest
import sacrebleu

from analysis.mustshe import MustSheRow, count_terms, parse_genderterms, score_mustshe, score_rows
from analysis.store import ResultsStore
from corpora.base.errors import UserError
from gendergap.cmd_score_gender import add_gender_commands

HEADER = "ID\tLANG\tTALK\tSRC\tREF\tWRONG-REF\tSPEAKER\tGENDER\tCATEGORY\tTEXT-CATEGORY\tGENDERTERMS"

# (id, category, speaker gender, REF, WRONG-REF, GENDERTERMS, hypothesis)
ROWS = [
    ("fr-1", "1F", "She", "je suis fatiguée et prête", "je suis fatigué et prêt",
     "fatiguée fatigué;prête prêt", "je suis fatiguée et prête"),
    # repeated word: two "un une" pairs but only one "un" in the output; a pair found in both forms
    ("fr-2", "1M", "He", "je suis fatigué , un seul", "je suis fatiguée , une seule",
     "fatigué fatiguée;un une;un une", "Je suis fatigué , un seul fatiguée"),
    ("fr-3", "2F", "He", "elle est contente", "elle est content", "contente content", ""),  # empty output
    ("fr-4", "2M", "She", "il est heureux", "il est heureuse", "heureux heureuse", "il est heureuse"),
    ("fr-5", "2F", "She", "elle est là", "il est là", "elle il", "bonjour tout le monde"),  # nothing found
]


def write_case(tmp_path, rows=ROWS, hyps=None):
    tsv = tmp_path / "ms.tsv"
    # as in the release: SPEAKER = the speaker's pronoun, GENDER = the referent's gender (F/M)
    lines = [HEADER] + [f"{i}\ten-fr\ttalk\tsrc\t{ref}\t{wref}\t{g}\t{cat[-1]}\t{cat}\tx\t{terms}"
                        for i, cat, g, ref, wref, terms, _ in rows]
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("\n".join(r[-1] for r in rows) + "\n" if hyps is None else hyps, encoding="utf-8")
    return tsv, hyp


def test_official_counting_per_row():
    # repeated word: the single "un" is consumed by the first pair, the second pair finds nothing
    c = count_terms("Je suis fatigué , un seul fatiguée", parse_genderterms("fatigué fatiguée;un une;un une"))
    assert (c.terms, c.found, c.correct, c.wrong) == (3, 2, 2, 1)
    # two "un" in the output: each pair consumes one
    c = count_terms("un et un", parse_genderterms("un une;un une"))
    assert (c.found, c.correct, c.wrong) == (2, 2, 0)
    # both forms present: one found, counted correct AND wrong
    c = count_terms("fatiguée fatigué", parse_genderterms("fatiguée fatigué"))
    assert (c.found, c.correct, c.wrong) == (1, 1, 1)
    c = count_terms("", parse_genderterms("contente content"))
    assert (c.terms, c.found, c.correct, c.wrong) == (1, 0, 0, 0)


def test_scores_overall_and_per_group(tmp_path):
    tsv, hyp = write_case(tmp_path)
    r = score_mustshe(tsv, hyp)
    # totals: terms 2+3+1+1+1 = 8, found 2+2+0+1+0 = 5, correct 4, wrong 2
    assert r["counts"] == {"rows": 5, "terms": 8, "found": 5, "correct": 4, "wrong": 2}
    assert r["overall"]["coverage"] == pytest.approx(62.5)
    assert r["overall"]["accuracy"] == pytest.approx(100 * 4 / 6)
    cat = r["by_category"]
    assert (cat["1F"]["coverage"], cat["1F"]["accuracy"]) == (100.0, 100.0)
    assert cat["1M"]["coverage"] == pytest.approx(200 / 3) and cat["1M"]["accuracy"] == pytest.approx(200 / 3)
    assert (cat["2F"]["coverage"], cat["2F"]["accuracy"], cat["2F"]["found"]) == (0.0, 0.0, 0)  # official: 0
    assert (cat["2M"]["coverage"], cat["2M"]["accuracy"]) == (100.0, 0.0)
    form = r["by_form"]
    assert (form["F"]["coverage"], form["F"]["accuracy"]) == (50.0, 100.0)
    assert (form["M"]["coverage"], form["M"]["accuracy"]) == (75.0, 50.0)
    spk = r["by_speaker_gender"]  # She/He normalised to F/M
    assert spk["F"]["coverage"] == 75.0 and spk["F"]["accuracy"] == pytest.approx(200 / 3)
    assert spk["M"]["coverage"] == 50.0 and spk["M"]["accuracy"] == pytest.approx(200 / 3)


def test_bleu_against_correct_and_wrong_refs(tmp_path):
    rows = [r[:-1] + (r[3],) for r in ROWS]  # the outputs are the correct references
    tsv, hyp = write_case(tmp_path, rows)
    b = score_mustshe(tsv, hyp)["bleu"]
    refs = [r[3] for r in rows]
    wrongs = [r[4] for r in rows]
    assert b["correct"] == pytest.approx(sacrebleu.corpus_bleu(refs, [refs]).score) == pytest.approx(100.0)
    assert b["wrong"] == pytest.approx(sacrebleu.corpus_bleu(refs, [wrongs]).score)
    assert b["diff"] == pytest.approx(b["correct"] - b["wrong"]) and b["diff"] > 0
    assert "tok:13a" in b["signature"] and "version:" in b["signature"]
    assert set(b["by_form"]) == {"F", "M"}


def test_tokenize_splits_punctuation_before_matching(tmp_path):
    rows = [("a", "1F", "She", "je suis prête .", "je suis prêt .", "prête prêt", "Je suis prête.")]
    tsv, hyp = write_case(tmp_path, rows)
    assert score_mustshe(tsv, hyp)["overall"]["coverage"] == 0.0  # "prête." is one token
    assert score_mustshe(tsv, hyp, tokenize=True)["overall"]["coverage"] == 100.0


def test_id_keyed_hypotheses_in_any_order(tmp_path):
    text = "".join(f"{r[0]}\t{r[-1]}\n" for r in reversed(ROWS))
    tsv, hyp = write_case(tmp_path, hyps=text)
    assert score_mustshe(tsv, hyp)["counts"]["found"] == 5


def test_in_memory_rows():
    rows = [MustSheRow("1", "1F", parse_genderterms("prête prêt"), "prête", "prêt", "F")]
    assert score_rows(rows, ["prêt"], bleu=False)["overall"]["accuracy"] == 0.0


def _cli(argv):
    parser = argparse.ArgumentParser()
    add_gender_commands(parser.add_subparsers(dest="leaf", required=True))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        return e.exit_code, str(e)


def test_line_count_mismatch_is_a_user_error(tmp_path):
    tsv, hyp = write_case(tmp_path, hyps="one line only\n")
    with pytest.raises(UserError, match="1 hypothesis line.*5 MuST-SHE row"):
        score_mustshe(tsv, hyp)
    rc, msg = _cli(["mustshe", "--tsv", str(tsv), "--hyps", str(hyp), "--json", str(tmp_path / "o.json")])
    assert rc == 2 and str(hyp) in msg
    assert not (tmp_path / "o.json").exists()


def test_cli_through_gendergap_main(tmp_path):
    pytest.importorskip("gendergap.cmd_score", reason="the `score` group (cmd_score.py) is not built yet")
    from gendergap.cli import main
    tsv, hyp = write_case(tmp_path, hyps="short\n")
    assert main(["score", "mustshe", "--tsv", str(tsv), "--hyps", str(hyp), "--json", str(tmp_path / "o.json")]) == 2


def test_cli_writes_json_and_db_rows(tmp_path):
    tsv, hyp = write_case(tmp_path)
    out, db = tmp_path / "o.json", tmp_path / "r.db"
    assert _cli(["mustshe", "--tsv", str(tsv), "--hyps", str(hyp), "--json", str(out), "--db", str(db),
                 "--checkpoint", "F-tiny", "--lang-pair", "en-fr"]) == 0
    assert json.loads(out.read_text())["overall"]["coverage"] == 62.5
    rows = ResultsStore(db).scores(task="mustshe")
    assert rows.set_index("metric").loc["coverage:1M", "value"] == pytest.approx(200 / 3)
    assert rows[(rows.metric == "accuracy") & (rows.gender == "F")]["value"].item() == pytest.approx(200 / 3)


def test_malformed_genderterms_names_file_and_line(tmp_path):
    rows = list(ROWS)
    rows[2] = rows[2][:5] + ("contente;content",) + rows[2][6:]
    tsv, hyp = write_case(tmp_path, rows)
    with pytest.raises(UserError) as e:
        score_mustshe(tsv, hyp)
    assert f"{tsv}:4:" in str(e.value) and "GENDERTERMS" in str(e.value)


def test_non_utf8_hypotheses_name_the_line(tmp_path):
    tsv, hyp = write_case(tmp_path)
    hyp.write_bytes("a\nb\nc\n".encode() + "fatigu\xe9\n".encode("latin-1") + b"e\n")
    with pytest.raises(UserError) as e:
        score_mustshe(tsv, hyp)
    assert f"{hyp}:4:" in str(e.value) and "UTF-8" in str(e.value)


def test_missing_column_and_bad_category(tmp_path):
    tsv = tmp_path / "bad.tsv"
    tsv.write_text("ID\tREF\tCATEGORY\nx\ty\t1F\n", encoding="utf-8")
    with pytest.raises(UserError, match="WRONG-REF, GENDERTERMS"):
        score_mustshe(tsv, tsv)
    rows = [ROWS[0][:1] + ("3F",) + ROWS[0][2:]]
    tsv, hyp = write_case(tmp_path, rows)
    with pytest.raises(UserError, match="CATEGORY '3F'"):
        score_mustshe(tsv, hyp)


def test_speaker_gender_from_gender_column_when_speaker_holds_names(tmp_path):
    tsv, hyp = write_case(tmp_path)
    text = tsv.read_text(encoding="utf-8").splitlines()
    fixed = [text[0]]
    for line in text[1:]:
        f = line.split("\t")
        f[6], f[7] = "Jane Doe", f[6]  # name in SPEAKER, She/He in GENDER
        fixed.append("\t".join(f))
    tsv.write_text("\n".join(fixed) + "\n", encoding="utf-8")
    spk = score_mustshe(tsv, hyp)["by_speaker_gender"]
    assert spk["F"]["terms"] == 4 and spk["M"]["terms"] == 4 and spk["F"]["coverage"] == 75.0
