"""Gender probes: the Appendix B schedule, the attention probe vs pooling on synthetic
sequences, the shuffled-label control, splits, store rows, correlation, and `probe run`
end to end on tiny wavs through a tiny random-init transformers Wav2Vec2Model."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import soundfile as sf
import torch

from analysis.probing import (
    Plateau,
    Recipe,
    attention_profile,
    probe_splits,
    probe_table,
    rows_for_store,
    run_baseline,
    score,
    standardise,
    train_attention_probe,
)
from analysis.probing.run import ProbeResult
from corpora.base.errors import UserError
from corpora.feature_request import Layers


@pytest.fixture(autouse=True)
def one_thread():
    # The probes are tiny: one intra-op thread is several times faster than two on a busy 2-core box.
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


# --- the recipe ------------------------------------------------------------------------------
def test_lr_halves_after_3_flat_epochs_and_training_stops_after_20_without_improvement():
    p = Plateau(Recipe(lr=1e-4))
    out = [p.step(v) for v in (1.0, 0.9, 0.95, 0.95, 0.95)]
    assert [o[0] for o in out] == [True, True, False, False, False]
    assert [o[1] for o in out] == [1e-4, 1e-4, 1e-4, 1e-4, 5e-5]  # halved at the 3rd epoch without a decrease
    assert not any(o[2] for o in out)
    # a tiny decrease (< 1e-5) resets the halving counter but is no improvement for stopping
    improved, lr, stop = p.step(0.9 - 5e-6)
    assert (improved, lr, stop) == (False, 5e-5, False)
    lrs, stops = [], []
    for _ in range(18):
        _, lr, stop = p.step(0.95)
        lrs.append(lr)
        stops.append(stop)
        if stop:
            break
    # 20 epochs since the last improvement (epoch 2) are reached at epoch 22 = the 16th of these
    assert stops.index(True) == 15 and p.epochs_no_improve == 20
    assert lrs[2] == 2.5e-5 and lrs[5] == 1.25e-5  # every 3 more flat epochs halve again
    # a real improvement resets the stopping counter
    q = Plateau(Recipe(stop_patience=3))
    assert [q.step(v)[2] for v in (1.0, 1.0, 1.0, 0.5, 1.0, 1.0, 1.0)] == [False, False, False, False, False, False,
                                                                          True]


def test_max_epochs_caps_training():
    p = Plateau(Recipe(max_epochs=4))
    assert [p.step(1.0 / (i + 1))[2] for i in range(4)] == [False, False, False, True]


# --- probes on synthetic sequences -------------------------------------------------------------
def spike_data(n: int, seed: int, dim: int = 8):
    """Noise sequences of 20-40 frames; ONE frame at a random position carries a marker (dim 0)
    and the class (dim 1: +4 for F, -4 for M). Pooling dilutes it, attention can find it."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    seqs = []
    for label in y:
        x = rng.standard_normal((int(rng.integers(20, 40)), dim)).astype(np.float32)
        t = rng.integers(0, len(x))
        x[t, 0] += 6.0
        x[t, 1] += 4.0 if label == 0 else -4.0
        seqs.append(x)
    return seqs, y


@pytest.fixture(scope="module")
def spikes():
    (tr, ytr), (va, yva), (te, yte) = spike_data(200, 0), spike_data(64, 1), spike_data(256, 2)
    tr, va, te = standardise(tr, va, te)
    return (tr, ytr), (va, yva), (te, yte)


# lr 3e-3 instead of the paper's 1e-4 so this converges in ~100 epochs; the schedule is the paper's
FAST = Recipe(lr=3e-3, max_epochs=100)


