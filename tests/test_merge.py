"""Tables from many (#28): the four mTEDx pairs as released (sharing talks and segment ids),
indexed with the real `corpus index`, merged with `corpus merge`, read as several `--table`s,
listed in a study config; gender labels mapped from the command line and the config; `corpus
stats` counting a speaker shared by several subsets once."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from cli_helpers import run_lines as run
from corpora.base.errors import UserError
from corpora.table import read_table
from corpora.utterances import UtteranceTable
from fixtures_corpora import make_mtedx_pairs
from gendergap.config import load_config
from gendergap.plan import plan_jobs

PAIRS = ("fr", "en", "es", "pt")
# Rows per pair in make_mtedx_pairs: fr-fr 6 (a1 x2, b2, c3, d4 x2), fr-en 4, fr-es 6, fr-pt 5.
ROWS = {"fr": 6, "en": 4, "es": 6, "pt": 5}


def index_pairs(tmp_path: Path, capsys, corpus=lambda tgt: f"mtedx-fr-{tgt}", extra=()) -> list[Path]:
    """Each pair indexed by the CLI, as docs/boito2022.md tells (one `corpus index` per subset)."""
    root, genders = make_mtedx_pairs(tmp_path / "released")
    tables = []
    for tgt in PAIRS:
        out = tmp_path / "tables" / f"mtedx_fr-{tgt}.tsv"
        rc, _, err = run(capsys, "corpus", "index", "--kind", "mtedx", "--root", str(root), "--lang", "fr",
                         "--tgt-lang", tgt, "--corpus", corpus(tgt), "--speaker-genders", str(genders),
                         "--out", str(out), "--no-progress", *extra)
        assert rc == 0, err
        tables.append(out)
    return tables


@pytest.fixture
def named(tmp_path, capsys):
    """The reference study's layout: each pair under its own corpus name (mtedx-fr-en, ...)."""
    return index_pairs(tmp_path, capsys)


def test_merge_keeps_each_corpus_rows_renames_shared_ids_and_lends_translations(named, tmp_path, capsys):
    out = tmp_path / "merged.tsv"
    rc, stdout, err = run(capsys, "corpus", "merge", *map(str, named), "--out", str(out))
    assert rc == 0, err
    m = read_table(out)
    assert len(m) == sum(ROWS.values()) == 21             # different corpora: no row merged away
    report = json.loads(Path(f"{out}.merge.json").read_text())
    assert report["rows_in"] == 21 and report["rows_out"] == 21
    assert "21 rows in -> 21 rows out" in stdout and "21 id(s) renamed" in stdout
    # every input is in the provenance, with its size
    assert [i["path"] for i in report["inputs"]] == [str(p.absolute()) for p in named]
    assert [i["rows"] for i in report["inputs"]] == [ROWS[t] for t in PAIRS]
    assert all(i["size"] == p.stat().st_size for i, p in zip(report["inputs"], named))
    # each shared id became <corpus>/<id>; the mapping is in the report (file, line) and in orig_id
    assert set(m["id"]) >= {"mtedx-fr-en/a1_0", "mtedx-fr-es/a1_0", "mtedx-fr-fr/a1_0", "mtedx-fr-pt/a1_0"}
    ren = {(r["corpus"], r["id"]): r for r in report["renames"]}
    assert len(ren) == 21 and ren[("mtedx-fr-es", "b2_0")]["new_id"] == "mtedx-fr-es/b2_0"
    assert ren[("mtedx-fr-es", "b2_0")]["input"] == str(named[2]) and ren[("mtedx-fr-es", "b2_0")]["line"] >= 2
    assert (m["id"] == m["corpus"] + "/" + m["orig_id"]).all()
    # a task selecting its corpus gets exactly its own table's rows, translations and audio
    for tgt, path in zip(PAIRS, named):
        own = read_table(path)
        sel = m[m["corpus"] == f"mtedx-fr-{tgt}"]
        assert sorted(sel["orig_id"]) == sorted(own["id"])
        assert sorted(sel["duration"]) == sorted(own["duration"])
        if tgt != "fr":
            col = f"tgt_text_{tgt}"
            assert dict(zip(sel["orig_id"], sel[col])) == dict(zip(own["id"], own[col]))
    # the same segment in another corpus lends its translation (fr-fr rows get fr-en's English) ...
    fr = m[m["corpus"] == "mtedx-fr-fr"].set_index("orig_id")
    assert fr.loc["a1_0", "tgt_text_en"] == "en sentence a1 0" and fr.loc["d4_1", "tgt_text_pt"] == "pt sentence d4 1"
    assert fr.loc["d4_0", "tgt_text_en"] == ""             # fr-en has no talk d4
    # ... but not from a segment cut differently (fr-es's b2_0 is 1.4 s, fr-fr's 1.5 s)
    assert fr.loc["b2_0", "tgt_text_en"] == "en sentence b2 0" and fr.loc["b2_0", "tgt_text_es"] == ""
    assert report["shared_across_corpora"]["count"] == 6   # a1_0 a1_1 b2_0 c3_0 d4_0 d4_1
    assert report["duplicate_audio"]["count"] == 0 and report["same_id_different_segment"]["count"] == 0
    # audio made absolute and pointing at each pair's own copy
    assert all(Path(a).is_absolute() and Path(a).is_file() for a in m["audio"])
    assert m.set_index("id").loc["mtedx-fr-pt/a1_0", "audio"].endswith("fr-pt/data/train/wav/a1.flac")


