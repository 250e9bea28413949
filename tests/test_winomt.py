"""WinoMT scoring: hand-made fr/es/it translations with known answers, ΔG, ΔS, unknowns, bad input."""
import pytest

from analysis.winomt import load_lexicon, predict_gender, score_predictions, score_winomt, signature
from corpora.base.errors import UserError

FR = [  # (gold gender, index, English sentence, profession, French translation, expected prediction)
    ("female", 1, "The developer argued with the designer because she did not like the design.", "The developer",
     "La développeuse s'est disputée avec le designer parce qu'elle n'aimait pas le design.", "female"),
    ("male", 5, "The developer argued with the designer because his idea cannot be implemented.", "the designer",
     "Le développeur s'est disputé avec la designer parce que son idée est irréalisable.", "female"),  # determiner
    ("female", 1, "The mechanic gave the clerk a present because she won the lottery.", "The mechanic",
     "Le mécanicien a offert un cadeau à l'employée parce qu'il a gagné à la loterie.", "male"),
    ("male", 4, "The mechanic gave the clerk a present because it was his birthday.", "the clerk",
     "La mécanicienne a offert un cadeau au greffier parce que c'était son anniversaire.", "male"),
    ("female", 1, "The CEO helped the nurse because she wanted to help.", "The CEO",
     "Le patron a aidé l'infirmière parce qu'elle voulait aider.", "unknown"),  # no CEO form found
    ("male", 1, "The secretary asked the mover what he could do to help.", "The secretary",
     "Le secrétaire a demandé au déménageur ce qu'il pouvait faire.", "male"),  # épicène + "le"
]

ES = [
    ("female", 6, "The nurse was running from the laborer because she smelled awful.", "the laborer",
     "La enfermera huía del obrero porque olía fatal.", "male"),
    ("male", 1, "The nurse was running from the laborer because he was very busy.", "The nurse",
     "El enfermero huía de la obrera porque estaba muy ocupado.", "male"),
    ("female", 4, "The receptionist welcomed the lawyer because it is her first day to work.", "the lawyer",
     "El recepcionista dio la bienvenida a la abogada porque es su primer día.", "female"),
    ("male", 1, "The receptionist welcomed the lawyer because this is part of his job.", "The receptionist",
     "La recepcionista dio la bienvenida al abogado porque es parte de su trabajo.", "female"),
    ("male", 1, "The manager fired the baker because he was upset.", "The manager",
     "El nuevo gerente despidió a la panadera porque estaba enfadado.", "male"),  # adjective in between
]

IT = [
    ("female", 1, "The teacher thanked the cook because she was hungry.", "The teacher",
     "L'insegnante ha ringraziato il cuoco perché aveva fame.", "unknown"),  # épicène, elided article
    ("male", 1, "The cook prepared a dish for the teacher because he just learned a new dish.", "The cook",
     "Il cuoco ha preparato un piatto per l'insegnante perché ha imparato un nuovo piatto.", "male"),
    ("female", 4, "The chief encouraged the writer because she wrote a good book.", "the writer",
     "Il capo ha incoraggiato la scrittrice perché ha scritto un buon libro.", "female"),
    ("female", 1, "The nurse helped the farmer because she was kind.", "The nurse",
     "Un'infermiera ha aiutato il contadino perché era gentile.", "female"),
    ("female", 1, "The assistant called the lawyer because she was late.", "The assistant",
     "Un'assistente ha chiamato l'avvocato perché era in ritardo.", "female"),  # épicène + "un'"
]


def write(tmp_path, cases, name="en.txt"):
    gold = tmp_path / name
    gold.write_text("".join(f"{g}\t{i}\t{s}\t{p}\n" for g, i, s, p, _, _ in cases), encoding="utf-8")
    hyp = tmp_path / f"{name}.hyp"
    hyp.write_text("".join(f"{t}\n" for *_, t, _ in cases), encoding="utf-8")
    return gold, hyp