def test_attention_probe_finds_a_one_frame_cue_that_mean_pooling_dilutes(spikes):
    train, valid, test = spikes
    r = train_attention_probe(train, valid, test, seed=0, recipe=FAST)
    att = score(test[1], r.test_pred)["f1_macro"]
    mean = score(test[1], run_baseline("mean", train, valid, test, seed=0)[1])["f1_macro"]
    assert att >= 90.0, att
    assert mean <= att - 10.0, (mean, att)
    assert r.history[0]["valid_loss"] > min(h["valid_loss"] for h in r.history)
    assert 1 <= r.best_epoch <= len(r.history)
    # the same seed gives the same probe
    again = train_attention_probe(train, valid, test, seed=0, recipe=Recipe(lr=3e-3, max_epochs=3))
    twice = train_attention_probe(train, valid, test, seed=0, recipe=Recipe(lr=3e-3, max_epochs=3))
    assert np.array_equal(again.test_pred, twice.test_pred)
    assert [h["valid_loss"] for h in again.history] == [h["valid_loss"] for h in twice.history]


def test_shuffled_labels_stay_near_chance(spikes):
    train, valid, test = spikes
    rng = np.random.default_rng(1)
    r = train_attention_probe((train[0], rng.permutation(train[1])), (valid[0], rng.permutation(valid[1])),
                              test, seed=0, recipe=FAST)
    f1 = score(test[1], r.test_pred)["f1_macro"]
    assert abs(f1 - 50.0) < 15.0, f1


def test_attention_profile_resamples_to_100_points_and_shows_where_weight_is():
    first = [np.r_[1.0, np.zeros(n - 1)] for n in (10, 37, 64)]
    prof = attention_profile(first)
    assert prof.shape == (100,) and math.isclose(prof.sum(), 1.0)
    assert prof.argmax() == 0 and prof[50:].max() < 1e-9
    flat = attention_profile([np.full(n, 1.0 / n) for n in (5, 50)])
    assert np.allclose(flat, 0.01)


def test_position_and_max_baselines_read_the_right_frames():
    from analysis.probing import pool
    seqs = [np.arange(10, dtype=np.float32)[:, None] * [1.0, -1.0]]
    assert pool(seqs, "pos0")[0, 0] == 0 and pool(seqs, "pos100")[0, 0] == 9 and pool(seqs, "pos50")[0, 0] == 5
    assert pool(seqs, "max")[0].tolist() == [9.0, 0.0] and pool(seqs, "mean")[0, 0] == 4.5


# --- splits ------------------------------------------------------------------------------------
def small_table(test_genders=("F", "M"), n=6):
    rows = []
    for split, genders in (("train", ("F", "M", "F", "M")), ("valid", ("F", "M")), ("test", test_genders)):
        for k, g in enumerate(genders):
            spk = f"{split}{g}{k}"
            # more F than M utterances in train: the split must come out balanced
            for j in range(n + (3 if g == "F" and split == "train" else 0)):
                rows.append({"id": f"{spk}-{j:02d}", "speaker": spk, "gender": g, "split": split,
                             "audio": f"wav/{spk}-{j:02d}.wav", "offset": 0.0, "duration": 0.5,
                             "sample_rate": 16000, "corpus": "tones", "lang": "xx", "text": ""})
    rows.append({**rows[0], "id": "unknown-1", "speaker": "u1", "gender": "U"})
    return pd.DataFrame(rows)


def test_splits_are_balanced_speaker_disjoint_and_seeded():
    df = small_table()
    s = probe_splits(df, seed=0)
    for name, part in s.items():
        counts = part["gender"].value_counts()
        assert counts["F"] == counts["M"] and set(counts.index) == {"F", "M"}, name
    assert len(s["train"]) == 24 and "unknown-1" not in set(s["train"]["id"])
    spk = [set(s[k]["speaker"]) for k in ("train", "valid", "test")]
    assert not (spk[0] & spk[1] or spk[0] & spk[2] or spk[1] & spk[2])
    assert probe_splits(df, seed=0)["train"]["id"].tolist() == s["train"]["id"].tolist()
    assert probe_splits(df, seed=1)["train"]["id"].tolist() != s["train"]["id"].tolist()
    assert len(probe_splits(df, seed=0, max_utts={"train": 10})["train"]) == 10


