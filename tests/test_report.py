"""`gendergap report`: tables with the right numbers in Markdown/LaTeX/CSV, PNGs, bad DBs."""
import json
import sqlite3

import pandas as pd
import pytest

from analysis.report import write_report
from analysis.store import ResultsStore
from corpora.base.errors import UserError
from gendergap.cli import main


def row(checkpoint, task, gender, metric, value, low=None, high=None, lang_pair="", subset="test"):
    return {"checkpoint": checkpoint, "task": task, "lang_pair": lang_pair, "subset": subset, "gender": gender,
            "metric": metric, "value": value, "ci_low": low, "ci_high": high, "n_utts": 100, "n_speakers": 10}


def fill(db):
    store = ResultsStore(db)
    rid = store.start_run("asr-finetune", {"ck": "F"}, seed=1)
    store.add_scores(rid, [
        row("F-tiny", "asr-e2e", "M", "wer", 20.9, 19.0, 22.5),
        row("F-tiny", "asr-e2e", "F", "wer", 17.7, 16.0, 19.1),
        row("F-tiny", "asr-e2e", "all", "wer", 19.5, 18.2, 20.7),
        row("F-tiny", "asr-e2e", "delta_rel", "wer", -16.6, -25.0, -8.0),
        row("LB_1K", "asr-e2e", "M", "wer", 21.0),
        row("LB_1K", "asr-e2e", "F", "wer", 18.5),
        row("LB_1K", "asr-e2e", "all", "wer", 19.9),
        row("LB_1K", "asr-e2e", "delta_rel", "wer", -12.7, -30.0, 4.0),
        # no Δrel row: the report computes it from F and M, without a CI
        row("F-tiny", "asr-hybrid", "M", "wer", 25.7),
        row("F-tiny", "asr-hybrid", "F", "wer", 22.3),
        row("F-tiny", "asr-hybrid", "all", "wer", 24.3),
    ], finish=True)
    rid = store.start_run("st-train", {"ck": "F"}, seed=1)
    store.add_scores(rid, [
        row("F-tiny", "st", "all", "bleu", 14.97, 13.0, 16.5, "fr-en"),
        row("F-tiny", "st", "M", "bleu", 14.34, lang_pair="fr-en"),
        row("F-tiny", "st", "F", "bleu", 15.71, lang_pair="fr-en"),
        row("F-tiny", "st", "delta_rel", "bleu", 9.12, 2.0, 16.0, "fr-en"),
        row("F-tiny", "st", "all", "bleu", 15.81, lang_pair="fr-es"),
        row("F-tiny", "st", "M", "bleu", 15.71, lang_pair="fr-es"),
        row("F-tiny", "st", "F", "bleu", 15.99, lang_pair="fr-es"),
        row("F-tiny", "st", "delta_rel", "bleu", 1.77, -5.0, 8.0, "fr-es"),
        row("F-tiny", "mustshe", "all", "coverage", 62.5, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "all", "accuracy", 66.7, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "all", "coverage:1F", 100.0, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "all", "accuracy:1F", 90.0, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "all", "bleu", 30.0, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "all", "bleu_wrong", 28.0, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "all", "bleu_diff", 2.0, lang_pair="en-fr"),
        row("F-tiny", "mustshe", "F", "accuracy", 70.0, lang_pair="en-fr"),  # by speaker gender
        row("F-tiny", "winomt", "n/a", "acc", 55.0, lang_pair="en-fr"),
        row("F-tiny", "winomt", "n/a", "delta_g", 12.0, lang_pair="en-fr"),
        row("F-tiny", "probe", "n/a", "f1_layer3", 0.91),
        # per-speaker rows (subset speaker:<id>) feed the distribution plot only
        *[row("F-tiny", "asr-e2e", g, "wer", v, subset=f"speaker:{g}{i}")
          for i, (g, v) in enumerate([("F", 15.0), ("F", 19.0), ("M", 22.0), ("M", 20.0)])],
    ], finish=True)
    # a re-scored row: the latest one wins
    rid = store.start_run("asr-finetune", {"ck": "F", "again": 1}, seed=1)
    store.add_scores(rid, [row("LB_1K", "asr-e2e", "all", "wer", 19.8)], finish=True)
    store.close()