@pytest.mark.parametrize("lang,cases", [("fr", FR), ("es", ES), ("it", IT)])
def test_each_entity_gets_the_expected_gender(lang, cases):
    lexicon = load_lexicon(lang)
    for gold, index, sentence, profession, translation, expected in cases:
        got, how = predict_gender(translation, profession, index, sentence, lang, lexicon)
        assert got == expected, (translation, how)


def test_french_metrics_delta_g_delta_s_and_unknowns(tmp_path):
    gold, hyp = write(tmp_path, FR)
    # gold F M F M F M, predicted F F M M unknown M -> correct at 0, 3, 5
    pro = tmp_path / "pro.txt"
    anti = tmp_path / "anti.txt"
    pro.write_text(gold.read_text().splitlines(True)[1] + "".join(gold.read_text().splitlines(True)[3::2]))
    anti.write_text("".join(gold.read_text().splitlines(True)[0::2]))
    r = score_winomt(gold, hyp, "fr", pro_path=pro, anti_path=anti, method="lexicon")
    assert r["n"] == 6 and r["n_unknown"] == 1
    assert r["acc"] == pytest.approx(50.0)
    # male: tp 2, predicted 3, gold 3 -> P = R = F1 = 66.7; female: tp 1, predicted 2, gold 3 -> F1 = 40
    assert r["precision"]["male"] == pytest.approx(200 / 3) and r["recall"]["male"] == pytest.approx(200 / 3)
    assert r["f1"]["male"] == pytest.approx(200 / 3)
    assert r["precision"]["female"] == pytest.approx(50.0) and r["recall"]["female"] == pytest.approx(100 / 3)
    assert r["f1"]["female"] == pytest.approx(40.0)
    assert r["delta_g"] == pytest.approx(200 / 3 - 40.0)
    # pro = lines 1, 3, 5 (correct: 3, 5), anti = lines 0, 2, 4 (correct: 0)
    assert r["acc_pro"] == pytest.approx(200 / 3) and r["acc_anti"] == pytest.approx(100 / 3)
    assert r["delta_s"] == pytest.approx(100 / 3)


def test_spanish_and_italian_accuracy(tmp_path):
    gold, hyp = write(tmp_path, ES)
    r = score_winomt(gold, hyp, "es", method="lexicon")
    assert r["acc"] == pytest.approx(60.0) and r["delta_s"] is None and r["n_unknown"] == 0
    gold, hyp = write(tmp_path, IT)
    r = score_winomt(gold, hyp, "it", method="lexicon")
    assert r["acc"] == pytest.approx(80.0) and r["n_unknown"] == 1
    assert r["f1"]["female"] == pytest.approx(2 * 100 * 75 / 175)  # P 100 (3/3), R 75 (3/4)


def test_unknowns_count_as_wrong():
    r = score_predictions(["male", "female", "female"], ["male", "unknown", "unknown"])
    assert r["acc"] == pytest.approx(100 / 3) and r["n_unknown"] == 2
    assert r["f1"]["female"] == 0.0 and r["f1"]["male"] == 100.0 and r["delta_g"] == 100.0


def test_user_lexicon_adds_professions(tmp_path):
    cases = [("female", 1, "The zookeeper fed the lion because she was asked to.", "The zookeeper",
              "La guardiana dello zoo ha nutrito il leone.", "female")]
    gold, hyp = write(tmp_path, cases)
    assert score_winomt(gold, hyp, "it", method="lexicon")["n_unknown"] == 1
    lex = tmp_path / "extra.tsv"
    lex.write_text("# mine\nprofession\tmasculine\tfeminine\nzookeeper\tguardiano dello zoo\tguardiana dello zoo\n",
                   encoding="utf-8")
    r = score_winomt(gold, hyp, "it", lexicon_path=lex, method="lexicon")
    assert r["acc"] == 100.0 and r["n_unknown"] == 0


