"""downstream_st without fairseq runs: presets, tables -> s2t data, the frame filter, bad input,
features from the store, device flags, checkpoint averaging, the detokenisation guard."""
from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from corpora.base.errors import UserError
from corpora.table import read_table
from corpora.utterances import UtteranceTable
from downstream_st.average import average_checkpoints, epoch_checkpoints, last_checkpoints
from downstream_st.data import attach_features, build_s2t_dir, filter_frames, read_feature_index, require_target
from downstream_st.decode import build_generate_command, parse_generate_output, write_hypotheses
from downstream_st.fairseq_flags import as_flags
from downstream_st.prepare import FeatureSource, prepare_rows
from downstream_st.presets import apply_overrides, load_preset, on_device
from ssl_pretrain.model_choice import ModelChoice
from st_helpers import tiny_wav2vec, toy_rows, write_npy_features, write_toy_table, write_wavs_for


# --- presets ------------------------------------------------------------------------------
def test_xs_preset_is_the_study_model():
    xs = load_preset("xs")
    t = xs["train"]
    assert t["arch"] == "s2t_transformer_xs" and t["optimizer"] == "adam" and float(t["lr"]) == 2e-3
    assert t["max-epoch"] == 500 and t["keep-last-epochs"] == 10 and xs["average_last"] == 10
    assert t["criterion"] == "label_smoothed_cross_entropy"
    assert xs["data"]["max_frames"] == 3000 and xs["decode"]["beam"] == 5


def test_overrides_and_flags():
    p = apply_overrides(load_preset("tiny"), ["max_epoch=7", "lr=1e-3", "data.vocab_size=50", "average_last=3",
                                              "decode.beam=2", "cpu=false"])
    assert p["train"]["max-epoch"] == 7 and p["train"]["lr"] == 1e-3
    assert p["data"]["vocab_size"] == 50 and p["average_last"] == 3 and p["decode"]["beam"] == 2
    flags = as_flags(p["train"])
    assert "--cpu" not in flags                      # false drops a bare flag
    assert "--max-epoch=7" in flags                  # a flag and its value are one word
    assert "--report-accuracy" in flags and all(word.startswith("--") for word in flags)
    with pytest.raises(UserError, match="key=value"):
        apply_overrides(p, ["max-epoch"])
    with pytest.raises(UserError, match="unknown data option"):
        apply_overrides(p, ["data.vocab=5"])
    with pytest.raises(UserError, match="no ST preset"):
        load_preset("huge")


# --- tables and features ------------------------------------------------------------------
@pytest.fixture
def toy(tmp_path):
    rows = toy_rows()
    table = write_toy_table(tmp_path, rows)
    index = write_npy_features(tmp_path, rows)
    return tmp_path, table, index, rows


def test_build_s2t_dir_any_direction(toy, tmp_path):
    root, table, index, rows = toy
    src = FeatureSource(index=str(index))
    for tgt in ("en", "es"):
        train = prepare_rows(table, src, split="train", src="fr", tgt=tgt)
        valid = prepare_rows(table, src, split="valid", src="fr", tgt=tgt)
        out = tmp_path / f"data-{tgt}"
        summary = build_s2t_dir({"train": train, "valid": valid}, out, tgt_lang=tgt,
                                data_opts={**load_preset("tiny")["data"], "vocab_size": 40}, feature_dim=8)
        cfg = yaml.safe_load((out / "config.yaml").read_text())
        assert cfg["input_feat_per_channel"] == 8
        tsv = pd.read_csv(out / "train.tsv", sep="\t", quoting=csv.QUOTE_NONE, keep_default_na=False)
        assert list(tsv.columns) == ["id", "audio", "n_frames", "tgt_text", "speaker", "tgt_lang"]
        assert (tsv["tgt_lang"] == tgt).all() and summary["rows"] == {"train": 16, "valid": 4}
        first = [r for r in rows if r["id"] == tsv["id"][0]][0]
        assert tsv["tgt_text"][0] == first[f"tgt_text_{tgt}"]
        assert tsv["n_frames"][0] == np.load(tsv["audio"][0]).shape[0] == 10 * first["n_words"]


def test_frame_filter_removes_over_3000(toy):
    root, table, index, rows = toy
    df = prepare_rows(table, FeatureSource(index=str(index)), split="train", src="fr", tgt="en")
    df.loc[0, "n_frames"], df.loc[1, "n_frames"], df.loc[2, "n_frames"] = 3001, 3000, 4
    kept, dropped = filter_frames(df, 3000, 5)
    assert dropped == 2 and len(kept) == len(df) - 2
    assert 3000 in set(kept["n_frames"]) and 3001 not in set(kept["n_frames"]) and 4 not in set(kept["n_frames"])
    with pytest.raises(UserError, match="train set is empty after removing utterances over 10"):
        filter_frames(df, 10, 5, "train", table)