def test_tables_hold_the_right_numbers(tmp_path):
    db, out = tmp_path / "r.db", tmp_path / "rep"
    fill(db)
    written = write_report(db, out)
    t4 = (out / "table4_asr.md").read_text()
    assert t4.index("Hybrid ASR") < t4.index("End-to-end ASR")  # the paper's order
    assert ("| F-tiny | 20.90 (19.00, 22.50) | 17.70 (16.00, 19.10) | 19.50 (18.20, 20.70) | "
            "-16.60 (-25.00, -8.00) |") in t4
    assert "| LB_1K | 21.00 | 18.50 | 19.80 | -12.70 (-30.00, +4.00) |" in t4
    assert "| F-tiny | 25.70 | 22.30 | 24.30 | -14.17 |" in t4  # 100 (22.3 - 25.7) / 24
    tex = (out / "table4_asr.tex").read_text()
    assert r"\toprule" in tex and r"LB\_1K" in tex and "-16.60 (-25.00, -8.00)" in tex and r"$\Delta$rel" in tex
    csv = pd.read_csv(out / "table4_asr.csv")
    hyb = csv[(csv.task == "asr-hybrid")].iloc[0]
    assert hyb["delta_rel"] == pytest.approx(100 * (22.3 - 25.7) / (0.5 * (22.3 + 25.7)))
    assert hyb["delta_rel_source"].startswith("computed")
    e2e = csv[(csv.task == "asr-e2e")].set_index("checkpoint")
    assert e2e.loc["F-tiny", "delta_rel_ci_contains_0"] == "no" and e2e.loc["LB_1K", "delta_rel_ci_contains_0"] == "yes"

    t5 = (out / "table5_st.md").read_text()
    assert "fr-en All [M, F]" in t5 and "fr-es Δrel, %" in t5
    assert ("| F-tiny | 14.97 (13.00, 16.50) [14.34, 15.71] | +9.12 (+2.00, +16.00) | 15.81 [15.71, 15.99] | "
            "+1.77 (-5.00, +8.00) |") in t5
    assert pd.read_csv(out / "table5_st.csv").set_index("lang_pair").loc["fr-es", "F"] == pytest.approx(15.99)

    report = (out / "report.md").read_text()
    not_sig = next(ln for ln in report.splitlines() if ln.startswith("- **Not significant** (WER"))
    assert "LB_1K / asr-e2e" in not_sig and "F-tiny" not in not_sig
    once = next(ln for ln in report.splitlines() if ln.startswith("- **Not called: one training run** (WER"))
    assert "F-tiny / asr-e2e" in once and not any(ln.startswith("- **Significant** (WER") for ln in report.splitlines())
    assert "No CI for the WER Δrel of: F-tiny / asr-hybrid (significance unknown)" in report
    assert "fr-es (+1.77 (-5.00, +8.00))" in report.split("Not significant** (BLEU")[1].splitlines()[0]

    gt = (out / "gender_translation.md").read_text()
    assert ("| F-tiny | en-fr | 62.50 | 66.70 | 100.00 / 90.00 | – / – | – / – | – / – | – / 70.00 | – / – | "
            "30.00 |") in gt
    assert "+2.00" in gt
    assert "| F-tiny | en-fr | 55.0 | – | – | +12.0 | – | – |" in report
    other = pd.read_csv(out / "other_scores.csv")
    assert list(other["metric"]) == ["f1_layer3"]
    for png in ("delta_rel.png", "per_speaker.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
        assert png in written
    assert "![" in report and "delta_rel.png" in report


def test_a_recogniser_at_noise_level_is_flagged(tmp_path):
    db, out = tmp_path / "r.db", tmp_path / "rep"
    fill(db)
    store = ResultsStore(db)
    rid = store.start_run("asr-finetune", {"ck": "M"}, seed=1)
    store.add_scores(rid, [row("M-tiny", "asr-e2e", "M", "wer", 97.8), row("M-tiny", "asr-e2e", "F", "wer", 102.3),
                           row("M-tiny", "asr-e2e", "all", "wer", 100.0),
                           row("M-tiny", "asr-e2e", "delta_rel", "wer", 4.5, 1.5, 7.6)], finish=True)
    store.close()
    write_report(db, out)
    lines = (out / "report.md").read_text().splitlines()
    flagged = [ln for ln in lines if ln.startswith("- **Not a working recogniser**")]
    assert len(flagged) == 1 and "M-tiny / asr-e2e (100.00)" in flagged[0]
    assert "F-tiny" not in flagged[0] and "LB_1K" not in flagged[0]  # 19.5 and 19.8 % WER are systems
    # its gap is still reported as the statistics say (a one-run row: not called), with the warning beside it
    assert "M-tiny / asr-e2e" in next(ln for ln in lines if ln.startswith("- **Not called: one training run** (WER"))


def test_cli_report_and_empty_db(tmp_path, capsys):
    db = tmp_path / "r.db"
    ResultsStore(db).close()
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "o")]) == 2
    assert "has no scores" in capsys.readouterr().err
    with pytest.raises(UserError, match="no results DB"):
        write_report(tmp_path / "missing.db", tmp_path / "o")
    fill(db)
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "report.md").exists()
    with pytest.raises(UserError, match="subsets in the DB: test"):
        write_report(db, tmp_path / "o", subset="valid")


