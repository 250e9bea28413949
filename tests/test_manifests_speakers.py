"""Speakers are (corpus, speaker) pairs everywhere in manifests/ (issue 19: "TOTAL merges equal
speaker ids across corpora", fixed in corpora/stats.py; the same bug in selection and stats).

Two corpora that both number their speakers from 1 -- speaker "1" is a woman in corpus a and a
man in corpus b -- are two speakers: not a mixed-gender speaker, not one speaker in the counts,
not one speaker for speaker-disjointness, held-out splits, valid up-sampling or Kaldi's spk2gender.
"""
import json

import pandas as pd
import pytest

from corpora.base.errors import UserError
from corpora.table import new_table, write_table
from manifests.build import build_manifests, read_id_list
from manifests.export_kaldi import export_kaldi
from manifests.select import mixed_gender_speakers
from manifests.splits import build_selection
from manifests.stats import format_stats, gender_counts, table1, table2


def rows(corpus, speaker, gender, n, split="train", seconds=10.0):
    return [{"id": f"{corpus}-{speaker}-{split}-{k}", "audio": f"/data/{corpus}/{speaker}_{split}_{k}.wav",
             "offset": 0.0, "duration": seconds, "sample_rate": 16000, "speaker": speaker, "gender": gender,
             "corpus": corpus, "lang": "fr", "split": split, "text": "un deux"} for k in range(n)]


def two_corpora() -> pd.DataFrame:
    """Corpus a: speakers 1 (F), 2 (M); corpus b: speakers 1 (M), 2 (F). 4 rows x 10 s each."""
    return new_table(rows("a", "1", "F", 4) + rows("a", "2", "M", 4) + rows("b", "1", "M", 4) + rows("b", "2", "F", 4))


def test_equal_ids_in_two_corpora_are_not_a_mixed_gender_speaker():
    df = two_corpora()
    assert mixed_gender_speakers(df) == []
    sel = build_selection(df, "balanced", seed=0)   # was: "speaker '1' has genders ['F', 'M']"
    assert len(sel.splits["train"]) == 16
    assert sel.report["splits"]["train"]["all"]["speakers"] == 4
    assert sel.report["splits"]["train"]["F"]["speakers"] == 2
    # a real mixed speaker is still found, and named with its corpus
    df.loc[df["id"] == "a-1-train-0", "gender"] = "M"
    assert mixed_gender_speakers(df) == [("a", "1")]
    with pytest.raises(UserError, match="speaker '1' has genders \\['F', 'M'\\] on different rows of corpus 'a'"):
        build_selection(df, "balanced", source="t.tsv")
    sel = build_selection(df, "balanced", mixed_speakers="drop")
    dropped = [d for d in sel.report["dropped"] if d["reason"] == "speaker with both F and M rows"]
    assert dropped[0]["rows"] == 4 and dropped[0]["speakers"] == 1   # corpus b's speaker 1 stays
    assert ("b", "1") in set(zip(sel.splits["train"]["corpus"], sel.splits["train"]["speaker"]))


def test_stats_count_speakers_per_corpus():
    df = two_corpora()
    splits = {"train": df}
    counts = gender_counts(splits)
    assert "B" not in set(counts["group"])    # was: all 16 rows in B
    t2 = table2(counts, splits).set_index(["split", ""])
    assert t2.loc[("train", "# speakers")].to_dict() == {"M": "2", "F": "2", "All": "4"}
    assert t2.loc[("train", "Duration")].to_dict() == {"M": "0:01", "F": "0:01", "All": "0:03"}
    t1 = table1(counts, speakers_from=splits).set_index("Dataset")
    assert t1.loc["a", "# speakers"] == "1 / 1" and t1.loc["b", "# speakers"] == "1 / 1"
    # without the rows at hand, the per-corpus sums are right too
    assert table2(counts).set_index(["split", ""]).loc[("train", "# speakers"), "All"] == "4"
    assert "| train | # speakers | 2 | 2 | 4 |" in format_stats(splits, "markdown")