def test_split_errors_name_the_problem():
    with pytest.raises(UserError, match="test split .* only F"):
        probe_splits(small_table(test_genders=("F", "F")))
    shared = small_table()
    shared.loc[shared["split"] == "valid", "speaker"] = shared.loc[shared["split"] == "valid", "gender"].map(
        {"F": "trainF0", "M": "trainM1"})
    with pytest.raises(UserError, match="speaker-disjoint|both the train and the valid"):
        probe_splits(shared)
    with pytest.raises(UserError, match="out of range.*0..2"):
        Layers.parse("1,5").resolve(3)
    assert Layers.parse("all").resolve(3) == (0, 1, 2) and Layers.parse("last").resolve(3) == (2,)
    assert Layers.parse("2,0").resolve(3) == (0, 2)


# --- store rows and correlation ----------------------------------------------------------------
def _fake_result(layer, probe, f1):
    # a real ProbeResult with chosen numbers: the store/correlation code is what is tested here
    return ProbeResult(layer, probe, {"f1_macro": f1, "accuracy": f1, "recall": {"F": f1 + 1, "M": f1 - 1}},
                       f1, {"train": 10, "valid": 4, "test": 8})


def test_rows_round_trip_through_the_store_and_correlate(tmp_path):
    from analysis.probing.figures import correlate, correlation_points
    from analysis.store import ResultsStore
    from gendergap.cli import main
    db = tmp_path / "results.db"
    f1s = {"F": 95.0, "M": 70.0, "B": 85.0, "R": 60.0}
    acc = {"F": 90.0, "M": 55.0, "B": 80.0, "R": 52.0}
    with ResultsStore(db) as store:
        for ck in f1s:
            run = store.start_run("probe", {"ck": ck})
            results = [_fake_result(0, "attention", 50.0), _fake_result(2, "attention", f1s[ck]),
                       _fake_result(2, "mean", 10.0)]
            store.add_scores(run, rows_for_store(results, ck, seed=0), finish=True)
            run = store.start_run("score-mustshe", {"ck": ck})
            store.add_scores(run, [{"checkpoint": ck, "task": "mustshe", "lang_pair": "en-fr", "gender": "all",
                                    "metric": "accuracy", "value": acc[ck]}], finish=True)
        t = probe_table(store.scores())
    assert len(t) == 4 * 3 * 4
    row = t[(t["checkpoint"] == "F") & (t["layer"] == 2) & (t["probe"] == "attention") & (t["gender"] == "F")]
    assert row["measure"].tolist() == ["recall"] and row["value"].tolist() == [96.0]
    with ResultsStore(db, readonly=True) as store:
        pts = correlation_points(store.scores(), layer="last")
    assert sorted(pts["probe_f1"]) == sorted(f1s.values())
    res = correlate(pts)
    r = np.corrcoef(list(f1s.values()), list(acc.values()))[0, 1]
    assert math.isclose(res["pearson_r"], r, rel_tol=1e-9) and math.isclose(res["r2"], r * r, rel_tol=1e-9)
    assert 0 < res["p_value"] < 0.05
    assert main(["probe", "correlate", "--db", str(db), "--out", str(tmp_path / "corr")]) == 0
    assert (tmp_path / "corr" / "correlation.png").stat().st_size > 1000
    with pytest.raises(UserError, match="at least 3 points"):
        correlate(pts.iloc[:2])


# --- end to end through the CLI --------------------------------------------------------------------
def write_tone_corpus(root):
    """Tiny wavs: F speakers as higher-pitched tones (190-260 Hz) than M (85-130 Hz), plus noise."""
    df = small_table(n=4)
    df = df[df["gender"] != "U"].copy()
    rng = np.random.default_rng(0)
    (root / "wav").mkdir(parents=True)
    f0_of = {spk: (rng.uniform(190, 260) if spk[-2] == "F" else rng.uniform(85, 130)) for spk in df["speaker"]}
    for _, r in df.iterrows():
        t = np.arange(8000) / 16000
        f0 = f0_of[r["speaker"]] * (1 + 0.05 * rng.standard_normal())
        x = 0.3 * np.sin(2 * np.pi * f0 * t) + 0.15 * np.sin(4 * np.pi * f0 * t) + 0.02 * rng.standard_normal(len(t))
        sf.write(root / r["audio"], x.astype(np.float32), 16000, subtype="PCM_16")
    from corpora.table import new_table, write_table
    return write_table(new_table(df.to_dict("records")), root / "utterances.tsv")


