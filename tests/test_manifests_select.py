"""Selection: gender filters, duration targets, balance, splits, exclusions, determinism, the report."""
import numpy as np
import pandas as pd
import pytest

from corpora.base.errors import UserError
from corpora.table import new_table
from manifests.select import hhmm, parse_gender_spec, sample_to_duration
from manifests.splits import build_selection


def synth_table(n_f_spk=6, n_m_spk=8, utts=40, seed=0, corpus="c1", split_of=None, extra=()):
    """A table (no audio needed for selection) with random utterance lengths 1-12 s."""
    rng = np.random.default_rng(seed)
    rows = []
    for g, n in (("F", n_f_spk), ("M", n_m_spk)):
        for s in range(n):
            spk = f"{corpus}_{g.lower()}{s}"
            for k in range(utts):
                rows.append({"id": f"{spk}_{k}", "audio": f"{spk}_{k}.wav", "offset": 0.0,
                             "duration": round(float(rng.uniform(1, 12)), 3), "sample_rate": 16000,
                             "speaker": spk, "gender": g, "corpus": corpus, "lang": "fr",
                             "split": (split_of or {}).get(spk, "train"), "text": "x"})
    rows += list(extra)
    return new_table(rows)


def dur(df, g=None):
    return float(df["duration"].sum() if g is None else df.loc[df["gender"] == g, "duration"].sum())


@pytest.mark.parametrize("text,share,genders", [
    ("F", 1.0, ("F",)), ("female", 1.0, ("F",)), ("M", 0.0, ("M",)), ("balanced", 0.5, ("F", "M")),
    ("p=0.3", 0.3, ("F", "M")), ("p=1", 1.0, ("F",)), ("any", None, ("F", "M", "U"))])
def test_parse_gender_spec(text, share, genders):
    spec = parse_gender_spec(text)
    assert spec.female_share == share and spec.genders == genders


@pytest.mark.parametrize("bad", ["women", "p=1.5", "p=", "0.3"])
def test_bad_gender_spec_is_user_error(bad):
    with pytest.raises(UserError, match="F, M, balanced"):
        parse_gender_spec(bad)


def test_hhmm_formats_like_the_study():
    assert hhmm((1006 * 60 + 59) * 60) == "1,006:59"
    assert hhmm(30 * 60) == "0:30"
    assert hhmm(3725, with_seconds=True) == "1:02:05"


def test_sample_to_duration_gets_within_one_utterance_and_is_seeded():
    d = np.random.default_rng(1).uniform(1, 10, size=500)
    target = 600.0
    take = sample_to_duration(d, target, np.random.default_rng(7))
    total = d[take].sum()
    assert total <= target + 1e-6
    assert target - total < d[~take].min()          # nothing left out would still fit
    again = sample_to_duration(d, target, np.random.default_rng(7))
    other = sample_to_duration(d, target, np.random.default_rng(8))
    assert (take == again).all() and (take != other).any()
    assert sample_to_duration(d, 1e9, np.random.default_rng(0)).all()


def test_balanced_as_much_as_the_table_allows():
    df = synth_table()
    sel = build_selection(df, "balanced", seed=0)
    tr = sel.splits["train"]
    f, m = dur(tr, "F"), dur(tr, "M")
    assert f == pytest.approx(dur(df, "F"))                   # the scarcer gender is used whole
    assert abs(f - m) / max(f, m) < 0.005 or abs(f - m) <= df["duration"].max()
    assert abs(f - m) / max(f, m) < 0.005                     # 120 utterances: well inside 0.5 %
    assert sel.report["balance"]["train"]["relative_difference"] < 0.005


@pytest.mark.parametrize("gender,hours", [("balanced", 0.5), ("p=0.3", 0.5), ("F", 0.2), ("M", 0.25)])
def test_hours_targets_per_gender(gender, hours):
    df = synth_table()
    spec = parse_gender_spec(gender)
    tr = build_selection(df, gender, hours=hours, seed=3).splits["train"]
    longest = df["duration"].max()
    for g in spec.genders:
        want = hours * 3600 * spec.share(g)
        assert want - longest < dur(tr, g) <= want + 1e-6
    assert set(tr["gender"]) == set(spec.genders)


def test_hours_per_gender():
    tr = build_selection(synth_table(), "balanced", hours_per_gender=0.2, seed=0).splits["train"]
    assert dur(tr, "F") == pytest.approx(720, abs=12) and dur(tr, "M") == pytest.approx(720, abs=12)


def test_impossible_request_is_an_error_that_says_what_exists():
    df = synth_table()
    have_f = hhmm(dur(df, "F"))
    with pytest.raises(UserError) as e:
        build_selection(df, "F", hours=40)
    msg = str(e.value)
    assert "asked for 40:00 of F" in msg and f"has {have_f} of F" in msg and "at most" in msg
    with pytest.raises(UserError, match="asked for 20:00 of F"):
        build_selection(df, "balanced", hours=40)