def test_missing_target_language(toy):
    root, table, index, rows = toy
    df = UtteranceTable.load(table).with_lines().select(split="train", strict=True).rows
    with pytest.raises(UserError, match="tgt_text_pt") as e:
        require_target(df, "pt", table)
    assert e.value.line == 1 and str(table) in str(e.value) and "en, es" in e.value.fix
    df.loc[3, "tgt_text_en"] = " "
    with pytest.raises(UserError, match="empty tgt_text_en") as e:
        require_target(df, "en", table)
    assert e.value.line == 5                        # header + 3 rows before it
    with pytest.raises(UserError, match="split='dev'.*'train'"):   # what the table has
        UtteranceTable.load(table).select(split="dev", strict=True)


def test_missing_and_wrong_dimension_features(toy):
    root, table, index, rows = toy
    df = UtteranceTable.load(table).with_lines().select(split="train", strict=True).rows
    feats = read_feature_index(index)
    victim = root / "feats" / f"{df['id'][2]}.npy"
    victim.unlink()
    with pytest.raises(UserError, match="missing") as e:
        attach_features(df, feats, index)
    assert e.value.path == str(index) and e.value.line == 4
    np.save(victim, np.zeros((30, 5), np.float32))
    with pytest.raises(UserError, match="dimension 5, expected 8"):
        attach_features(df, feats, index)
    with pytest.raises(UserError, match="dimension 8, expected 16"):   # valid vs the train set's D
        attach_features(df.iloc[:2], feats, index, expected_dim=16)
    with pytest.raises(UserError, match="no features"):
        attach_features(df, feats[feats["id"] != df["id"][0]], index)


@pytest.mark.parametrize("col, value", [("dim", "1e12"), ("n_frames", "nan"), ("dim", "0"), ("n_frames", "2.5")])
def test_a_feature_index_s_sizes_are_bounded(toy, tmp_path, col, value):
    """The index's n_frames and dim size arrays: 1e12 or NaN was an int64 wrap or a traceback, now one line
    naming the index's line (issue 60)."""
    _, _, index, _ = toy
    lines = index.read_text().splitlines()
    header = lines[0].split("\t")
    row = lines[2].split("\t")
    row[header.index(col)] = value
    edited = tmp_path / "features.tsv"
    edited.write_text("\n".join([lines[0], lines[1], "\t".join(row), *lines[3:]]) + "\n")
    with pytest.raises(UserError, match=col) as e:
        read_feature_index(edited)
    assert e.value.line == 3 and str(edited) in str(e.value)


def test_st_rows_point_into_the_feature_store(tmp_path):
    from fairseq.data.audio.audio_utils import get_features_or_waveform

    from ssl_pretrain.feature_store import COUNTERS
    rows = toy_rows(splits=(("train", 4, ("f1", "m1")),))
    write_wavs_for(tmp_path, rows)
    table = write_toy_table(tmp_path, rows)
    model = tiny_wav2vec(tmp_path / "w2v")
    src = FeatureSource(ModelChoice.resolve(str(model)), layer=1, store=str(tmp_path / "store"))
    before = COUNTERS["utterances"]
    df = prepare_rows(table, src, src="fr", tgt="en", progress=False)
    assert COUNTERS["utterances"] - before == 4 and df.attrs["feature_dim"] == 32
    # fairseq reads the shard member in place ("shard.zip:offset:length"): nothing was copied
    path = df["feature_path"][0]
    assert ".zip:" in path and path.startswith(str(tmp_path / "store"))
    x = get_features_or_waveform(path)
    assert x.dtype == np.float16 and x.shape == (df["n_frames"][0], 32)
    assert abs(x.shape[0] - rows[0]["duration"] / 0.02) <= 1.5  # 20 ms frames
    # a second language pair (another target) reads the same entry: no forward pass
    again = prepare_rows(table, src, src="fr", tgt=None, progress=False)
    assert COUNTERS["utterances"] - before == 4 and list(again["feature_path"]) == list(df["feature_path"])
    # a changed segment is another row: extracted anew, into another entry
    t2 = read_table(table)
    t2.loc[0, "duration"] = 0.4
    short = tmp_path / "short.tsv"
    t2.to_csv(short, sep="\t", index=False)
    changed = prepare_rows(short, src, src="fr", tgt=None, progress=False)
    assert COUNTERS["utterances"] - before == 8 and changed["n_frames"][0] == 19


def test_fairseq_runs_where_the_device_says():
    tiny = load_preset("tiny")
    cpu = on_device(tiny, "cpu", "fp32")
    assert cpu["train"]["cpu"] is True and cpu["train"]["fp16"] is False and cpu["gpu"] is None
    gpu = on_device(tiny, "cuda:1", "fp16")
    assert gpu["train"]["cpu"] is False and gpu["decode"]["cpu"] is False and gpu["gpu"] == "1"
    assert "--fp16" in as_flags(gpu["train"]) and "--cpu" not in as_flags(gpu["train"])
    # fairseq-generate --fp16 halves the model, not the fp32 features it reads: decoding stays fp32
    assert "--fp16" not in as_flags(gpu["decode"])
    assert apply_overrides(tiny, ["decode.fp16=true"])["decode"]["fp16"] is True   # even when asked for
    assert "--fp16" not in as_flags(on_device(apply_overrides(tiny, ["decode.fp16=true"]), "cuda", "fp16")["decode"])
    with pytest.raises(UserError, match="implies --tpu"):
        on_device(tiny, "cpu", "bf16")


