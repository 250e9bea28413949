"""`gendergap asr ...`: train, decode, score per gender, store rows; frozen features; bad input."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from asr_helpers import edit_csv, one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from gendergap.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = ["--no-progress", "--bootstrap", "50", "batch_seconds=3", "valid_batch_seconds=6"]  # options, then KEY=VALUEs


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from ssl_pretrain.checkpoints import register_checkpoint
    from ssl_pretrain.registry import Registry
    root = tmp_path_factory.mktemp("asrcli")
    ssl = tiny_wav2vec2(root / "w2v")
    register_checkpoint(Registry(root / "ckpts.json"), "F-tiny", ssl, female_pct=100, male_pct=0, unknown_pct=0)
    return {"root": root, "ssl": ssl, "registry": root / "ckpts.json", **write_corpus(root / "data")}


def _scores(db):
    from analysis.store import ResultsStore
    with ResultsStore(db, readonly=True) as s:
        return s.scores()


def test_finetune_decode_and_store_rows(setup, tmp_path):
    db, out = tmp_path / "results.db", tmp_path / "ft"
    rc = main(["asr", "finetune", "--ckpt", "F-tiny", "--registry", str(setup["registry"]), "--train",
               str(setup["train"]), "--valid", str(setup["valid"]), "--test", str(setup["test"]), "--out", str(out),
               "--db", str(db), *FAST, "max_steps=2"])
    assert rc == 0
    rows = _scores(db)
    assert set(rows["task"]) == {"asr-e2e"} and set(rows["checkpoint"]) == {"F-tiny"}
    assert {"F", "M", "all"} <= set(rows["gender"]) and (rows["metric"] == "wer").all()
    assert rows.set_index("gender").loc["all", "n_utts"] == 4
    res = json.loads((out / "test.wer.json").read_text())
    assert res["signature"].startswith("wer|norm:none") and res["asr"]["text_norm_name"] == "lc-nopunct-apos-hyph"
    # decoding again with another test set (a character never seen in training) adds rows
    # ... and an empty transcript (kept: whatever the model outputs there counts as insertions)
    oov = edit_csv(setup["test"], tmp_path / "oov.csv", lambda d: d.assign(wrd=["", *(d["wrd"][1:] + " ñandú")]))
    rc = main(["asr", "decode", "--model", str(out), "--test", str(oov), "--db", str(db), "--bootstrap", "0"])
    assert rc == 0
    meta = json.loads((out / "oov.json").read_text())
    assert meta["oov"]["unknown_chars"] == {"ñ": 3, "ú": 3} and meta["oov"]["utts_with_unknown"] == 3
    assert set(_scores(db)["subset"]) == {"test", "oov"}
    ref = (out / "oov.ref.tsv").read_text(encoding="utf-8").splitlines()
    assert ref[0].endswith("\t") and all(r.endswith(" ñandú") for r in ref[1:])  # the reference keeps what was said


def test_frozen_all_layers_from_the_store_and_stored(setup, tmp_path):
    from safetensors.torch import load_file, save_file

    from ssl_pretrain.feature_store import COUNTERS
    db, out, store = tmp_path / "results.db", tmp_path / "fr", tmp_path / "store"
    args = ["asr", "frozen", "--ckpt", str(setup["ssl"]), "--layer", "all", "--train", str(setup["train"]),
            "--valid", str(setup["valid"]), "--test", str(setup["test"]), "--out", str(out), "--db", str(db),
            "--feature-store", str(store), *FAST, "hidden_size=32", "proj_dim=32"]
    before = COUNTERS["utterances"]
    assert main([*args, "max_steps=2"]) == 0
    assert COUNTERS["utterances"] - before == 16  # 8 train + 4 valid + 4 test, each extracted once
    rows = _scores(db)
    assert set(rows["task"]) == {"asr-frozen"} and {"F", "M", "all"} <= set(rows["gender"])
    run = json.loads((out / "run.json").read_text())
    assert run["runtime"]["device"] == "cpu" and run["runtime"]["precision"] == "fp32"  # --device auto, no CUDA here
    assert json.loads((out / "test.json").read_text())["features"]["entry"].startswith(str(store))
    shards = sorted(store.rglob("shard-*.zip"))
    assert shards and all(p.stat().st_size > 0 for p in shards)
    mtimes = {p: p.stat().st_mtime_ns for p in shards}
    before = COUNTERS["utterances"]
    assert main([*args, "max_steps=4"]) == 0  # resumes; features come from the store
    assert COUNTERS["utterances"] == before and {p: p.stat().st_mtime_ns for p in shards} == mtimes
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["optimizer_step"] == 4 and len(summary["layer_weights"]) == 3
    assert summary["layer_weights"] != [1 / 3] * 3  # the layer weights are learned
    # a retrained checkpoint under the same path (other weights): no silent mix with the old run
    weights = setup["ssl"] / "model.safetensors"
    saved = weights.read_bytes()
    try:
        state = load_file(weights)
        save_file({k: v + 0.01 if v.is_floating_point() else v for k, v in state.items()}, weights)
        assert main([*args, "max_steps=6"]) == 2
    finally:
        weights.write_bytes(saved)


def test_bad_input_fails_before_training(setup, tmp_path, capsys):
    table = pd.read_csv(setup["table"], sep="\t", dtype=str)
    small = tmp_path / "table.tsv"
    table[~table["id"].str.endswith("test01")].to_csv(small, sep="\t", index=False)
    out = tmp_path / "never"
    rc = main(["asr", "finetune", "--ckpt", str(setup["ssl"]), "--train", str(setup["train"]), "--valid",
               str(setup["valid"]), "--test", str(setup["test"]), "--table", str(small), "--out", str(out)])
    assert rc == 2 and not out.exists()
    assert "not in the utterance table" in capsys.readouterr().err
    rc = main(["asr", "finetune", "--ckpt", "nobody", "--registry", str(setup["registry"]), "--train",
               str(setup["train"]), "--valid", str(setup["valid"]), "--out", str(out)])
    assert rc == 2 and "no checkpoint named 'nobody'" in capsys.readouterr().err
    nogender = edit_csv(setup["test"], tmp_path / "ng.csv", lambda d: d.drop(columns=["gender"]))
    rc = main(["asr", "decode", "--model", str(out), "--test", str(nogender)])
    assert rc == 2 and "spk_id/gender" in capsys.readouterr().err


@pytest.mark.parametrize("recipe", ["finetune", "frozen"])
def test_bf16_autocast_trains_and_decodes_on_the_cpu(setup, tmp_path, recipe):
    """--precision bf16 runs SpeechBrain's own autocast on a CPU (fp32 weights): the run records it
    and training gives finite losses."""
    out = tmp_path / recipe
    options = ["--layer", "all", "--feature-store", str(tmp_path / "store")] if recipe == "frozen" else []
    sizes = ["hidden_size=32", "proj_dim=32"] if recipe == "frozen" else []
    assert main(["asr", recipe, "--ckpt", str(setup["ssl"]), "--train", str(setup["train"]), "--valid",
                 str(setup["valid"]), "--test", str(setup["test"]), "--out", str(out), "--device", "cpu",
                 "--precision", "bf16", *options, *FAST, "max_steps=2", *sizes]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["runtime"]["precision"] == "bf16" and run["runtime"]["device"] == "cpu"
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["optimizer_step"] == 2 and np.isfinite(summary["valid"]["loss"])
    assert json.loads((out / "test.json").read_text())["runtime"]["precision"] == "bf16"
    weights = next((out / "save").glob("CKPT*/" + ("model.ckpt" if recipe == "frozen" else "head.ckpt")))
    import torch
    state = torch.load(weights, weights_only=True)
    assert all(v.dtype != torch.bfloat16 for v in state.values() if torch.is_tensor(v))  # fp32 master weights
    # `asr decode` runs where the run trained unless told otherwise: --precision fp32 overrides its bf16
    assert main(["asr", "decode", "--model", str(out), "--test", str(setup["test"]), "--name", "again",
                 "--precision", "fp32", "--bootstrap", "0"]) == 0
    again = json.loads((out / "again.json").read_text())["runtime"]
    assert (again["device"], again["precision"]) == ("cpu", "fp32")


def test_decoding_a_corrupt_wav_is_one_line(setup, tmp_path, capsys):
    out = tmp_path / "ft"
    assert main(["asr", "finetune", "--ckpt", str(setup["ssl"]), "--train", str(setup["train"]), "--valid",
                 str(setup["valid"]), "--out", str(out), *FAST, "max_steps=1"]) == 0
    test = pd.read_csv(setup["test"])
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk" * 8)  # a RIFF header over garbage
    assert len(test) > 1
    edited = edit_csv(setup["test"], tmp_path / "t.csv", lambda d: d.assign(wav=[str(broken), *d["wav"][1:]]))
    capsys.readouterr()
    assert main(["asr", "decode", "--model", str(out), "--test", str(edited), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gendergap: error")]
    assert len(lines) == 1 and "cannot read the audio" in lines[0] and str(broken) in lines[0]
    assert "Traceback" not in err