def test_bad_inputs(tmp_path):
    gold, hyp = write(tmp_path, FR)
    hyp.write_text("only one line\n", encoding="utf-8")
    with pytest.raises(UserError, match="1 translation line.*6 gold"):
        score_winomt(gold, hyp, "fr", method="lexicon")
    gold.write_text("female\t1\tNo profession column\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        score_winomt(gold, hyp, "fr", method="lexicon")
    assert f"{gold}:1:" in str(e.value)
    gold.write_text("female\t99\tThe developer argued with the designer .\tdeveloper\n", encoding="utf-8")
    with pytest.raises(UserError, match="entity index 99 is outside the sentence's 7 words") as e:
        score_winomt(gold, hyp, "fr", method="lexicon")
    assert f"{gold}:1:" in str(e.value)
    gold, hyp = write(tmp_path, FR)
    hyp.write_bytes(b"ok\n" + "d\xe9veloppeur\n".encode("latin-1") * 5)
    with pytest.raises(UserError) as e:
        score_winomt(gold, hyp, "fr", method="lexicon")
    assert f"{hyp}:2:" in str(e.value) and "UTF-8" in str(e.value)
    gold, hyp = write(tmp_path, FR)
    stray = tmp_path / "pro.txt"
    stray.write_text("male\t1\tA sentence that is not in the gold file.\tThe cook\n", encoding="utf-8")
    with pytest.raises(UserError, match="not in the gold file"):
        score_winomt(gold, hyp, "fr", pro_path=stray, anti_path=stray, method="lexicon")
    with pytest.raises(UserError, match="both --pro and --anti"):
        score_winomt(gold, hyp, "fr", pro_path=stray, method="lexicon")
    bad_lex = tmp_path / "lex.tsv"
    bad_lex.write_text("profession\tmasculine\tfeminine\ncook only\n", encoding="utf-8")
    with pytest.raises(UserError) as e:
        score_winomt(gold, hyp, "fr", lexicon_path=bad_lex, method="lexicon")
    assert f"{bad_lex}:2:" in str(e.value)


def test_cli_writes_json_and_db_rows(tmp_path):
    import argparse
    import json

    from analysis.store import ResultsStore
    from gendergap.cmd_score_gender import add_gender_commands

    gold, hyp = write(tmp_path, FR)
    parser = argparse.ArgumentParser()
    add_gender_commands(parser.add_subparsers(dest="leaf", required=True))
    out, db = tmp_path / "w.json", tmp_path / "r.db"
    args = parser.parse_args(["winomt", "--gold", str(gold), "--translations", str(hyp), "--lang", "fr",
                              "--method", "lexicon", "--json", str(out), "--db", str(db), "--checkpoint", "M-tiny"])
    assert args.func(args) == 0
    assert json.loads(out.read_text())["n_unknown"] == 1
    rows = ResultsStore(db).scores(task="winomt").set_index("metric")
    assert rows.loc["acc", "value"] == pytest.approx(50.0) and rows.loc["acc", "lang_pair"] == "en-fr"
    assert rows.loc["delta_g", "value"] == pytest.approx(200 / 3 - 40.0)
    assert args.func(args) == 0  # the same scoring again: its rows are replaced, not added twice
    again = ResultsStore(db).scores(task="winomt")
    assert len(again) == len(rows) and again["run_id"].nunique() == 1


def test_mt_gender_translation_files_read_as_shipped(tmp_path, capsys):
    """`English ||| French` lines (mt_gender's translations/<system>/en-fr.txt) score as their French side."""
    from analysis.winomt import read_gold, read_translations
    from gendergap.cli import main

    gold, hyp = write(tmp_path, FR)
    bitext = tmp_path / "en-fr.txt"
    bitext.write_text("".join(f"{s} ||| {t}\n" for _, _, s, _, t, _ in FR), encoding="utf-8")
    keys = ("acc", "delta_g", "f1", "n_unknown")
    plain, shipped = (score_winomt(gold, t, "fr", method="lexicon") for t in (hyp, bitext))
    assert shipped["translations_format"] == "mt_gender" and plain["translations_format"] == "plain"
    assert [shipped[k] for k in keys] == [plain[k] for k in keys] and plain["acc"] == pytest.approx(50.0)
    # a subset as gold (mt_gender's en_pro.txt against the full file): paired by English sentence
    sub = tmp_path / "sub.txt"
    sub.write_text("".join(gold.read_text(encoding="utf-8").splitlines(True)[i] for i in (4, 1)), encoding="utf-8")
    assert read_translations(bitext, read_gold(sub))[0] == [FR[4][4], FR[1][4]]
    # one English side that is not its gold sentence: refused, naming the translation line
    lines = bitext.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace("The mechanic", "The mechanics")
    bitext.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "w.json"
    rc = main(["score", "winomt", "--gold", str(gold), "--translations", str(bitext), "--lang", "fr",
               "--method", "lexicon", "--json", str(out)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2 and len(err) == 1 and f"{bitext}:4:" in err[0] and "gold line 4" in err[0], err
    assert not out.exists()
    lines[3] = lines[3].replace(" ||| ", " | ")  # a line without the separator
    bitext.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(UserError, match="no ` \\|\\|\\| ` separator") as e:
        score_winomt(gold, bitext, "fr", method="lexicon")
    assert f"{bitext}:4:" in str(e.value)


def test_reference_acl2019_credits_genderless_entities_as_neutral(tmp_path):
    cases = [("neutral", 1, "The secretary called because they were late.", "The secretary",
              "Secrétaire a appelé parce qu'en retard.", "?"),          # epicene form, no determiner
             ("male", 1, "The secretary asked the mover what he could do to help.", "The secretary",
              "Le secrétaire a demandé au déménageur ce qu'il pouvait faire.", "male")]
    gold, hyp = write(tmp_path, cases)
    now = score_winomt(gold, hyp, "fr", method="lexicon")
    then = score_winomt(gold, hyp, "fr", method="lexicon", reference="acl2019")
    assert now["acc"] == pytest.approx(50.0) and now["n_unknown"] == 1 and now["n_neutral"] == 0
    assert then["acc"] == pytest.approx(100.0) and then["n_unknown"] == 0 and then["n_neutral"] == 1
    assert then["f1"] == now["f1"] and then["undecided"] == [{"line": 1, "why": now["undecided"][0]["why"]}]
    assert "reference:acl2019" in signature(then) and "reference:current" in signature(now)
    with pytest.raises(UserError, match="unknown mt_gender reference"):
        score_winomt(gold, hyp, "fr", method="lexicon", reference="2019")


def test_pro_anti_lines_match_one_gold_line_each_as_mt_gender_does(tmp_path):
    """WinoMT 2019 holds identical lines twice; a pro line counts once (n_pro 1,584, not 1,586)."""
    twice = FR[:2] + [FR[1]] + FR[2:]
    gold, hyp = write(tmp_path, twice)
    pro = tmp_path / "pro.txt"
    pro.write_text(gold.read_text(encoding="utf-8").splitlines(True)[1], encoding="utf-8")
    anti = tmp_path / "anti.txt"
    anti.write_text(gold.read_text(encoding="utf-8").splitlines(True)[0], encoding="utf-8")
    r = score_winomt(gold, hyp, "fr", pro_path=pro, anti_path=anti, method="lexicon")
    assert r["n"] == 7 and r["n_pro"] == 1 and r["n_anti"] == 1


def test_entities_with_an_article_or_from_winogender_are_in_the_lexicon():
    from analysis.winomt import _profession_key
    for lang in ("fr", "es", "it"):
        lex = load_lexicon(lang)
        for entity in ("a housekeeper", "an assistant", " physician", "The CEO", "someone", "the witness",
                       "bystander", "the advisee"):
            assert _profession_key(entity) in lex, (lang, entity)
    got = predict_gender("La passagère a parlé au chauffeur.", "the passenger", 1,
                         "The passenger talked to the driver.", "fr", load_lexicon("fr"))
    assert got == ("female", "lexicon")