def test_one_corpus_name_joins_translations_and_reports_a_recut_segment(tmp_path, capsys):
    tables = index_pairs(tmp_path, capsys, corpus=lambda tgt: "mtedx")
    out = tmp_path / "merged.tsv"
    rc, stdout, err = run(capsys, "corpus", "merge", *map(str, tables), "--out", str(out))
    assert rc == 0, err
    m = read_table(out).set_index("id")
    # 6 segments, one of them (b2_0) cut differently in fr-es: 7 rows
    assert len(m) == 7 and sorted(m.index) == ["a1_0", "a1_1", "c3_0", "d4_0", "d4_1", "mtedx/b2_0#1",
                                               "mtedx/b2_0#3"]
    assert m.loc["a1_0", ["tgt_text_en", "tgt_text_es", "tgt_text_pt"]].tolist() == [
        "en sentence a1 0", "es sentence a1 0", "pt sentence a1 0"]
    assert m.loc["d4_0", "tgt_text_en"] == "" and m.loc["d4_0", "tgt_text_es"] == "es sentence d4 0"
    assert m.loc["mtedx/b2_0#1", "duration"] == 1.5 and m.loc["mtedx/b2_0#3", "duration"] == 1.4
    assert m.loc["mtedx/b2_0#1", "tgt_text_en"] == "en sentence b2 0" and m.loc["mtedx/b2_0#3", "tgt_text_en"] == ""
    assert m.loc["mtedx/b2_0#3", "orig_id"] == "b2_0"
    warn = [line for line in err if "different segments" in line]
    assert len(warn) == 1 and "mtedx/b2_0" in warn[0] and "duration" in warn[0]
    report = json.loads(Path(f"{out}.merge.json").read_text())
    assert report["translations_joined"]["rows"] == 6 and report["same_id_different_segment"]["count"] == 1
    assert report["rows_in"] == 21 and report["rows_out"] == 7 and report["ids_renamed"] == 2
    assert "21 rows in -> 7 rows out" in stdout


