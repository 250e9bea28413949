"""Issue 29, YAML and ASR run directories: nothing a user is handed runs code.

Each test writes the hostile file itself and asserts that the marker file its payload would
create does not appear, and that the command ends in one line with exit 2:
- a study config: YAML bombs (billion laughs, a recursive anchor, a tag on a list), refused
  quickly; `trust_checkpoints:` (a file cannot vouch for itself: the flag is the command line's);
  a task's `hparams:` file with HyperPyYAML `!apply:os.system` (read as plain data);
- an ASR run directory: its own hparams.yaml with `!apply:os.system` (never evaluated: the model is
  rebuilt from the package's template), a SpeechBrain checkpoint (save/CKPT*/model.ckpt)
  carrying a pickle payload (loaded with the allowlist loader, even with
  TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 set);
- and a copied run directory decodes its own model after the original is deleted.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from asr_helpers import one_thread, tiny_wav2vec2, write_corpus  # noqa: F401 (fixture)
from gendergap.cli import main

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--no-progress", "--bootstrap", "0", "batch_seconds=3", "valid_batch_seconds=6", "hidden_size=32",
        "proj_dim=32"]


def one_line(capsys) -> str:
    """The error: one line, last, no traceback (after whatever progress log the run printed first)."""
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("gendergap: error: ")]
    assert len(errors) == 1 and err[-1] == errors[0] and not any("Traceback" in line for line in err), err
    return errors[0]


def evil_yaml(marker: Path) -> str:
    """HyperPyYAML that runs a shell command when it is evaluated."""
    return f"lr: 1.0e-3\n__evil: !apply:os.system ['touch {marker}']\n"


# --------------------------------------------------------------------------- study configs

def _bombs() -> dict[str, str]:
    laughs = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    laughs += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return {"billion laughs": "name: bomb\n" + "\n".join(laughs) + "\n",
            "recursive anchor": "name: loop\nselections: &a {x: *a}\n",
            "python tag on a list": "name: tag\nseed: !!python/tuple [1, 2]\n",
            "python object tag": "name: obj\nexecutor: !!python/object/apply:os.system {args: [ls]}\n"}


@pytest.mark.parametrize("kind", list(_bombs()))
def test_yaml_bombs_are_refused_quickly_in_one_line(tmp_path, capsys, kind):
    cfg = tmp_path / "bomb.yaml"
    cfg.write_text(_bombs()[kind])
    t0 = time.monotonic()
    rc = main(["sweep", "--config", str(cfg), "--dry-run"])
    elapsed = time.monotonic() - t0
    line = one_line(capsys)
    assert rc == 2 and elapsed < 5, (rc, elapsed)
    assert f"{cfg}:" in line and "--" in line   # file:line: what -- fix
    assert {"billion laughs": "expands to more than", "recursive anchor": "used inside itself",
            "python tag on a list": "!!python/tuple", "python object tag": "python/object"}[kind] in line


def _study(tmp_path: Path, extra: str = "", hparams: str | None = None) -> Path:
    """configs/mini.yaml, copied, with an asr-frozen task's `hparams:` and ``extra`` top-level keys."""
    text = (ROOT / "configs" / "mini.yaml").read_text()
    lines = text.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("  asr-frozen:"))
    if hparams:
        lines.insert(at + 1, f"    hparams: {hparams}\n")
    text = "".join(lines)
    cfg = tmp_path / "study.yaml"
    cfg.write_text(text + extra)
    return cfg


def test_trust_checkpoints_in_a_config_is_refused_naming_the_flag(tmp_path, capsys):
    cfg = _study(tmp_path, "trust_checkpoints: true\n")
    assert main(["sweep", "--config", str(cfg), "--dry-run"]) == 2
    line = one_line(capsys)
    assert f"{cfg}:{len(cfg.read_text().splitlines())}:" in line and "--trust-checkpoint" in line


def test_the_trust_flag_comes_from_the_command_line(tmp_path):
    from gendergap.cmd_sweep import load
    cfg = _study(tmp_path)
    for flag in (False, True):
        _, _, jobs = load(argparse.Namespace(config=str(cfg), out=str(tmp_path / "o"), only=None,
                                             trust_checkpoint=flag))
        loaders = [j for j in jobs if j.kind in ("asr-e2e", "asr-frozen", "st", "probes", "features", "checkpoints")]
        assert loaders and all(j.trust is flag for j in loaders)


