"""End-to-end CTC fine-tuning (SpeechBrain + a tiny random-init wav2vec 2.0) on CPU."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

from asr_helpers import edit_csv, one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from corpora.base.errors import UserError
from downstream_asr.finetune import decode_finetuned, train_finetune
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.model_choice import ModelChoice

pytestmark = pytest.mark.usefixtures("one_thread")
FAST = {"batch_seconds": 3, "valid_batch_seconds": 6}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("asr")
    return {"root": root, "ssl": ModelChoice.resolve(tiny_wav2vec2(root / "w2v")), **write_corpus(root / "data")}


def _params(brain):
    return {k: v.detach().clone() for k, v in brain.modules.state_dict().items()}


def test_two_separate_optimizers_each_with_its_lr(setup, tmp_path):
    from downstream_asr.decode import read_run
    from downstream_asr.finetune import build_brain
    from downstream_asr.text import load_vocab
    over = {**FAST, "max_steps": 1, "lr_head": 1e-2, "lr_wav2vec": 1e-4, "head_dropout": 0.0}
    out = tmp_path / "run"
    s = train_finetune(setup["ssl"], setup["train"], setup["valid"], out, progress=False, overrides=over)
    brain = s["brain"]
    head = brain.optimizers_dict["head"].param_groups
    w2v = brain.optimizers_dict["wav2vec"].param_groups
    ids_head = {id(p) for g in head for p in g["params"]}
    ids_w2v = {id(p) for g in w2v for p in g["params"]}
    assert ids_head and ids_w2v and not ids_head & ids_w2v
    assert ids_head == {id(p) for p in brain.modules.head.parameters()}
    # the CNN feature encoder is frozen by default: not optimised at all
    cnn = list(brain.modules.wav2vec2.model.feature_extractor.parameters())
    assert not {id(p) for p in cnn} & ids_w2v and not any(p.requires_grad for p in cnn)
    assert ids_w2v == {id(p) for p in brain.modules.wav2vec2.parameters()} - {id(p) for p in cnn}
    assert {g["lr"] for g in head} == {1e-2} and {g["lr"] for g in w2v} == {1e-4}
    # default head: 1024-d dense + LeakyReLU
    dense = brain.modules.head[0]
    assert isinstance(dense, torch.nn.Linear) and dense.out_features == 1024 and dense.in_features == 32
    assert isinstance(brain.modules.head[1], torch.nn.LeakyReLU)
    # Adam's first step moves every parameter with a non-zero gradient by ~lr: the two
    # modules must move by their own learning rates (1e-2 vs 1e-4), a 100x difference.
    init, _ = build_brain(out, read_run(out), load_vocab(out / "vocab.txt"))  # same seed: the initial weights
    before, after = _params(init), _params(brain)
    def max_move(prefix):
        return max((after[k] - before[k]).abs().max().item() for k in before
                   if k.startswith(prefix) and "feature_extractor" not in k)
    assert max_move("head.") == pytest.approx(1e-2, rel=0.05)
    assert max_move("wav2vec2.") == pytest.approx(1e-4, rel=0.05)
    assert all(torch.equal(before[k], after[k]) for k in before if "feature_extractor" in k)


def test_resume_equals_uninterrupted_run_then_decode_and_store(setup, tmp_path):
    over = {**FAST, "lr_head": 5e-3, "lr_wav2vec": 1e-4, "warmup_steps": 4, "freeze_encoder_steps": 2}
    full = train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "full", progress=False,
                          overrides={**over, "max_steps": 6})
    first = train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "cut", progress=False,
                           overrides={**over, "max_steps": 3})
    assert first["optimizer_step"] == 3 and first["stopped_by_budget"]
    # running the same budget again changes nothing (no step, no end-of-epoch checkpoint)
    again = train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "cut", progress=False,
                           overrides={**over, "max_steps": 3})
    assert again["optimizer_step"] == 3 and len(list((tmp_path / "cut" / "save").glob("CKPT*"))) == 1
    second = train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "cut", progress=False,
                            overrides={**over, "max_steps": 6})
    assert second["optimizer_step"] == 6 == full["optimizer_step"]
    a, b = _params(full["brain"]), _params(second["brain"])
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)
    # the counters (and so the warm-up) were restored, not restarted
    lrs = {k: o.param_groups[0]["lr"] for k, o in second["brain"].optimizers_dict.items()}
    assert lrs["head"] == pytest.approx(5e-3) and lrs["wav2vec"] == pytest.approx(1e-4 * 4 / 4)

    meta = decode_finetuned(tmp_path / "cut", setup["test"])
    assert {"CER", "WER", "optimizer_step"} <= set(meta["checkpoint"])  # picked by validation CER (select_by)
    hyp = pd.read_csv(meta["hyps"], sep="\t", header=None, dtype=str, keep_default_na=False)
    ref = pd.read_csv(meta["refs"], sep="\t", header=None, dtype=str, keep_default_na=False)
    test = pd.read_csv(setup["test"], dtype=str)
    assert hyp[0].tolist() == ref[0].tolist() == test["ID"].tolist()
    assert ref[1].tolist()[0] == test["wrd"][0].lower().rstrip(".")  # normalised like the training text


def test_encoder_frozen_for_first_steps(setup, tmp_path):
    s = train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "run", progress=False,
                       overrides={**FAST, "max_steps": 2, "freeze_encoder_steps": 5})
    from downstream_asr.decode import read_run
    from downstream_asr.finetune import build_brain
    from downstream_asr.text import load_vocab
    init, _ = build_brain(tmp_path / "run", read_run(tmp_path / "run"), load_vocab(tmp_path / "run" / "vocab.txt"))
    before, after = _params(init), _params(s["brain"])
    assert all(torch.equal(before[k], after[k]) for k in before if k.startswith("wav2vec2."))
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("head."))
    assert all(p.grad is None for p in s["brain"].modules.wav2vec2.parameters())


def test_bad_input(setup, tmp_path):
    bad = edit_csv(setup["train"], tmp_path / "empty.csv", lambda d: d.assign(wrd=["", *d["wrd"][1:]]))
    with pytest.raises(UserError, match=r"empty transcript") as e:
        train_finetune(setup["ssl"], bad, setup["valid"], tmp_path / "r1", progress=False, overrides={"max_steps": 1})
    assert e.value.line == 2 and e.value.path.endswith("empty.csv")
    punct = edit_csv(setup["train"], tmp_path / "punct.csv", lambda d: d.assign(wrd=["?!", *d["wrd"][1:]]))
    with pytest.raises(UserError, match=r"empty transcript"):
        train_finetune(setup["ssl"], punct, setup["valid"], tmp_path / "r2", progress=False, overrides={"max_steps": 1})
    with pytest.raises(UserError, match="config.json"):
        train_finetune(ModelChoice.resolve(tmp_path), setup["train"], setup["valid"], tmp_path / "r3", progress=False)
    nowav = edit_csv(setup["train"], tmp_path / "nowav.csv", lambda d: d.assign(wav=[*d["wav"][:-1], "/nope.wav"]))
    with pytest.raises(UserError, match="audio file not found") as e:
        train_finetune(setup["ssl"], nowav, setup["valid"], tmp_path / "r4", progress=False)
    assert e.value.line == 9


def test_learning_rate_anneals_linearly_to_the_final_ratio(setup, tmp_path):
    from downstream_asr.common import anneal_factor
    assert [anneal_factor(s, 4, 0.2) for s in (0, 2, 4, 9)] == pytest.approx([1.0, 0.6, 0.2, 0.2])
    assert anneal_factor(3, 0, 0.2) == 1.0  # no step budget: nothing to anneal towards
    over = {**FAST, "lr_head": 5e-3, "lr_wav2vec": 1e-4, "max_steps": 4, "lr_final_ratio": 0.2}
    s = train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "run", progress=False, overrides=over)
    # the 4th (last) update ran at step index 3: 1 - 0.8 * 3/4 = 0.4 of each optimizer's own lr
    lrs = {k: o.param_groups[0]["lr"] for k, o in s["brain"].optimizers_dict.items()}
    assert lrs["head"] == pytest.approx(5e-3 * 0.4) and lrs["wav2vec"] == pytest.approx(1e-4 * 0.4)
    with pytest.raises(UserError, match=r"lr_final_ratio must be a number in \(0, 1\]"):
        train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "bad", progress=False,
                       overrides={**over, "lr_final_ratio": -0.5})


def _checkpoints(save_dir):
    """{checkpoint dir: its meta} for every checkpoint SpeechBrain would list."""
    import yaml
    return {m.parent: yaml.safe_load(m.read_text()) for m in sorted(save_dir.glob("CKPT*/CKPT.yaml"))}


def test_sigkill_mid_epoch_resumes_from_the_intra_epoch_checkpoint(tmp_path, caplog):
    """A real kill: `gendergap asr finetune` checkpointing every 4 batches runs in a subprocess and
    gets SIGKILL once an intra-epoch checkpoint exists. Rerunning resumes at that checkpoint's
    optimizer step and data position (not at 0, not at an epoch start) and ends with the weights
    of a run that was never killed. A checkpoint the kill cut short (CKPT.yaml written, files
    missing) is set aside instead of breaking the resume."""
    import logging
    import os
    import shutil
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = tmp_path / "data"
    # 40 one-utterance batches an epoch: the kill lands long before the epoch ends
    corpus = write_corpus(root, {"train": 40, "valid": 2})
    ssl = CheckpointRef.resolve(tiny_wav2vec2(tmp_path / "w2v"))
    over = {"batch_seconds": 0.75, "valid_batch_seconds": 6, "lr_head": 5e-3, "lr_wav2vec": 1e-4,
            "ckpt_interval_steps": 4, "number_of_epochs": 5}
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "gendergap.cli", "asr", "finetune", "--ckpt", str(ssl.path), "--train",
           str(corpus["train"]), "--valid", str(corpus["valid"]), "--out", str(killed), "--device", "cpu",
           "--no-progress", *[f"{k}={v}" for k, v in over.items()]]
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(cmd, cwd=repo, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while not any((c / "complete.ckpt").exists() for c in killed.glob("save/CKPT*")):
            assert proc.poll() is None, f"training ended before a checkpoint: {proc.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "no intra-epoch checkpoint after 240 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    ckpts = {c: m for c, m in _checkpoints(killed / "save").items() if (c / "complete.ckpt").exists()}
    latest, meta = max(ckpts.items(), key=lambda cm: cm[1]["unixtime"])
    step = meta["optimizer_step"]
    position = (latest / "dataloader-TRAIN.ckpt").read_text().strip()  # SaveableDataLoader: batches yielded
    assert meta["brain_intra_epoch_ckpt"] and not meta["end-of-epoch"]
    assert step >= 4 and step % 4 == 0 and 0 < step < 40  # inside the first epoch of 40 batches
    assert 0 < int(position) < 40  # the data loader's place in the epoch is saved too
    # what a kill in the middle of a save leaves: a newer checkpoint without its last file
    torn = latest.with_name(latest.name + "-torn")
    shutil.copytree(latest, torn)
    (torn / "complete.ckpt").unlink()
    (torn / "head.ckpt").write_bytes(b"\x80")  # a cut-short torch.save
    (torn / "CKPT.yaml").write_text((torn / "CKPT.yaml").read_text().replace(str(meta["unixtime"]),
                                                                             str(meta["unixtime"] + 1)))

    target = step + 3
    with caplog.at_level(logging.INFO, logger="downstream_asr.common"):
        resumed = train_finetune(ModelChoice(ssl), corpus["train"], corpus["valid"], killed, progress=False,
                                 overrides={**over, "max_steps": target})
    # mid-epoch: no epoch complete yet, and the saved number of batches into the first one
    assert f"resumed at optimizer step {step} (0 epoch(s) complete, {position} batch(es) into the next)" in caplog.text
    assert "was not completely written" in caplog.text and (killed / "save" / f"INCOMPLETE-{torn.name}").is_dir()
    assert resumed["optimizer_step"] == target
    full = train_finetune(ModelChoice(ssl), corpus["train"], corpus["valid"], tmp_path / "never-killed", progress=False,
                          overrides={**over, "max_steps": target})
    a, b = _params(full["brain"]), _params(resumed["brain"])
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-5, atol=1e-6, msg=k)


def test_run_option_errors_are_user_errors(setup, tmp_path):
    with pytest.raises(UserError, match="both set"):
        train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "r1", progress=False,
                       overrides={**FAST, "ckpt_interval_steps": 2}, ckpt_interval_minutes=5)
    with pytest.raises(UserError, match="whole number >= 1"):
        train_finetune(setup["ssl"], setup["train"], setup["valid"], tmp_path / "r2", progress=False,
                       overrides=FAST, grad_accum=0)