def test_duplicate_audio_under_two_ids_is_reported_and_kept(named, tmp_path, capsys):
    # the same clip indexed a second time under another id (a generic list pointing into fr-en's talk)
    talk = tmp_path / "released" / "mtedx" / "fr-en" / "data" / "train" / "wav" / "a1.flac"
    csv = tmp_path / "copy.csv"
    csv.write_text(f"utt_id,path,spk,sex,transcript,start,dur\nx1,{talk},a1,F,phrase a1 0,0.5,2.0\n")
    copy = tmp_path / "copy.tsv"
    rc, _, err = run(capsys, "corpus", "index", "--kind", "generic", "--root", str(csv), "--map",
                     "id=utt_id,audio=path,speaker=spk,gender=sex,text=transcript,offset=start,duration=dur",
                     "--out", str(copy))
    assert rc == 0, err
    out = tmp_path / "m.tsv"
    rc, stdout, err = run(capsys, "corpus", "merge", str(named[1]), str(copy), "--out", str(out))
    assert rc == 0, err
    assert len(read_table(out)) == ROWS["en"] + 1
    warn = [line for line in err if "under different ids" in line]
    assert len(warn) == 1 and "x1" in warn[0] and "a1_0" in warn[0]
    dups = json.loads(Path(f"{out}.merge.json").read_text())["duplicate_audio"]
    assert dups["count"] == 1 and sorted(dups["examples"][0]["ids"]) == ["a1_0", "x1"]
    assert "1 duplicate audio segment(s)" in stdout


def test_the_same_table_twice_is_refused(named, tmp_path, capsys):
    out = tmp_path / "m.tsv"
    rc, _, err = run(capsys, "corpus", "merge", str(named[0]), str(named[0]), "--out", str(out))
    assert rc == 2 and len(err) == 1 and "table given twice" in err[0] and not out.exists()


def test_loading_one_table_is_that_table_with_its_audio_absolute(named):
    one, own = UtteranceTable.load([named[1]]), read_table(named[1])
    assert one.sources == (named[1],) and one.source == str(named[1])
    pd.testing.assert_frame_equal(one.rows.drop(columns="audio"), own.drop(columns="audio"))
    assert list(one.rows["audio"]) == [str(named[1].resolve().parent / a) for a in own["audio"]]
    merged = UtteranceTable.load(named)
    assert len(merged) == 21 and merged.rows["audio"].str.startswith("/").all()
    assert len(merged.select(split="train")) == (merged.rows["split"] == "train").sum() > 0


def test_one_absolute_form_of_an_audio_path_whether_read_alone_or_merged(named, tmp_path):
    """A row's audio location is the same string read alone or merged with another table: resolved
    against its table's folder, then normalised (``x/../``), as merge always did (they differed)."""
    detour = tmp_path / "detour.tsv"
    rows = pd.read_csv(named[1], sep="\t", dtype=str, keep_default_na=False)
    base = named[1].resolve().parent
    rows["audio"] = ["detour/../" + os.path.relpath(base / a, tmp_path) for a in rows["audio"]]
    rows.to_csv(detour, sep="\t", index=False)
    alone = UtteranceTable.load(detour).rows.set_index("orig_id" if "orig_id" in rows else "id")["audio"]
    merged = UtteranceTable.load([detour, named[0]]).rows
    merged = merged[merged["corpus"] == rows["corpus"][0]].set_index("orig_id")["audio"]
    assert "/../" not in "".join(alone) and alone.str.startswith("/").all()
    assert alone.sort_index().tolist() == merged.sort_index().tolist()
    assert alone.tolist() == [os.path.normpath(base / a) for a in pd.read_csv(named[1], sep="\t", dtype=str)["audio"]]


def test_one_way_to_select_rows_several_values_a_column_and_what_an_empty_filter_says(named):
    """UtteranceTable.select is the one row filter (ST, the features step, the probes, Kaldi export,
    transcribe): a value or several per column; strict, the first filter that empties the table is
    named with the values the table has, and a filter on a missing column names the column."""
    merged = UtteranceTable.load(named)
    splits = merged.rows["split"].astype(str)
    two = merged.select(split=["train", "test"])
    assert len(two) == splits.isin(["train", "test"]).sum() and set(two.rows["split"]) == {"train", "test"}
    known = merged.rows["gender"].isin(["F", "M"])
    assert len(merged.select(split={"train"}, gender=("F", "M"))) == ((splits == "train") & known).sum() < len(merged)
    assert len(merged.select(split="nope")) == 0 and merged.select(split="nope").sources == merged.sources
    with pytest.raises(UserError, match=r"no rows with split='nope' \(the table has 'test', 'train'") as e:
        merged.select(corpus=None, split="nope", strict=True)
    assert e.value.fix == "pick one of the table's split values"
    with pytest.raises(UserError, match="no 'lang' column"):
        UtteranceTable(merged.rows.drop(columns=["lang"], errors="ignore"),
                       merged.sources).select(lang="fr", strict=True)
    lines = UtteranceTable.load(named[1]).with_lines().rows["_line"]
    assert list(lines) == list(range(2, len(lines) + 2)) and set(merged.with_lines().rows["_line"]) == {0}