def test_seed_stable_and_independent_of_row_order():
    df = synth_table()
    a = build_selection(df, "balanced", hours=0.4, seed=5).splits["train"]
    b = build_selection(df.sample(frac=1, random_state=1).reset_index(drop=True), "balanced", hours=0.4,
                        seed=5).splits["train"]
    c = build_selection(df, "balanced", hours=0.4, seed=6).splits["train"]
    assert sorted(a["id"]) == sorted(b["id"])
    assert sorted(a["id"]) != sorted(c["id"])


def test_every_input_row_is_selected_or_accounted_for():
    df = synth_table(split_of={"c1_f0": "valid", "c1_m0": "valid", "c1_m1": "test"})
    sel = build_selection(df, "balanced", hours=0.6, valid_hours=0.1, seed=0)
    selected = sum(len(s) for s in sel.splits.values())
    dropped = sum(d["rows"] for d in sel.report["dropped"])
    assert selected + dropped == len(df)
    assert sum(d["seconds"] for d in sel.report["dropped"]) + sum(dur(s) for s in sel.splits.values()) \
        == pytest.approx(dur(df), abs=0.01)
    assert all(d["reason"] for d in sel.report["dropped"])


def test_splits_are_speaker_disjoint_and_test_speakers_stay_out():
    # c1_m1 is a test speaker who also has train rows: the corpus reuses him; he must go entirely.
    df = synth_table(split_of={"c1_f0": "valid", "c1_m0": "valid", "c1_m1": "test"})
    df.loc[df["id"].isin(["c1_m1_0", "c1_m1_1"]), "split"] = "train"
    sel = build_selection(df, "balanced", valid_hours=0.1, seed=0)
    tr, va = sel.splits["train"], sel.splits["valid"]
    assert not set(tr["speaker"]) & set(va["speaker"])
    assert "c1_m1" not in set(tr["speaker"]) | set(va["speaker"])
    assert {"held-out split ['test']", "speaker of a held-out split"} <= {d["reason"] for d in sel.report["dropped"]}
    # Valid: 0.1 h split by the share -> 3 minutes per gender, within one utterance.
    for g in ("F", "M"):
        assert 180 - df["duration"].max() < dur(va, g) <= 180 + 1e-6


def test_valid_is_upsampled_with_whole_training_speakers():
    # Only 2 s of labelled M valid speech; 0.1 h balanced needs 3 minutes of M.
    df = synth_table(split_of={"c1_f0": "valid"}, extra=[
        {"id": "vm_0", "audio": "vm_0.wav", "offset": 0.0, "duration": 2.0, "sample_rate": 16000,
         "speaker": "vm", "gender": "M", "corpus": "c1", "lang": "fr", "split": "valid", "text": "x"}])
    sel = build_selection(df, "balanced", valid_hours=0.1, seed=2)
    tr, va = sel.splits["train"], sel.splits["valid"]
    up = sel.report["valid_upsampled_from_train"]
    assert [u["gender"] for u in up] == ["M"] and up[0]["upsampled_speakers"]
    moved = {s for _, s in up[0]["upsampled_speakers"]}   # [corpus, speaker] pairs; one corpus here
    assert moved <= set(va["speaker"]) and not moved & set(tr["speaker"])
    assert dur(va, "M") == pytest.approx(180, abs=12)
    with pytest.raises(UserError, match="valid: asked for"):
        build_selection(df, "balanced", valid_hours=50)


def test_exclusions_by_id_and_speaker():
    df = synth_table()
    sel = build_selection(df, "any", exclude_ids=["c1_f1_0"], exclude_speakers=["c1_m2"], seed=0)
    tr = sel.splits["train"]
    assert "c1_f1_0" not in set(tr["id"]) and "c1_m2" not in set(tr["speaker"])
    assert len(tr) == len(df) - 1 - 40


def test_unknown_gender_dropped_unless_any():
    extra = [{"id": "u_0", "audio": "u.wav", "offset": 0.0, "duration": 3.0, "sample_rate": 16000,
              "speaker": "u", "gender": "U", "corpus": "c1", "lang": "fr", "split": "train", "text": "x"}]
    df = synth_table(extra=extra)
    assert "u_0" not in set(build_selection(df, "balanced").splits["train"]["id"])
    assert "u_0" in set(build_selection(df, "any").splits["train"]["id"])
    assert "u_0" not in set(build_selection(df, "any", exclude_unknown=True).splits["train"]["id"])