# --- checkpoint averaging -----------------------------------------------------------------
def test_average_of_the_last_n_checkpoints(tmp_path):
    torch.manual_seed(0)
    states = {}
    for epoch in range(1, 13):          # 12 epochs: numeric order matters (checkpoint10 after checkpoint9)
        model = {"w": torch.randn(3, 4), "b": torch.randn(4).half(), "steps": torch.tensor([epoch % 1 + 7])}
        states[epoch] = model
        torch.save({"model": model, "cfg": {"epoch": epoch}, "last_optimizer_state": {"big": 1}},
                   tmp_path / f"checkpoint{epoch}.pt")
    torch.save({"model": states[12]}, tmp_path / "checkpoint_last.pt")
    assert [p.name for p in epoch_checkpoints(tmp_path)][-3:] == ["checkpoint10.pt", "checkpoint11.pt",
                                                                   "checkpoint12.pt"]
    paths = last_checkpoints(tmp_path, 10)
    assert [p.name for p in paths] == [f"checkpoint{e}.pt" for e in range(3, 13)]
    out = average_checkpoints(paths, tmp_path / "avg.pt")
    avg = torch.load(out, weights_only=False)
    want_w = torch.stack([states[e]["w"] for e in range(3, 13)]).mean(0)
    want_b = torch.stack([states[e]["b"].double() for e in range(3, 13)]).mean(0).half()
    assert torch.allclose(avg["model"]["w"], want_w, atol=1e-6)
    assert avg["model"]["b"].dtype == torch.float16 and torch.equal(avg["model"]["b"], want_b)
    assert torch.equal(avg["model"]["steps"], torch.tensor([7]))
    assert avg["cfg"] == {"epoch": 12} and avg["last_optimizer_state"] is None
    assert not torch.allclose(avg["model"]["w"], states[12]["w"])
    with pytest.raises(UserError, match="no numbered checkpoints"):
        last_checkpoints(tmp_path / "nothing", 10)
    # a run stopped by its time budget before its first numbered save: checkpoint_last alone
    (tmp_path / "short").mkdir()
    torch.save({"model": states[1]}, tmp_path / "short" / "checkpoint_last.pt")
    assert [p.name for p in last_checkpoints(tmp_path / "short", 4)] == ["checkpoint_last.pt"]


# --- the detokenisation guard -------------------------------------------------------------
def test_pieces_are_never_written_as_hypotheses(tmp_path):
    with pytest.raises(UserError, match="sentencepiece marker"):
        write_hypotheses({"a": "▁the ▁cat ▁s leeps"}, tmp_path / "h.tsv")
    assert not (tmp_path / "h.tsv").exists()
    write_hypotheses({"a": "the cat sleeps", "b": ""}, tmp_path / "h.tsv")
    assert (tmp_path / "h.tsv").read_text() == "a\tthe cat sleeps\nb\t\n"
    for flag in ("post-process", "remove_bpe"):
        with pytest.raises(UserError, match="detokenise a second time"):
            build_generate_command(tmp_path, "test", tmp_path / "m.pt", tmp_path / "r",
                                   {"beam": 5, flag: "sentencepiece"})


def test_generate_output_maps_rows_to_ids(tmp_path):
    out = tmp_path / "generate-test.txt"
    out.write_text("T-1\tB\nH-1\t-0.2\t▁b ▁x\nD-1\t-0.2\tb x\nD-0\t-0.1\ta\n")
    assert list(parse_generate_output(out, ["u0", "u1"]).items()) == [("u0", "a"), ("u1", "b x")]
    with pytest.raises(UserError, match="no hypothesis for 1"):
        parse_generate_output(out, ["u0", "u1", "u2"])


def test_model_dir_refuses_other_data_under_existing_checkpoints(toy, tmp_path):
    from corpora.base.atomic import write_json
    from downstream_st.train import prepare_data

    root, table, index, rows = toy
    src = FeatureSource(index=str(index))
    train = prepare_rows(table, src, split="train", src="fr", tgt="en")
    valid = prepare_rows(table, src, split="valid", src="fr", tgt="en")
    out = tmp_path / "model"
    opts = {**load_preset("tiny")["data"], "vocab_size": 40}
    data = prepare_data(train, valid, out, tgt_lang="en", data_opts=opts, feature_dim=8)
    write_json(out / "st.json", {"data": data})
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "checkpoint1.pt").write_bytes(b"")
    mtime = (out / "data" / "train.tsv").stat().st_mtime_ns
    assert prepare_data(train, valid, out, tgt_lang="en", data_opts=opts,
                        feature_dim=8)["fingerprint"] == data["fingerprint"]
    assert (out / "data" / "train.tsv").stat().st_mtime_ns == mtime          # unchanged inputs: not rebuilt
    with pytest.raises(UserError, match="trained on other data"):
        prepare_data(train.iloc[1:], valid, out, tgt_lang="en", data_opts=opts, feature_dim=8)
