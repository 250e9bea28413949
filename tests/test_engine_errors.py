"""Failures of the engines whose cause gendergap can know, said in one line with the fix:
fairseq's "The dataset is empty" (a split smaller than the xs preset's batch multiple), a
transcript too long for CTC in SpeechBrain, running out of memory on a batch size, and the
checkpoint a pretraining run without a valid split really wrote (checkpoint_last.pt)."""
from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

from corpora.base.errors import UserError
from gendergap.cli import main
from ssl_pretrain.registry import Registry

# --- fairseq ST: a split smaller than required_batch_size_multiple ------------------------------

@pytest.mark.slow
def test_st_on_five_utterances_with_xs_names_the_override_then_trains_with_it(tmp_path, capsys):
    from downstream_st.presets import load_preset
    from downstream_st.train import build_train_command, run_fairseq
    from st_helpers import tiny_wav2vec, toy_rows, write_toy_table, write_wavs_for

    rows = toy_rows((("train", 5, ("f1", "m1")), ("valid", 8, ("f2", "m2")), ("test", 4, ("f3", "m3"))))
    write_wavs_for(tmp_path, rows)
    table = write_toy_table(tmp_path, rows)
    model = tiny_wav2vec(tmp_path / "w2v")
    out = tmp_path / "st"
    train = ["st", "train", "--ckpt", str(model), "--layer", "1", "--train", str(table), "--train-split", "train",
             "--valid", str(table), "--valid-split", "valid", "--src", "fr", "--tgt", "en", "--out", str(out),
             "--feature-store", str(tmp_path / "store"), "--preset", "xs", "data.vocab_size=30", "max-epoch=1",
             "num-workers=0", "arch=s2t_transformer_xs", "encoder-layers=1", "decoder-layers=1"]
    assert main(train) == 2
    said = capsys.readouterr().err
    err = [x for x in said.splitlines() if x.startswith("gendergap: error:")]
    assert len(err) == 1 and "Traceback" not in said, said
    assert ("the train split's 5 utterance(s) fit in one batch" in err[0]
            and "required-batch-size-multiple (8)" in err[0])
    assert "-- add the override required-batch-size-multiple=1" in err[0]
    assert not (out / "train.log").exists()   # refused before fairseq started

    # what fairseq itself says on that data, translated: run its command past the pre-check
    save = tmp_path / "direct"
    cmd = build_train_command(out / "data", save, {**load_preset("xs")["train"], "max-epoch": 1, "num-workers": 0,
                                                    "encoder-layers": 1, "decoder-layers": 1, "cpu": True})
    with pytest.raises(UserError) as e:
        run_fairseq(cmd, tmp_path / "direct.log", threads=1)
    assert "The dataset is empty" in (tmp_path / "direct.log").read_text()          # fairseq's own words
    assert ("fairseq made no batch from a split" in e.value.message
            and "required-batch-size-multiple (8)" in e.value.message)
    assert e.value.fix.startswith("add the override required-batch-size-multiple=1")

    # the override it names: fairseq trains on the 5 utterances
    assert main(train + ["required-batch-size-multiple=1"]) == 0
    meta = json.loads((out / "st.json").read_text())
    assert meta["status"] == "done" and meta["data"]["rows"] == {"train": 5, "valid": 8}
    assert "| train | epoch 001" in (out / "train.log").read_text()


def test_batch_findings_follow_fairseqs_own_batching():
    from downstream_st.train import batch_findings
    xs = {"max-tokens": 40000}   # required-batch-size-multiple: fairseq's default, 8
    assert batch_findings({"train": [300] * 5}, xs)             # one batch of 5: dropped
    assert not batch_findings({"train": [300] * 8}, xs)         # one batch of 8: kept
    assert not batch_findings({"train": [300] * 12}, xs)        # 8 kept, the remainder 4 dropped
    assert not batch_findings({"train": [300] * 5}, {**xs, "required-batch-size-multiple": 1})
    long = batch_findings({"train": [300] * 8 + [50000]}, xs)
    assert len(long) == 1 and "50000 feature frames, more than max-tokens=40000" in long[0].message
    assert "max-tokens=50000" in long[0].fix
    assert not batch_findings({"train": [300] * 8, "valid": [300] * 8 + [50000]}, xs)  # valid: fairseq skips it