def test_mixed_gender_speaker_is_an_error_or_dropped():
    df = synth_table()
    df.loc[df["id"] == "c1_f2_3", "gender"] = "M"
    with pytest.raises(UserError) as e:
        build_selection(df, "balanced", source="t.tsv")
    line = int(df.index[df["speaker"] == "c1_f2"][0]) + 2
    assert f"t.tsv:{line}:" in str(e.value) and "c1_f2" in str(e.value) and "--drop-mixed-speakers" in str(e.value)
    sel = build_selection(df, "balanced", mixed_speakers="drop")
    assert "c1_f2" not in set(sel.splits["train"]["speaker"])
    assert any(d["reason"] == "speaker with both F and M rows" and d["rows"] == 40 for d in sel.report["dropped"])


def test_downsample_only_the_named_corpus_like_the_studys_epac():
    small = synth_table(n_f_spk=4, n_m_spk=2, utts=10, corpus="mls", seed=1)
    epac = synth_table(n_f_spk=1, n_m_spk=6, utts=30, corpus="epac", seed=2)
    df = pd.concat([small, epac], ignore_index=True)
    sel = build_selection(df, "balanced", downsample_corpora=["epac"], seed=0)
    tr = sel.splits["train"]
    assert set(tr.loc[tr["corpus"] == "mls", "id"]) == set(small["id"])          # kept whole
    assert len(tr[tr["corpus"] == "epac"]) < len(epac)
    f, m = dur(tr, "F"), dur(tr, "M")
    assert abs(f - m) / max(f, m) < 0.005
    # Not reachable by down-sampling EPAC alone: the error names the fixed corpora's hours.
    with pytest.raises(UserError, match="may not be down-sampled already hold"):
        build_selection(df, "balanced", hours_per_gender=dur(small, "M") / 3600 / 2, downsample_corpora=["epac"])


def test_corpus_cap_keeps_the_corpus_gender_mix():
    df = pd.concat([synth_table(corpus="a", seed=1), synth_table(corpus="b", seed=2)], ignore_index=True)
    sel = build_selection(df, "any", corpus_hours={"a": 0.2}, seed=0)
    a = sel.splits["train"][sel.splits["train"]["corpus"] == "a"]
    assert dur(a) <= 720 + 1e-6 and dur(a) > 700
    share_before = dur(df[df["corpus"] == "a"], "F") / dur(df[df["corpus"] == "a"])
    assert dur(a, "F") / dur(a) == pytest.approx(share_before, abs=0.02)
    assert dur(sel.splits["train"][sel.splits["train"]["corpus"] == "b"]) == pytest.approx(dur(df[df["corpus"] == "b"]))


def test_empty_selection_and_missing_gender_column_are_user_errors():
    df = synth_table(n_f_spk=0)
    with pytest.raises(UserError, match="selection is empty"):
        build_selection(df, "F")
    with pytest.raises(UserError, match="no 'gender' column"):
        build_selection(df.drop(columns=["gender"]), "balanced")


def test_train_splits_pick_the_pretraining_pool_and_valid_keeps_its_label():
    # A corpus with a pretraining split (as the built-in one): train comes only from it.
    split_of = {"c1_f0": "pretrain", "c1_f1": "pretrain", "c1_m0": "pretrain", "c1_m1": "pretrain",
                "c1_f2": "valid", "c1_m2": "valid", "c1_m3": "test"}
    df = synth_table(split_of=split_of)
    sel = build_selection(df, "M", train_splits=("pretrain",), seed=0)
    assert set(sel.splits["train"]["speaker"]) == {"c1_m0", "c1_m1"}
    assert set(sel.splits["valid"]["speaker"]) == {"c1_m2"}
    assert any(d["reason"].startswith("split not in train ['pretrain']") for d in sel.report["dropped"])


def test_speech_of_unknown_gender_is_reported_beside_the_female_share():
    """A set that keeps speakers of unknown gender (`--gender any --keep-unknown`, as LeBenchmark's 7K
    set does) reports F/(F+M) and the unknown part of all its speech, never U folded into F or M."""
    unknown = [{"id": f"u{k}", "audio": f"u{k}.wav", "offset": 0.0, "duration": 10.0, "sample_rate": 16000,
                "speaker": "c1_u0", "gender": "U", "corpus": "c1", "lang": "fr", "split": "train", "text": "x"}
               for k in range(30)]
    df = synth_table(extra=unknown)
    sel = build_selection(df, "any", exclude_unknown=False, seed=0)
    tr = sel.splits["train"]
    bal = sel.report["balance"]["train"]
    f, m, u = dur(tr, "F"), dur(tr, "M"), dur(tr, "U")
    assert u == 300.0 and bal["unknown_share"] == pytest.approx(u / (f + m + u), abs=1e-6)
    assert bal["female_share"] == pytest.approx(f / (f + m), abs=1e-6)