def test_held_out_and_valid_speakers_are_told_apart_by_corpus():
    # corpus b's speaker 2 is a test speaker; corpus a's speaker 2 must stay selectable. (Equal
    # ids have equal genders here, so only the held-out and disjointness rules are at stake.)
    df = new_table(rows("a", "1", "F", 4) + rows("a", "2", "M", 4) + rows("b", "1", "F", 4)
                   + rows("b", "3", "M", 4) + rows("b", "2", "M", 2, split="test")
                   + rows("a", "9", "F", 2, split="valid") + rows("b", "9", "F", 2, split="valid"))
    sel = build_selection(df, "any", seed=0)
    tr, va = sel.splits["train"], sel.splits["valid"]
    assert len(tr[(tr["corpus"] == "a") & (tr["speaker"] == "2")]) == 4   # was: dropped with b's speaker 2
    assert not any(d["reason"] == "speaker of a held-out split" for d in sel.report["dropped"])
    assert len(va) == 4 and sel.report["splits"]["valid"]["all"]["speakers"] == 2
    # speaker-disjointness: a valid speaker 1 in corpus b takes b's speaker 1 out of train, not a's
    df2 = pd.concat([df, new_table(rows("b", "1", "F", 1, split="valid"))], ignore_index=True)
    sel2 = build_selection(df2, "any", seed=0)
    tr2 = sel2.splits["train"]
    assert set(tr2.loc[tr2["speaker"] == "1", "corpus"]) == {"a"}
    leak = [d for d in sel2.report["dropped"] if d["reason"].startswith("speaker in valid")]
    assert leak[0]["rows"] == 4 and leak[0]["speakers"] == 1


def test_valid_upsampling_moves_one_corpus_speaker_only():
    # 2 s of labelled M valid speech; 0.01 h balanced valid needs 18 s of M: one training M
    # speaker moves. The M speakers are "1" of corpus a and "1" of corpus b: one of them moves,
    # the other stays in train.
    df = new_table(rows("a", "1", "M", 3) + rows("b", "1", "M", 3) + rows("a", "2", "F", 3) + rows("b", "2", "F", 3)
                   + rows("a", "3", "F", 3)
                   + rows("a", "8", "F", 1, split="valid", seconds=9.0)
                   + rows("a", "9", "F", 1, split="valid", seconds=9.0)
                   + rows("b", "7", "M", 1, split="valid", seconds=2.0))
    sel = build_selection(df, "balanced", valid_hours=0.01, seed=0)
    up = sel.report["valid_upsampled_from_train"]
    assert [u["gender"] for u in up] == ["M"] and len(up[0]["upsampled_speakers"]) == 1
    corpus, speaker = up[0]["upsampled_speakers"][0]
    tr, va = sel.splits["train"], sel.splits["valid"]
    train_pairs = set(zip(tr["corpus"], tr["speaker"]))
    valid_pairs = set(zip(va["corpus"], va["speaker"]))
    assert (corpus, speaker) not in train_pairs and (corpus, speaker) in valid_pairs
    other = "a" if corpus == "b" else "b"
    assert (other, speaker) in train_pairs        # was: moved along with it (same id, other corpus)
    assert not train_pairs & valid_pairs


def test_exclude_speakers_from_a_table_names_corpus_and_speaker(tmp_path):
    df = two_corpora()
    table = tmp_path / "t.tsv"
    write_table(df, table)
    excl = tmp_path / "excl.tsv"
    write_table(df[(df["corpus"] == "b") & (df["speaker"] == "1")], excl)
    assert read_id_list(excl) == [("b", "1")]
    sel = build_selection(df, "any", exclude_speakers=read_id_list(excl), seed=0)
    tr = sel.splits["train"]
    assert len(tr) == 12 and set(tr.loc[tr["speaker"] == "1", "corpus"]) == {"a"}
    assert sel.report["request"]["exclude_speakers"] == ["b/1"]
    # a plain list of ids names no corpus: the id is left out in every corpus
    plain = tmp_path / "ids.txt"
    plain.write_text("1\n")
    assert len(build_selection(df, "any", exclude_speakers=read_id_list(plain)).splits["train"]) == 8
    # end to end: Kaldi data dirs keep the two speakers 1 apart, with their own genders
    out = tmp_path / "m"
    build_manifests(table, out, gender="any", fmt="kaldi", seed=0, exclude_speakers_file=None)
    spk2gender = (out / "train" / "spk2gender").read_text().split("\n")
    assert {"a-1 f", "b-1 m", "a-2 m", "b-2 f"} <= set(spk2gender)
    report = json.loads((out / "selection_report.json").read_text())
    assert report["export"]["train"]["speakers"] == 4


def test_kaldi_speaker_ids_unchanged_when_corpora_share_no_id(tmp_path):
    df = new_table(rows("a", "s1", "F", 2) + rows("b", "s2", "M", 2))
    export_kaldi({"train": df}, tmp_path)
    assert (tmp_path / "train" / "spk2gender").read_text() == "s1 f\ns2 m\n"