def test_table_twice_in_manifest_build_uses_both(named, tmp_path, capsys):
    """`--table A --table B` is never silently B: the selection holds the rows of both, with the
    ids they share made unique by the merge rule."""
    en, pt = named[1], named[3]
    out = tmp_path / "m2"
    rc, _, err = run(capsys, "manifest", "build", "--table", str(en), "--table", str(pt), "--gender", "any",
                     "--format", "speechbrain", "--out", str(out))
    assert rc == 0, err
    train = read_table(out / "selection_train.tsv")
    expect = {f"mtedx-fr-{t}/{i}" for t, p in (("en", en), ("pt", pt))
              for i in read_table(p).query("split == 'train'")["id"]}
    # the ids both tables have (a1_0, a1_1) renamed, the others kept
    expect = {e if e.split("/", 1)[1] in ("a1_0", "a1_1", "c3_0") else e.split("/", 1)[1] for e in expect}
    assert set(train["id"]) == expect and len(train) == 3 + 4
    assert set(train["corpus"]) == {"mtedx-fr-en", "mtedx-fr-pt"}
    report = json.loads((out / "selection_report.json").read_text())
    assert [t["path"] for t in report["provenance"]["table"]] == [str(en.absolute()), str(pt.absolute())]
    # one table alone: its rows only
    rc, _, err = run(capsys, "manifest", "build", "--table", str(pt), "--gender", "any", "--format", "speechbrain",
                     "--out", str(tmp_path / "m1"))
    assert rc == 0 and len(read_table(tmp_path / "m1" / "selection_train.tsv")) == 4


def test_gender_map_on_the_command_line(tmp_path, capsys):
    root, genders = make_mtedx_pairs(tmp_path / "released")
    base = ["corpus", "index", "--kind", "mtedx", "--root", str(root), "--lang", "fr", "--tgt-lang", "es",
            "--speaker-genders", str(genders), "--no-progress"]
    rc, _, err = run(capsys, *base, "--out", str(tmp_path / "plain.tsv"))
    assert rc == 0
    warn = [line for line in err if "unknown gender label" in line]
    # both unknown labels, with their counts, in ONE line that says how to map them
    assert len(warn) == 1 and "'Multi-Mix' on 2 row(s)" in warn[0] and "'Frau' on 1 row(s)" in warn[0]
    assert "--gender-map" in warn[0] and str(genders) in warn[0]
    plain = read_table(tmp_path / "plain.tsv").set_index("id")
    assert plain.loc["c3_0", "gender"] == "U" and plain.loc["d4_0", "gender"] == "U"

    rc, _, err = run(capsys, *base, "--gender-map", "frau=F, Multi-Mix=U", "--out", str(tmp_path / "mapped.tsv"))
    assert rc == 0 and not [line for line in err if "unknown gender label" in line]
    mapped = read_table(tmp_path / "mapped.tsv").set_index("id")
    assert mapped.loc["c3_0", "gender"] == "F" and mapped.loc["c3_0", "gender_raw"] == "Frau"
    assert mapped.loc["d4_0", "gender"] == "U" and mapped.loc["a1_0", "gender"] == "F"

    bad = tmp_path / "bad.tsv"
    rc, _, err = run(capsys, *base, "--gender-map", "Frau=female", "--out", str(bad))
    assert rc == 2 and len(err) == 1 and "--gender-map" in err[0] and "LABEL=F" in err[0] and not bad.exists()