def tiny_wav2vec2(path):
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    torch.manual_seed(123)  # not the probe seed: the --random-init twin (seed 0) must differ from it
    cfg = Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16), conv_stride=(10, 8), conv_kernel=(10, 8), num_feat_extract_layers=2,
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, mask_time_prob=0.0)
    Wav2Vec2Model(cfg).save_pretrained(path)
    return path


@pytest.mark.slow
def test_probe_run_end_to_end_on_tiny_wavs(tmp_path, capsys):
    from analysis.store import ResultsStore
    from gendergap.cli import main
    table = write_tone_corpus(tmp_path / "corpus")
    model = tiny_wav2vec2(tmp_path / "w2v")
    db, out = tmp_path / "results.db", tmp_path / "probes"
    fstore = tmp_path / "store"
    argv = ["-q", "probe", "run", "--ckpt", str(model), "--name", "tiny", "--layers", "0,2", "--table", str(table),
            "--out", str(out), "--db", str(db), "--probes", "attention,mean,positions", "--control",
            "--max-epochs", "30", "--feature-store", str(fstore)]
    assert main(argv) == 0
    with ResultsStore(db, readonly=True) as store:
        t = probe_table(store.scores())
        runs = store.runs()
    assert set(t["checkpoint"]) == {"tiny", "tiny+random-init"} and len(runs) == 2
    probes = {"attention", "mean"} | {f"pos{p}" for p in (0, 25, 50, 75, 100)}
    assert set(t["probe"]) == probes | {p + "+shuffled" for p in probes}
    assert set(t["layer"]) == {0, 2}
    assert len(t) == 2 * 2 * len(probes) * 2 * 4  # models x layers x probes x (control) x 4 rows
    f1 = t[t["measure"] == "f1_macro"]["value"]
    assert f1.between(0, 100).all()
    assert (out / "f1_by_layer.png").stat().st_size > 1000 and (out / "attention_profile.png").stat().st_size > 1000
    # the random-init twin really has other weights: its features differ
    from corpora.utterances import UtteranceTable
    from ssl_pretrain.checkpoints import CheckpointRef
    from ssl_pretrain.feature_store import COUNTERS, FeatureStore, SSLExtractor
    rows = UtteranceTable.load(table).audio_rows()
    rows = rows[rows["id"] == "trainF0-00"]
    ref = CheckpointRef.resolve(model, name="tiny")
    a = FeatureStore(fstore).view(SSLExtractor(ref), rows, "all", progress=False).get("trainF0-00")
    b = FeatureStore(fstore).view(SSLExtractor(ref.twin(0)), rows, "all", progress=False).get("trainF0-00")
    assert a.shape == b.shape == (3, a.shape[1], 32) and not np.allclose(a[2], b[2])
    # a re-run reuses features and results and adds no rows
    capsys.readouterr()
    before = COUNTERS["utterances"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "already probed" in said and COUNTERS["utterances"] == before
    with ResultsStore(db, readonly=True) as store:
        assert len(store.scores()) == len(t) and len(store.runs()) == 2


def test_probe_run_bad_input_is_a_one_line_error(tmp_path, capsys):
    from corpora.table import new_table, write_table
    from gendergap.cli import main
    model = tiny_wav2vec2(tmp_path / "w2v")
    table = write_table(new_table(small_table(test_genders=("M", "M")).to_dict("records")), tmp_path / "t.tsv")
    assert main(["probe", "run", "--ckpt", str(model), "--table", str(table), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "t.tsv: the test split (test rows) has only M speakers" in err and "--" in err
    good = write_tone_corpus(tmp_path / "corpus")
    assert main(["probe", "run", "--ckpt", str(model), "--table", str(good), "--out", str(tmp_path / "o"),
                 "--layers", "0,7"]) == 2
    err = capsys.readouterr().err
    assert "layer 7 is out of range" in err and "0..2" in err
    assert main(["probe", "run", "--ckpt", str(model), "--table", str(good), "--out", str(tmp_path / "o"),
                 "--probes", "attention,median"]) == 2
    assert "unknown probe 'median'" in capsys.readouterr().err