def test_a_config_hparams_file_is_plain_data(tmp_path, capsys):
    marker = tmp_path / "pwned"
    (tmp_path / "evil.yaml").write_text(evil_yaml(marker))
    cfg = _study(tmp_path, hparams="evil.yaml")
    # checked before any job runs (sweep --dry-run reads it as safe YAML): one line, its file and line
    assert main(["sweep", "--config", str(cfg), "--dry-run", "--only", "asr-frozen"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and f"{tmp_path / 'evil.yaml'}:2" in err[-1] and "apply:os.system" in err[-1], err
    assert not marker.exists()
    # a plain file is accepted, and a key the template holds an object under is refused
    from downstream_asr.rundir import read_hparams_file
    (tmp_path / "ok.yaml").write_text("lr: 1.0e-3\ntext_norm: {lowercase: false}\n")
    assert read_hparams_file(tmp_path / "ok.yaml", "frozen") == {"lr": 1e-3, "text_norm": {"lowercase": False}}
    (tmp_path / "obj.yaml").write_text("lr: 1.0e-3\ncheckpointer: x\n")
    from corpora.base.errors import UserError
    with pytest.raises(UserError, match="obj.yaml:2: hyper-parameter 'checkpointer' is not a plain value"):
        read_hparams_file(tmp_path / "obj.yaml", "frozen")


# --------------------------------------------------------------------------- ASR run directories

@pytest.fixture(scope="module")
def trained(tmp_path_factory, one_thread):  # noqa: F811 (the fixture)
    """A tiny frozen-feature ASR run (features in the run's own store), decoded once."""
    root = tmp_path_factory.mktemp("secasr")
    ssl = tiny_wav2vec2(root / "w2v")
    data = write_corpus(root / "data")
    run = root / "runs" / "frozen"
    assert main(["asr", "frozen", "--ckpt", str(ssl), "--layer", "all", "--train", str(data["train"]), "--valid",
                 str(data["valid"]), "--test", str(data["test"]), "--out", str(run), "--feature-store",
                 str(run / "features"), *FAST, "max_steps=3"]) == 0
    return {"root": root, "run": run, "data": data, "ssl": ssl}


def _copy(trained, tmp_path, name="copy") -> Path:
    dst = tmp_path / name
    shutil.copytree(trained["run"], dst)
    return dst


def _decode(run: Path, test, *extra) -> int:
    return main(["asr", "decode", "--model", str(run), "--test", str(test), "--bootstrap", "0", *extra])


def test_a_run_dirs_hparams_yaml_is_never_evaluated(trained, tmp_path, capsys):
    marker = tmp_path / "pwned"
    # a run written by this version records its template: a hparams.yaml dropped in is not read
    copy = _copy(trained, tmp_path)
    (copy / "hparams.yaml").write_text(evil_yaml(marker))
    assert _decode(copy, trained["data"]["test"]) == 0
    assert not marker.exists()
    # an older run directory (no template recorded) whose hparams.yaml is not the package's: refused
    run = json.loads((copy / "run.json").read_text())
    del run["hparams"]
    (copy / "run.json").write_text(json.dumps(run))
    capsys.readouterr()
    assert _decode(copy, trained["data"]["test"]) == 2
    line = one_line(capsys)
    assert str(copy / "hparams.yaml") in line and "HyperPyYAML" in line
    assert not marker.exists()
    # ... while one identical to the package's template decodes as before
    shutil.copyfile(ROOT / "downstream_asr" / "hparams" / "frozen_ctc.yaml", copy / "hparams.yaml")
    assert _decode(copy, trained["data"]["test"]) == 0


def test_run_json_overrides_cannot_name_objects(trained, tmp_path, capsys):
    copy = _copy(trained, tmp_path)
    run = json.loads((copy / "run.json").read_text())
    run["overrides"]["checkpointer"] = {"checkpoints_dir": "/tmp"}
    (copy / "run.json").write_text(json.dumps(run))
    assert _decode(copy, trained["data"]["test"]) == 2
    assert "'checkpointer' is not a plain value" in one_line(capsys)


def test_a_pickle_payload_in_a_speechbrain_checkpoint_is_refused(trained, tmp_path, capsys, monkeypatch):
    import torch

    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return os.system, (f"touch {marker}",)

    # the way a user may run torch (and the way SpeechBrain's own hook would then unpickle it all)
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    copy = _copy(trained, tmp_path)
    (ckpt,) = [p for p in copy.glob("save/CKPT*/model.ckpt")]
    state = torch.load(ckpt, weights_only=True)
    torch.save({**state, "extra": Payload()}, ckpt)
    assert _decode(copy, trained["data"]["test"]) == 2
    line = one_line(capsys)
    assert str(ckpt) in line and "posix.system" in line and "--trust-checkpoint" in line
    assert not marker.exists()
    # a genuine file of another shape: one line too, not a traceback
    torch.save({"weights": torch.zeros(2)}, ckpt)
    assert _decode(copy, trained["data"]["test"]) == 2
    assert str(ckpt) in one_line(capsys)


@pytest.mark.parametrize("meta, says", [
    ("end-of-epoch: true\nunixtime: !!python/tuple [1, 2]\n", "tag !!python/tuple"),
    ("end-of-epoch: true\nx: !!python/object/apply:os.system [ls]\n", "python/object/apply:os.system"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    ("- just\n- a list\n", "not a SpeechBrain checkpoint meta file"),
    ("end-of-epoch: true\nunixtime: .nan\n", "not a SpeechBrain checkpoint meta file"),
], ids=["python-tuple", "python-object", "deep", "a-list", "nan-time"])
def test_a_crafted_checkpoint_meta_file_is_one_line(trained, tmp_path, capsys, meta, says):
    """save/CKPT*/CKPT.yaml, which SpeechBrain reads to choose the checkpoint: read by the boundary's
    strict YAML reader, so a tag or a deep file is one line naming it (decode, and the export alike)."""
    copy = _copy(trained, tmp_path)
    (ckpt_yaml,) = copy.glob("save/CKPT*/CKPT.yaml")
    ckpt_yaml.write_text(meta)
    assert _decode(copy, trained["data"]["test"]) == 2
    line = one_line(capsys)
    assert str(ckpt_yaml) in line and says in line, line


def test_a_copied_run_decodes_its_own_model_after_the_original_is_deleted(trained, tmp_path, capsys):
    original = trained["root"] / "runs" / "moved"
    shutil.copytree(trained["run"], original)   # a run of its own to delete (the fixture's stays)
    test = trained["data"]["test"]
    assert _decode(original, test, "--name", "before") == 0
    before = (original / "before.hyp.tsv").read_text()
    copy = tmp_path / "elsewhere" / "deeper" / "run"
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    run_json = (copy / "run.json").read_text()
    assert str(original) not in run_json and str(trained["run"]) not in run_json   # nothing points into a run dir
    assert _decode(copy, test, "--name", "after") == 0
    assert (copy / "after.hyp.tsv").read_text() == before
    meta = json.loads((copy / "after.json").read_text())
    assert meta["checkpoint"]["checkpoint"].startswith(str(copy / "save"))
    assert meta["features"]["entry"].startswith(str(copy / "features"))   # its own feature store
    # the SSL checkpoint (outside the run) with other contents: refused in one line, by hash
    weights = trained["ssl"] / "model.safetensors"
    saved = weights.read_bytes()
    try:
        from safetensors.torch import load_file, save_file
        save_file({k: v + 0.01 if v.is_floating_point() else v for k, v in load_file(weights).items()}, weights)
        capsys.readouterr()
        assert _decode(copy, test) == 2
        assert "SSL checkpoint this model was trained on" in one_line(capsys)
    finally:
        weights.write_bytes(saved)


def test_a_copied_finetuning_run_carries_its_converted_model(tmp_path, one_thread):  # noqa: F811 (the fixture)
    """asr finetune on a packed release converts it into the run (ssl_hf/): run.json names it
    relative to the run, so a copy decodes alone once the original is deleted."""
    data = write_corpus(tmp_path / "data")
    original, copy = tmp_path / "ft", tmp_path / "moved" / "ft"
    packed = ROOT / "ssl_pretrain" / "shipped" / "tiny-female.safetensors"
    assert main(["asr", "finetune", "--ckpt", str(packed), "--train", str(data["train"]), "--valid",
                 str(data["valid"]), "--out", str(original), "--no-progress", "batch_seconds=3",
                 "valid_batch_seconds=6", "max_steps=2"]) == 0
    run = json.loads((original / "run.json").read_text())
    assert run["ssl_folder"].startswith("ssl_hf/") and run["ssl_folder_abs"] is None
    assert run["hparams"]["template"] == "finetune_ctc.yaml" and not (original / "hparams.yaml").exists()
    assert _decode(original, data["test"], "--name", "before") == 0
    shutil.copytree(original, copy)
    shutil.rmtree(original)
    assert _decode(copy, data["test"], "--name", "after") == 0
    assert (copy / "after.hyp.tsv").read_text() == (copy / "before.hyp.tsv").read_text()