def test_study_config_lists_tables_and_maps_genders(named, tmp_path):
    cfg = tmp_path / "study.yaml"
    tables = "\n".join(f"    - {p}" for p in named)
    cfg.write_text(textwrap.dedent("""\
        name: merged
        corpus:
          table:
        {tables}
          gender_map: {{Frau: F}}
        checkpoints:
          F-tiny: {{shipped: tiny-female}}
        tasks:
          asr-frozen: {{corpus: mtedx-fr-fr, layer: last}}
        """).format(tables=textwrap.indent(tables, "    ")), encoding="utf-8")
    run_dir = tmp_path / "run"
    steps = {s.name: s for s in plan_jobs(load_config(cfg), run_dir)}
    merge = steps["merge"]
    assert merge.kind == "merge" and merge.tables == [str(p) for p in named]
    assert merge.outputs == [str(run_dir / "corpus" / "utterances.tsv")]
    data = next(s for s in steps.values() if s.kind == "asr-data")
    assert "merge" in data.deps and data.table == merge.out
    merge.run()
    m = read_table(merge.out)
    assert len(m) == 21 and set(m.loc[m["orig_id"] == "c3_0", "gender"]) == {"F"}   # Frau -> F, every corpus
    assert json.loads(Path(f"{merge.out}.merge.json").read_text())["gender_map"] == {"frau": "F"}
    # the key follows the inputs' content: re-indexing one table re-runs the merge and what reads it
    again = {s.name: s for s in plan_jobs(load_config(cfg), run_dir)}
    assert again["merge"].key == merge.key
    named[3].write_text(named[3].read_text().replace("pt sentence a1 0", "pt sentence a1 zero"))
    changed = {s.name: s for s in plan_jobs(load_config(cfg), run_dir)}
    assert changed["merge"].key != merge.key and changed[data.name].key != data.key
    # one table, no gender_map: read as it is (no merge step), as before
    cfg.write_text(f"name: one\ncorpus: {{table: {named[0]}}}\ncheckpoints:\n  F-tiny: {{shipped: tiny-female}}\n"
                   "tasks:\n  asr-frozen: {corpus: mtedx-fr-fr, layer: last}\n")
    one = {s.name: s for s in plan_jobs(load_config(cfg), run_dir)}
    assert "merge" not in one and next(s for s in one.values() if s.kind == "asr-data").table == str(named[0])