def test_nan_in_db_is_a_clear_error(tmp_path):
    db = tmp_path / "r.db"
    fill(db)
    # SQLite is dynamically typed: a writer bypassing the store can leave text where a number belongs.
    with sqlite3.connect(db) as c:
        c.execute("UPDATE scores SET value = 'nan' WHERE metric = 'bleu' AND gender = 'M' AND lang_pair = 'fr-en'")
    with pytest.raises(UserError) as e:
        write_report(db, tmp_path / "o")
    assert "has value = 'nan'" in str(e.value) and str(db) in str(e.value)
    with sqlite3.connect(db) as c:
        c.execute("UPDATE scores SET value = 1.0, ci_low = 'inf' WHERE metric = 'bleu' AND gender = 'M'")
    with pytest.raises(UserError, match="ci_low"):
        write_report(db, tmp_path / "o")


def test_probe_rows_become_a_layer_table(tmp_path):
    store = ResultsStore(tmp_path / "r.db")
    for ckpt, base in (("F-tiny", 90.0), ("F-tiny+random-init", 95.0)):
        rid = store.start_run("probe", {"ckpt": ckpt})
        rows = [{"checkpoint": ckpt, "task": "probe", "gender": "all", "metric": f"f1_macro:L{layer}:{probe}",
                 "value": base + layer - (40 if probe.endswith("+shuffled") else 0)}
                for layer in (0, 1) for probe in ("attention", "attention+shuffled")]
        rows.append({"checkpoint": ckpt, "task": "probe", "gender": "F", "metric": "recall:L0:attention",
                     "value": 99.0})
        store.add_scores(rid, rows, finish=True)
    written = write_report(tmp_path / "r.db", tmp_path / "out")
    grid = pd.read_csv(written["probes.csv"])
    assert grid.set_index(["checkpoint", "layer"]).loc[("F-tiny+random-init", 1), "attention"] == 96.0
    assert grid.set_index(["checkpoint", "layer"]).loc[("F-tiny", 0), "attention+shuffled"] == 50.0
    md = written["report.md"].read_text(encoding="utf-8")
    assert "## Gender probes" in md and "| F-tiny | 1 | 91.0 | 51.0 |" in md
    png = written["probes_by_layer.png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    # embedded right after the probe table, not with the other figures
    assert md.index("## Gender probes") < md.index("](probes_by_layer.png)") < md.index("## Other scores")
    other = pd.read_csv(written["other_scores.csv"])
    assert list(other["metric"]) == ["recall:L0:attention"] * 2  # F1 rows are in the table, not repeated


def test_no_probe_rows_no_probe_plot(tmp_path):
    db = tmp_path / "r.db"
    fill(db)  # its one probe row is not a f1_macro:L<n>:<probe> row
    written = write_report(db, tmp_path / "o")
    assert "probes_by_layer.png" not in written and not (tmp_path / "o" / "probes_by_layer.png").exists()
    assert "probes_by_layer" not in written["report.md"].read_text(encoding="utf-8")


REGISTRY = {"checkpoints": [
    {"name": "LB_1K", "path": "/x/lb.pt", "kind": "fairseq", "hours": 1096, "male_pct": 47.4, "female_pct": 52.5,
     "unknown_pct": 0, "updates": 200000, "family": "wav2vec2", "parameters": 317_390_592, "layers": 24},
    {"name": "F-tiny", "path": "/x/f.pt", "kind": "fairseq", "hours": 0.28, "male_pct": 0.0, "female_pct": 100.0,
     "unknown_pct": 0.0, "updates": 996, "family": "wav2vec2", "parameters": 94_410, "layers": 2},
    # imported without its make-up: fields missing or null
    {"name": "Imported", "path": "/x/hf", "kind": "hf", "hours": None, "updates": None, "family": "wavlm"},
    {"name": "Unscored", "path": "/x/u.pt", "kind": "fairseq", "hours": 7739, "male_pct": 23.9, "female_pct": 13.4,
     "unknown_pct": 62.6, "updates": 500000},
]}


def test_table3_from_the_registry(tmp_path):
    db, out, reg = tmp_path / "r.db", tmp_path / "rep", tmp_path / "checkpoints.json"
    fill(db)
    reg.write_text(json.dumps(REGISTRY), encoding="utf-8")
    written = write_report(db, out, registry=reg)
    for ext in ("md", "tex", "csv"):
        assert (written[f"table3_pretraining.{ext}"] == out / f"table3_pretraining.{ext}"
                and (out / f"table3_pretraining.{ext}").is_file())
    t3 = (out / "table3_pretraining.md").read_text(encoding="utf-8")
    lines = [ln for ln in t3.splitlines() if ln.startswith("| ")]
    assert lines == ["| Model | Family | Params | Layers | # updates | # hours | M, % | F, % | U, % |",
                     # the registry's order, every entry
                     "| LB_1K | wav2vec2 | 317M | 24 | 200,000 | 1,096 | 47.4 | 52.5 | 0 |",
                     "| F-tiny | wav2vec2 | 94.4K | 2 | 996 | 0.28 | 0 | 100 | 0 |",
                     "| Imported | wavlm | - | - | - | - | - | - | - |",
                     "| Unscored | - | - | - | 500,000 | 7,739 | 23.9 | 13.4 | 62.6 |"]
    tex = (out / "table3_pretraining.tex").read_text(encoding="utf-8")
    assert r"\# updates" in tex and r"M, \%" in tex
    assert r"LB\_1K & wav2vec2 & 317M & 24 & 200,000 & 1,096 & 47.4 & 52.5 & 0 \\" in tex
    csv = pd.read_csv(out / "table3_pretraining.csv")
    assert list(csv["model"]) == [e["name"] for e in REGISTRY["checkpoints"]]
    for e, r in zip(REGISTRY["checkpoints"], csv.to_dict("records")):
        for field in ("updates", "hours", "male_pct", "female_pct", "unknown_pct"):
            if e.get(field) is None:
                assert pd.isna(r[field])
            else:
                assert r[field] == pytest.approx(e[field])
    md = written["report.md"].read_text(encoding="utf-8")
    assert md.index("## Table 3 — pre-training data") < md.index("## Table 4")  # first table of the report
    assert "| Imported | wavlm | - | - | - | - | - | - | - |" in md
    assert "Scored but not in the registry" not in md

    # a checkpoint with scores but no registry entry is named, not silently dropped
    reg.write_text(json.dumps({"checkpoints": REGISTRY["checkpoints"][2:]}), encoding="utf-8")
    md = write_report(db, out, registry=reg)["report.md"].read_text(encoding="utf-8")
    assert "Scored but not in the registry: F-tiny, LB_1K." in md


@pytest.mark.parametrize("content, message", [
    (None, "no checkpoint registry here"),
    ('{"checkpoints": [', "not valid JSON"),
    ('[1, 2]', "is a JSON array, not a JSON object"),
    ('{"checkpoints": [{"hours": 3}]}', "'checkpoints.0.name' is wrong: Field required"),
    ('{"checkpoints": [{"name": "X", "path": "x.pt", "kind": "fairseq", "updates": "125K"}]}',
     "'checkpoints.0.updates' is wrong"),
    ('{"checkpoints": [{"name": "X", "path": "x.pt", "kind": "fairseq", "hours": -5}]}',
     "'checkpoints.0.hours' is wrong"),
])
def test_cli_bad_registry_is_one_line(tmp_path, capsys, content, message):
    db, reg, out = tmp_path / "r.db", tmp_path / "reg.json", tmp_path / "o"
    fill(db)
    if content is not None:
        reg.write_text(content, encoding="utf-8")
    assert main(["report", "--db", str(db), "--out", str(out), "--registry", str(reg)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and str(reg) in err
    assert not (out / "report.md").exists()  # refused before anything is written


def test_report_reads_a_read_only_db_and_never_writes_to_foreign_files(tmp_path, capsys):
    import os
    import stat
    db = tmp_path / "r.db"
    fill(db)
    os.chmod(db, stat.S_IRUSR | stat.S_IRGRP)  # a finished study's results, protected
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "report.md").is_file()
    empty, foreign = tmp_path / "empty.db", tmp_path / "foreign.db"
    empty.touch()
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE notes (x)")
    before = {p: p.read_bytes() for p in (empty, foreign)}
    for path in (empty, foreign):
        assert main(["report", "--db", str(path), "--out", str(tmp_path / "o2")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not a gendergap results DB" in err[0] and str(path) in err[0]
    assert {p: p.read_bytes() for p in (empty, foreign)} == before  # no tables added, no journal left
    assert not list(tmp_path.glob("*.db-*")) and not (tmp_path / "o2").exists()


def test_tables_follow_the_registry_order_not_the_order_runs_finished(tmp_path):
    """Jobs running in parallel store their runs in any order; with the registry the tables do not
    depend on it: registry order, a random-init twin right after its checkpoint, FBANK last."""
    db, reg = tmp_path / "r.db", tmp_path / "checkpoints.json"
    fill(db)  # F-tiny's runs first, then LB_1K's
    store = ResultsStore(db)
    for ckpt in ("FBANK", "LB_1K", "F-tiny+random-init", "F-tiny"):  # as parallel probe jobs might finish
        rid = store.start_run("probe", {"ckpt": ckpt})
        store.add_scores(rid, [{"checkpoint": ckpt, "task": "probe", "gender": "all", "metric": f"f1_macro:L0:{p}",
                                "value": 60.0} for p in ("attention", "mean")], finish=True)
    store.close()
    reg.write_text(json.dumps(REGISTRY), encoding="utf-8")  # LB_1K, then F-tiny

    def order(written, name):
        table = pd.read_csv(written[name])
        if "task" in table:
            table = table[table["task"] == "asr-e2e"]  # one block of Table 4 (asr-hybrid has F-tiny only)
        return list(dict.fromkeys(table["checkpoint"]))
    plain = write_report(db, tmp_path / "plain")
    assert order(plain, "table4_asr.csv") == ["F-tiny", "LB_1K"]   # without a registry: the order runs came in
    assert order(plain, "probes.csv") == ["LB_1K", "F-tiny+random-init", "F-tiny", "FBANK"]
    ordered = write_report(db, tmp_path / "ordered", registry=reg)
    assert order(ordered, "table4_asr.csv") == ["LB_1K", "F-tiny"]
    assert order(ordered, "probes.csv") == ["LB_1K", "F-tiny", "F-tiny+random-init", "FBANK"]
    md = ordered["report.md"].read_text(encoding="utf-8")
    assert md.index("| LB_1K | 0 |") < md.index("| F-tiny | 0 |") < md.index("| F-tiny+random-init | 0 |")