# --- SpeechBrain CTC: a transcript longer than its frames ---------------------------------------

@pytest.mark.slow
def test_a_transcript_too_long_for_ctc_is_named_and_left_out(tmp_path, capsys):
    from transformers import Wav2Vec2Model

    from asr_helpers import edit_csv, tiny_wav2vec2, write_corpus
    from downstream_asr.errors import ctc_min_frames
    from downstream_asr.text import encode, normalise_text

    torch.set_num_threads(1)
    data = write_corpus(tmp_path / "data")
    ssl = tiny_wav2vec2(tmp_path / "w2v")
    long_text = "la maison est belle et le chat dort dans le jardin " * 3
    train = edit_csv(data["train"], tmp_path / "train.csv", lambda d: d.assign(
        wrd=[long_text if i == 2 else w for i, w in enumerate(d["wrd"])]))
    uid = pd.read_csv(train)["ID"][2]
    out = tmp_path / "ft"
    rc = main(["asr", "finetune", "--ckpt", str(ssl), "--train", str(train), "--valid", str(data["valid"]),
               "--out", str(out), "--no-progress", "batch_seconds=3", "valid_batch_seconds=6", "number_of_epochs=1"])
    assert rc == 0
    said = [x for x in capsys.readouterr().err.splitlines() if f"utterance {uid}:" in x]
    assert len(said) == 1, said   # once, however many epochs or steps see it
    summary = json.loads((out / "train_summary.json").read_text())
    entry = summary["ctc_too_long"][uid]
    # the numbers: the labels of its normalised transcript (+ blanks between repeats), and the frames
    # the model's CNN gives its audio
    run = json.loads((out / "run.json").read_text())
    from downstream_asr.text import TextNorm, load_vocab
    vocab = load_vocab(out / "vocab.txt")
    labels = encode(normalise_text(long_text, TextNorm.from_dict(run["text_norm"])), vocab)
    assert entry["frames_needed"] == ctc_min_frames(labels) > len(long_text.split())
    samples = int(pd.read_csv(train)["stop"][2] - pd.read_csv(train)["start"][2])
    frames = int(Wav2Vec2Model.from_pretrained(ssl)._get_feat_extract_output_lengths(torch.tensor(samples)))
    assert abs(entry["frames"] - frames) <= 1 and entry["frames"] < entry["frames_needed"]
    assert f"needs {entry['frames_needed']} CTC frames" in said[0] and "drop it from the training CSV" in said[0]


def test_ctc_min_frames_counts_a_blank_between_repeats():
    from downstream_asr.errors import ctc_min_frames, too_long_for_ctc
    assert ctc_min_frames([1, 1, 2]) == 4 and ctc_min_frames([1, 2, 3]) == 3 and ctc_min_frames([]) == 0
    # torch agrees: 3 frames cannot align "aab" (infinite loss), 4 can
    logp = torch.randn(4, 1, 3).log_softmax(-1)
    target = torch.tensor([[1, 1, 2]])
    assert torch.isinf(torch.nn.functional.ctc_loss(logp[:3], target, [3], [3]))
    assert torch.isfinite(torch.nn.functional.ctc_loss(logp, target, [4], [3]))
    tokens = torch.tensor([[1, 1, 2], [1, 2, 0]])
    out = too_long_for_ctc(["a", "b"], tokens, torch.tensor([1.0, 2 / 3]), torch.zeros(2, 3, 5),
                           torch.tensor([1.0, 1.0]))
    assert out == [("a", 4, 3)]


# --- out of memory ------------------------------------------------------------------------------