def test_an_empty_table_list_is_refused(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\ncorpus: {table: []}\ncheckpoints:\n  F-tiny: {shipped: tiny-female}\n")
    rc, _, err = run(capsys, "sweep", "--config", str(cfg), "--dry-run")
    assert rc == 2 and len(err) == 1 and f"{cfg}:" in err[0]


def test_stats_total_counts_shared_speakers_once_and_rounds_seconds(named, capsys):
    rc, text, err = run(capsys, "corpus", "stats", *map(str, named), "--format", "csv")
    assert rc == 0, err
    rows = pd.read_csv(__import__("io").StringIO(text), dtype=str).set_index("corpus")
    # four talks, four people, though each pair lists its talks' speakers again
    assert rows.loc["TOTAL", "speakers_all"] == "4"
    assert [rows.loc[f"mtedx-fr-{t}", "speakers_all"] for t in PAIRS] == ["4", "3", "4", "3"]
    assert [rows.loc["TOTAL", f"speakers_{g}"] for g in "FMU"] == ["1", "1", "2"]   # c3 Frau, d4 Multi-Mix: U
    seconds = rows[[c for c in rows.columns if c.startswith("seconds_")]].stack()
    assert all(len(s.split(".")[-1]) <= 3 for s in seconds), list(seconds)
    # the 21 rows hold 7 segments (test_stats_total_counts_each_audio_segment_once)
    assert float(rows.loc["TOTAL", "seconds_all"]) == pytest.approx(13.4)
    assert rows.loc["TOTAL", "seconds_all"] == "13.4"


def test_stats_total_counts_each_audio_segment_once(named, capsys):
    """The four pairs hold the same talks: 21 rows, 7 segments (make_mtedx_pairs: a1_0 2.0 s, a1_1
    2.5 s, b2_0 1.5 s, fr-es's b2_0 recut to 1.4 s -- another segment --, c3_0 2.0 s, d4_0 and d4_1
    2.0 s each). Each subset's row counts all its rows; TOTAL each segment once, and says so."""
    rc, text, err = run(capsys, "corpus", "stats", *map(str, named), "--format", "csv")
    assert rc == 0, err
    rows = pd.read_csv(__import__("io").StringIO(text)).set_index("corpus")
    own = {f"mtedx-fr-{t}": read_table(p) for t, p in zip(PAIRS, named)}
    for corpus, table in own.items():   # the per-subset rows as before: every row of the table
        assert rows.loc[corpus, "utterances_all"] == len(table) == ROWS[corpus[-2:]]
        assert rows.loc[corpus, "seconds_all"] == pytest.approx(table["duration"].sum())
    total = rows.loc["TOTAL"]
    assert (total["utterances_all"], total["seconds_all"]) == (7, pytest.approx(13.4))
    assert rows.drop(index="TOTAL")["utterances_all"].sum() == 21            # what TOTAL used to say
    assert (total["utterances_F"], total["utterances_M"], total["utterances_U"]) == (2, 2, 3)   # a1 F, b2 M, c3 d4 U
    assert (total["seconds_F"], total["seconds_M"], total["seconds_U"]) == (4.5, 2.9, 6.0)
    note = "TOTAL counts each audio segment once: 20 rows are 6 segments held by several rows"
    assert any(note in line and "14 repeats left out" in line for line in err), err   # csv: stdout stays a CSV
    for fmt in ("text", "markdown"):
        rc, shown, _ = run(capsys, "corpus", "stats", *map(str, named), "--format", fmt)
        assert rc == 0 and shown.splitlines()[-1].startswith(note), shown
    # one table: no segment on two rows, no line
    rc, shown, _ = run(capsys, "corpus", "stats", str(named[0]))
    assert rc == 0 and "TOTAL counts" not in shown


def test_stats_total_one_segment_needs_the_same_recording_offset_and_duration(tmp_path):
    """x and z are copies of one recording (same name and size), y another recording with that
    name: a row of x and one of z at the same offset and duration are one segment; y's, another
    offset, or another duration are not."""
    from corpora.stats import gender_summary, segment_keys
    from fixtures_corpora import write_audio

    x = write_audio(tmp_path / "x" / "talk.wav", 3.0)
    y = write_audio(tmp_path / "y" / "talk.wav", 3.5)
    z = write_audio(tmp_path / "z" / "talk.wav", 3.0)
    audio = [x, y, z, z, z]
    df = pd.DataFrame({"speaker": ["s"] * 5, "corpus": ["x", "y", "z", "z", "z"], "audio": list(map(str, audio)),
                       "offset": [0.5, 0.5, 0.5, 1.0, 0.5], "duration": [1.0, 1.0, 1.0, 1.0, 1.25],
                       "gender": ["F"] * 5, "split": ["train"] * 5})
    keys = segment_keys(df)
    assert keys[0] == keys[2] and len(set(keys)) == 4
    s = gender_summary(df)
    total = s.set_index("corpus").loc["TOTAL"]
    assert (total["utterances_F"], total["seconds_F"]) == (4, 4.25)
    assert s.attrs["repeated_segments"] == {"rows": 2, "segments": 1, "left_out": 1}
    assert s.set_index("corpus").loc["z", "utterances_all"] == 3     # a corpus's row keeps every row


def test_dry_run_checks_the_tasks_against_the_merged_tables(named, tmp_path, capsys):
    """The merge step merges in its check, so a task reading the merged table is checked before
    anything runs (not skipped as an output still to be written)."""
    tables = ", ".join(map(str, named))

    def dry(task: str, gender_map: str = ""):
        cfg = tmp_path / "study.yaml"
        cfg.write_text(f"name: m\ncorpus: {{table: [{tables}]{gender_map}}}\n"
                       f"checkpoints:\n  F-tiny: {{shipped: tiny-female}}\ntasks:\n  asr-frozen: {task}\n",
                       encoding="utf-8")
        return cfg, run(capsys, "sweep", "--config", str(cfg), "--out", str(tmp_path / "run"), "--dry-run")

    cfg, (rc, out, err) = dry("{corpus: mtedx-fr-nope, layer: last}")
    assert rc == 2 and any("mtedx-fr-nope" in line and "asr-frozen" in line for line in err), err
    assert not (tmp_path / "run").exists()
    # the talks of the table's train split tested (never trained on: train and valid read its test split)
    es = "{corpus: mtedx-fr-es, layer: last, splits: {train: test, valid: test, test: train}}"
    cfg, (rc, out, err) = dry(es)   # test speaker d4 is 'Multi-Mix': U, so no per-gender score for it
    assert rc == 2 and any("test" in line and "gender" in line for line in err), err
    cfg, (rc, out, err) = dry(es, gender_map=", gender_map: {multi-mix: M}")
    assert rc == 0, err
    assert "merge" in out and not (tmp_path / "run").exists()


def test_a_speaker_id_in_two_corpora_is_one_person_only_on_the_same_recording(tmp_path):
    """Speaker 1 of three corpora, each with its own 0001.wav: x and z hold copies of one recording
    (same name, same size), y another recording with the same name. x and z are one person."""
    from corpora.stats import gender_summary, speaker_keys
    from fixtures_corpora import write_audio

    x = write_audio(tmp_path / "x" / "0001.wav", 1.0)
    y = write_audio(tmp_path / "y" / "0001.wav", 1.5)
    z = write_audio(tmp_path / "z" / "0001.wav", 1.0)
    df = pd.DataFrame({"speaker": ["1", "1", "1"], "corpus": ["x", "y", "z"], "audio": [str(x), str(y), str(z)],
                       "gender": ["F", "F", "F"], "duration": [1.0, 1.5, 1.0], "split": ["train"] * 3})
    keys = speaker_keys(df)
    assert keys[0] == keys[2] != keys[1]
    total = gender_summary(df).set_index("corpus").loc["TOTAL"]
    assert total["speakers_F"] == 2 and total["seconds_F"] == 3.5


def test_tables_with_distinct_ids_merge_as_they_are(named, tmp_path, capsys):
    """Nothing to rename: ids and columns as in the inputs (no orig_id), rows of both, in order."""
    pt = read_table(named[3])
    pt["id"] = "pt-" + pt["id"]
    from corpora.table import write_table
    write_table(pt, tmp_path / "pt.tsv")
    out = tmp_path / "m.tsv"
    rc, stdout, err = run(capsys, "corpus", "merge", str(named[1]), str(tmp_path / "pt.tsv"), "--out", str(out))
    assert rc == 0, err
    m = read_table(out)
    assert list(m["id"]) == list(read_table(named[1])["id"]) + list(pt["id"]) and "orig_id" not in m.columns
    assert "0 id(s) renamed" in stdout


def test_conflicting_translations_of_one_segment_are_not_joined(tmp_path, capsys):
    """Two tables of one corpus giving one segment two different English translations: the rows
    that agree join, those two stay apart (ids #<input>), and the warning names tgt_text_en."""
    en = index_pairs(tmp_path, capsys, corpus=lambda tgt: "mtedx")[1]
    other = read_table(en)
    other.loc[other["id"] == "a1_1", "tgt_text_en"] = "another sentence"
    from corpora.table import write_table
    write_table(other, tmp_path / "en_copy.tsv")
    out = tmp_path / "m.tsv"
    rc, stdout, err = run(capsys, "corpus", "merge", str(en), str(tmp_path / "en_copy.tsv"), "--out", str(out))
    assert rc == 0, err
    m = read_table(out).set_index("id")
    assert sorted(m.index) == ["a1_0", "b2_0", "c3_0", "mtedx/a1_1#1", "mtedx/a1_1#2"]
    assert m.loc["mtedx/a1_1#2", "tgt_text_en"] == "another sentence"
    warn = [line for line in err if "different segments" in line]
    assert len(warn) == 1 and "tgt_text_en" in warn[0] and "duration" not in warn[0]
    report = json.loads(Path(f"{out}.merge.json").read_text())
    assert report["translations_joined"]["rows"] == 3 and report["not_joined"]["count"] == 1
