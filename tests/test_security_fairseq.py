"""Issue 29, fairseq side: nothing a user is handed runs code through a fairseq subprocess.

Each test makes the hostile file itself: a checkpoint whose pickle runs ``touch MARKER`` when it is
unpickled, or a Python package whose import does the same. The marker must never appear, and the
command must stop with exit 2 and one line naming the file. One tiny ST run (2 fairseq updates)
is trained once for the module and copied where a test needs to spoil it.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from corpora.base.errors import UserError
from gendergap.cli import main
from st_helpers import tiny_wav2vec, toy_rows, write_toy_table, write_wavs_for


class Payload:
    """Unpickling it runs a shell command (what a crafted checkpoint does)."""
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def hostile_checkpoint(path: Path, marker: Path) -> Path:
    torch.save({"model": {"w": torch.zeros(2)}, "args": None, "cfg": Payload(marker)}, path)
    return path


def hostile_package(root: Path, marker: Path) -> Path:
    """A folder fairseq's --user-dir / common.user_dir would import."""
    pkg = root / "evil"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    return pkg


def one_line(capsys) -> str:
    """The error, in one line (the progress log lines before it aside), no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if " INFO " not in line and " WARNING " not in line]
    assert len(lines) == 1 and lines[0].startswith("gendergap: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """A study-like dir holding the SSL model, the feature store and one trained ST run (decoded
    once, so the store holds the test features too); the table and audio lie outside it."""
    root = tmp_path_factory.mktemp("sec")
    rows = toy_rows()
    write_wavs_for(root / "corpus", rows)
    table = write_toy_table(root / "corpus", rows)
    sdir = root / "study"
    tiny_wav2vec(sdir / "w2v")
    train = ["st", "train", "--ckpt", str(sdir / "w2v"), "--layer", "1", "--train", str(table), "--train-split",
             "train", "--valid", str(table), "--valid-split", "valid", "--src", "fr", "--tgt", "en",
             "--out", str(sdir / "st" / "w2v.fr-en"), "--feature-store", str(sdir / "features"), "--preset", "tiny",
             "data.vocab_size=40", "max-update=2", "save-interval-updates=1", "average_last=1"]
    assert main(train) == 0
    run = sdir / "st" / "w2v.fr-en"
    decode = ["st", "decode", "--test", str(table), "--test-split", "test", "--no-score"]
    assert main(decode + ["--model", str(run), "--out", str(root / "first.hyp")]) == 0
    return {"root": root, "dir": sdir, "run": run, "table": table, "train": train, "decode": decode,
            "hyps": (root / "first.hyp").read_text()}


def copy_run(study, tmp_path) -> Path:
    dest = tmp_path / "run"
    shutil.copytree(study["run"], dest)
    return dest


def test_st_json_names_its_inputs_relative_to_the_run(study):
    meta = json.loads((study["run"] / "st.json").read_text())
    assert meta["checkpoint"] == "checkpoint_avg.pt"
    assert meta["feature_store"] == "../../features" and meta["ssl_checkpoint"] == "../../w2v"
    assert meta["inputs"]["feature_store"]["abs"] == str(study["dir"] / "features")
    assert len(meta["ssl_sha256"]) == 64


def test_decode_refuses_a_hostile_averaged_checkpoint(study, tmp_path, capsys):
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    hostile_checkpoint(run / "checkpoint_avg.pt", marker)
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert f"{run / 'checkpoint_avg.pt'}" in err and "posix.system" in err and "--trust-checkpoint" in err
    assert not marker.exists()
    # the check is what stopped it: trusting the file (the user's own choice) lets fairseq unpickle it
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "t.hyp"), "--trust-checkpoint"]) == 2
    assert marker.exists()



def test_decode_refuses_a_checkpoint_of_another_shape_before_fairseq_runs(study, tmp_path, capsys):
    """A plain tensors file where the averaged model should be: fairseq's own load failed in its log
    (KeyError 'best_loss'); it is one line naming the file, before any process starts."""
    run = copy_run(study, tmp_path)
    torch.save({"weights": torch.zeros(2)}, run / "checkpoint_avg.pt")
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert f"{run / 'checkpoint_avg.pt'}" in err and "is not a fairseq checkpoint" in err
    assert not (tmp_path / "h.hyp.work" / "generate.log").exists()


def test_train_resume_refuses_a_hostile_last_checkpoint(study, tmp_path, capsys):
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    hostile_checkpoint(run / "checkpoints" / "checkpoint_last.pt", marker)
    args = [a if a != str(study["run"]) else str(run) for a in study["train"]]
    capsys.readouterr()
    assert main(args + ["max-update=3"]) == 2
    err = one_line(capsys)
    assert str(run / "checkpoints" / "checkpoint_last.pt") in err and "posix.system" in err
    assert not marker.exists()


@pytest.mark.parametrize("override", ["user-dir={pkg}", "restore-file={ckpt}", "decode.user-dir={pkg}",
                                      "finetune-from-model={ckpt}"])
def test_st_overrides_that_load_code_or_files_are_refused(study, tmp_path, capsys, override):
    marker = tmp_path / "MARKER"
    item = override.format(pkg=hostile_package(tmp_path, marker), ckpt=hostile_checkpoint(tmp_path / "e.pt", marker))
    args = [a if a != str(study["run"]) else str(tmp_path / "new") for a in study["train"]]
    capsys.readouterr()
    assert main(args + [item]) == 2
    err = one_line(capsys)
    assert item in err and "--trust-checkpoint" in err
    assert not marker.exists() and not (tmp_path / "new").exists()


def test_st_json_decode_flags_are_an_allowlist(study, tmp_path, capsys):
    run, marker = copy_run(study, tmp_path), tmp_path / "MARKER"
    meta = json.loads((run / "st.json").read_text())
    meta["preset"]["decode"]["user-dir"] = str(hostile_package(tmp_path, marker))
    (run / "st.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert str(run / "st.json") in err and "--user-dir" in err
    assert not marker.exists()


def test_study_config_st_overrides_are_refused_at_their_line(tmp_path):
    from gendergap.config import load_config
    marker = tmp_path / "MARKER"
    pkg = hostile_package(tmp_path, marker)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: t\ncorpus: {synth: tiny}\npretraining: {corpus: synth-fr, sets: {female: F, male: M}}\n"
                   "checkpoints:\n  F-tiny: {shipped: tiny-female, pretrained_on: female}\ntasks:\n"
                   f"  st: {{corpus: synth-fr, pairs: [fr-en], overrides: [max-update=5, user-dir={pkg}]}}\n")
    with pytest.raises(UserError) as e:
        load_config(cfg)
    assert str(e.value).startswith(f"{cfg}:7: ") and "--user-dir" in str(e.value), str(e.value)
    assert not marker.exists()


def test_copied_study_decodes_from_the_copy_alone(study, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(study["dir"], copy)
    moved_away = tmp_path / "gone"
    os.rename(study["dir"], moved_away)   # the original is gone (put back after: the module shares it)
    try:
        out = tmp_path / "c.hyp"
        assert main(study["decode"] + ["--model", str(copy / "st" / "w2v.fr-en"), "--out", str(out)]) == 0
        assert out.read_text() == study["hyps"]
        log = (tmp_path / "c.hyp.work" / "generate.log").read_text()
        assert str(copy / "st" / "w2v.fr-en" / "checkpoint_avg.pt") in log and str(study["dir"]) not in log
        assert not study["dir"].exists()   # nothing was recreated at the original's place
    finally:
        os.rename(moved_away, study["dir"])


def test_a_checkpoint_name_meaning_another_model_is_refused(study, tmp_path, capsys):
    run = copy_run(study, tmp_path)
    meta = json.loads((run / "st.json").read_text())
    meta["ssl_sha256"] = "0" * 64   # as if ../../w2v had since been replaced by another model
    (run / "st.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main(study["decode"] + ["--model", str(run), "--out", str(tmp_path / "h.hyp")]) == 2
    err = one_line(capsys)
    assert "000000000000" in err and "trained on features" in err


# --- pretraining -----------------------------------------------------------------------------------

@pytest.fixture()
def manifest(tmp_path):
    from ssl_helpers import write_manifest, write_wavs
    return write_manifest(tmp_path, write_wavs(tmp_path, n=4), tmp_path / "m")


@pytest.mark.parametrize("override", ["common.user_dir={pkg}", "checkpoint.restore_file={ckpt}",
                                      "+checkpoint.finetune_from_model={ckpt}", "model.w2v_path={ckpt}",
                                      "hydra.callbacks.x._target_=os.system", "--config-dir={pkg}"])
def test_pretrain_overrides_that_load_code_or_files_are_refused(tmp_path, manifest, capsys, override):
    marker = tmp_path / "MARKER"
    item = override.format(pkg=hostile_package(tmp_path, marker), ckpt=hostile_checkpoint(tmp_path / "e.pt", marker))
    capsys.readouterr()
    assert main(["pretrain", "run", "--manifest", str(manifest), "--out", str(tmp_path / "o"), "--", item]) == 2
    err = one_line(capsys)
    assert item in err and "--trust-checkpoint" in err
    assert not marker.exists() and not (tmp_path / "o" / "train.log").exists()


def test_pretrain_refuses_a_hostile_resume_checkpoint_before_fairseq_starts(tmp_path, manifest, capsys):
    marker = tmp_path / "MARKER"
    (tmp_path / "o" / "checkpoints").mkdir(parents=True)
    hostile_checkpoint(tmp_path / "o" / "checkpoints" / "checkpoint_last.pt", marker)
    capsys.readouterr()
    assert main(["pretrain", "run", "--manifest", str(manifest), "--out", str(tmp_path / "o"),
                 "optimization.max_update=1"]) == 2
    err = one_line(capsys)
    assert str(tmp_path / "o" / "checkpoints" / "checkpoint_last.pt") in err and "posix.system" in err
    assert not marker.exists() and not (tmp_path / "o" / "train.log").exists()


def _state(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"cfg": {"model": {"_name": "wav2vec2"}}, "model": {"w": torch.randn(3, generator=g)}}


def test_init_from_always_wins_over_a_stale_init_pt(tmp_path, capsys):
    from ssl_pretrain.run import warm_start
    out, marker = tmp_path / "o", tmp_path / "MARKER"
    out.mkdir()
    hostile_checkpoint(out / "init.pt", marker)   # a stale (here crafted) init.pt, no record of its source
    warm_start(_state(1), out, source="A.safetensors")
    assert torch.equal(torch.load(out / "init.pt", weights_only=True)["model"]["w"], _state(1)["model"]["w"])
    warm_start(_state(2), out, source="B.safetensors")   # a failed run from A, then --init-from B
    assert torch.equal(torch.load(out / "init.pt", weights_only=True)["model"]["w"], _state(2)["model"]["w"])
    assert json.loads((out / "init.json").read_text())["source"] == "B.safetensors"
    assert not marker.exists()
    # once B's run has a checkpoint_last.pt, starting it over from A is refused, naming both
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "checkpoint_last.pt").write_bytes(b"x")
    with pytest.raises(UserError) as e:
        warm_start(_state(1), out, source="A.safetensors")
    b_sha = json.loads((out / "init.json").read_text())["sha256"][:12]
    assert "B.safetensors" in str(e.value) and b_sha in str(e.value) and "A.safetensors" in str(e.value)


def test_fairseq_runs_weights_only_unless_trusted(tmp_path, monkeypatch):
    """The env var that switches torch's check off reaches a fairseq process only with trust."""
    import sys
    from ssl_pretrain.run import start_fairseq
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")   # even when the caller's shell sets it
    probe = [sys.executable, "-c", "import os; print('VAR', os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD'))"]
    for trust, want in ((False, "VAR None"), (True, "VAR 1")):
        log = tmp_path / f"{trust}.log"
        assert start_fairseq(probe, log, trust=trust).wait() == 0
        assert want in log.read_text()