def test_out_of_memory_names_the_batch_option():
    from downstream_asr.errors import batch_option, is_out_of_memory
    from downstream_st.train import explain_failure

    with pytest.raises(RuntimeError) as real:   # torch's own CPU allocator error (4 PiB)
        torch.empty(2 ** 50, dtype=torch.float32)
    assert is_out_of_memory(real.value) and "can't allocate memory" in str(real.value)
    with pytest.raises(UserError) as e:
        with batch_option("batch_seconds", 60):
            torch.empty(2 ** 50, dtype=torch.float32)
    assert str(e.value).count("\n") == 0
    assert e.value.message.startswith("out of memory during training with batch_seconds=60")
    assert e.value.fix.startswith("lower the batch: batch_seconds=30")
    with pytest.raises(ValueError):   # anything else passes through unchanged
        with batch_option("batch_seconds", 60):
            raise ValueError("not memory")
    said = explain_failure(f"Traceback ...\nRuntimeError: {real.value}\n", ["--max-tokens", "40000"])
    assert said is not None and "max-tokens=40000" in said.message and "max-tokens=20000" in said.fix


# --- the checkpoint a pretraining run really wrote ----------------------------------------------

@pytest.mark.slow
def test_ckpt_add_on_a_run_without_valid_split_registers_its_last_checkpoint(tmp_path, capsys):
    from ssl_helpers import write_wavs

    rows = write_wavs(tmp_path, n=8)
    manifest = tmp_path / "manifest"
    manifest.mkdir()
    (manifest / "train.tsv").write_text(f"{tmp_path}\n" + "".join(f"{r}\t{n}\n" for r, n in rows))  # no valid.tsv
    run = tmp_path / "ssl" / "F"
    assert main(["pretrain", "run", "--preset", "tiny", "--manifest", str(manifest), "--out", str(run), "--seed", "1",
                 "--threads", "1", "optimization.max_update=2"]) == 0
    said = capsys.readouterr().out
    ckpts = sorted(p.name for p in (run / "checkpoints").glob("*.pt"))
    assert "checkpoint_last.pt" in ckpts and "checkpoint_best.pt" not in ckpts, ckpts
    assert f"the checkpoint to register: {run / 'checkpoints' / 'checkpoint_last.pt'} (the last" in said, said

    registry = tmp_path / "ckpts.json"
    assert main(["ckpt", "--registry", str(registry), "add", "F", str(run), "--hours", "0.01"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"registering {run / 'checkpoints' / 'checkpoint_last.pt'} (the last: the run has no "
                      "checkpoint_best.pt (no valid split))"), out
    entry = Registry(registry).get("F")   # the path as resolved (stored relative to the registry's folder)
    assert entry["path"] == str((run / "checkpoints" / "checkpoint_last.pt").resolve()) and entry["updates"] == 2

    # with a best checkpoint, the best; a folder with neither is refused in one line
    (run / "checkpoints" / "checkpoint_best.pt").write_bytes((run / "checkpoints" / "checkpoint_last.pt").read_bytes())
    assert main(["ckpt", "--registry", str(registry), "add", "F2", str(run / "checkpoints")]) == 0
    assert "checkpoint_best.pt (the best by validation loss)" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["ckpt", "--registry", str(registry), "add", "X", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no checkpoint here" in err and "--out folder of `gendergap pretrain run`" in err


@pytest.mark.gpu
def test_a_real_cuda_out_of_memory_names_the_batch_option():
    from downstream_asr.errors import batch_option, is_out_of_memory

    with pytest.raises(torch.cuda.OutOfMemoryError) as real:   # 4 TiB on one GPU
        torch.empty(2 ** 40, dtype=torch.float32, device="cuda")
    assert is_out_of_memory(real.value)
    with pytest.raises(UserError) as e:
        with batch_option("batch_seconds", 120):
            torch.empty(2 ** 40, dtype=torch.float32, device="cuda")
    assert e.value.message.startswith("out of memory during training with batch_seconds=120 (CUDA out of memory")
    assert e.value.fix.startswith("lower the batch: batch_seconds=60") and "\n" not in str(e.value)
