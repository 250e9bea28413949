"""Untrusted checkpoints cannot run code: weights_only loading with an allowlist, one clear line
for anything else, --trust-checkpoint to load it knowingly, and packed releases without pickle."""
from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

import pytest
import torch

from corpora.base.errors import UserError
from gendergap.cli import main
from ssl_pretrain.checkpoints import CheckpointRef
from ssl_pretrain.safe_load import load_torch_file

SHIPPED = Path(__file__).resolve().parent.parent / "ssl_pretrain" / "shipped"


class RunsACommand:
    """What a crafted checkpoint's config object does when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os
        return os.system, (f"touch {self.marker}",)


@pytest.fixture()
def genuine():
    return CheckpointRef.resolve(SHIPPED / "tiny-female.safetensors").fairseq_state()


def test_a_crafted_checkpoint_runs_nothing_in_any_command(genuine, tmp_path, capsys):
    from asr_helpers import write_corpus
    from corpora.table import read_table, write_table
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pt"
    torch.save({**genuine, "cfg": RunsACommand(marker)}, evil)
    data = write_corpus(tmp_path / "data")
    table = read_table(data["table"])
    write_table(table.assign(tgt_text_en=table["text"]), data["table"])
    t, store = str(data["table"]), ["--feature-store", str(tmp_path / "store")]
    csvs = ["--train", str(data["train"]), "--valid", str(data["valid"])]
    config = tmp_path / "study.yaml"
    config.write_text(f"corpus: {{table: {t}}}\ncheckpoints:\n  X: {{path: {evil}}}\n"
                      "tasks:\n  asr-frozen: {corpus: tiny}\n", encoding="utf-8")
    commands = [["ckpt", "--registry", str(tmp_path / "r.json"), "add", "x", str(evil)],
                ["ckpt", "convert", str(evil), "--out", str(tmp_path / "hf")],
                ["ckpt", "pack", str(evil), "--out", str(tmp_path / "p.safetensors")],
                ["ckpt", "eval", str(evil), "--manifest", str(tmp_path)],
                ["ckpt", "features", str(evil), "--table", t, *store],
                ["asr", "finetune", "--ckpt", str(evil), *csvs, "--out", str(tmp_path / "ft")],
                ["asr", "frozen", "--ckpt", str(evil), *csvs, "--out", str(tmp_path / "fr"), *store],
                ["st", "train", "--ckpt", str(evil), "--layer", "1", "--train", t, "--train-split", "train",
                 "--valid", t, "--valid-split", "valid", "--src", "fr", "--tgt", "en", "--out", str(tmp_path / "st"),
                 *store],
                ["probe", "run", "--ckpt", str(evil), "--table", t, "--out", str(tmp_path / "probes"), *store],
                ["sweep", "--config", str(config), "--out", str(tmp_path / "sweep")]]
    for argv in commands:
        assert main(argv) == 2, argv
        said = capsys.readouterr().err
        err = [line for line in said.splitlines() if line.startswith("gendergap: error")]
        assert len(err) == 1 and "Traceback" not in said, said
        assert "posix.system" in err[0] and str(evil) in err[0] and "trust" in err[0], err
    assert not marker.exists()
    assert f"{config}:3:" in err[0]  # the sweep names the config line of the checkpoint, before any job runs
    assert not (tmp_path / "sweep").exists()


def test_unknown_classes_are_refused_unless_trusted(genuine, tmp_path, capsys):
    from omegaconf import OmegaConf
    path = tmp_path / "omegaconf.pt"
    torch.save({**genuine, "cfg": OmegaConf.create(genuine["cfg"])}, path)  # an older fairseq's habit
    with pytest.raises(UserError, match="refusing to unpickle omegaconf.dictconfig.DictConfig") as e:
        load_torch_file(path)
    assert e.value.path == str(path) and "--trust-checkpoint" in e.value.fix
    assert main(["ckpt", "--registry", str(tmp_path / "r.json"), "add", "x", str(path)]) == 2
    capsys.readouterr()
    assert main(["ckpt", "--registry", str(tmp_path / "r.json"), "add", "x", str(path), "--trust-checkpoint"]) == 0
    updates = genuine["optimizer_history"][-1]["num_updates"]
    assert json.loads((tmp_path / "r.json").read_text())["checkpoints"][0]["updates"] == updates


def test_the_allowlist_reads_genuine_fairseq_checkpoints(genuine, tmp_path):
    # fairseq-train (ST, and fairseq < 0.10 wav2vec 2.0 releases) keeps its args as a Namespace
    legacy = tmp_path / "legacy.pt"
    torch.save({**genuine, "args": argparse.Namespace(arch="wav2vec2", normalize=False)}, legacy)
    state = load_torch_file(legacy)
    assert isinstance(state["args"], argparse.Namespace) and state["cfg"] == genuine["cfg"]


def test_malformed_files_are_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.pt"
    torch.save({"model": {"w": torch.zeros(1000)}}, broken)
    broken.write_bytes(broken.read_bytes()[:300])  # an interrupted download
    notes = tmp_path / "notes.pt"
    notes.write_text("hello")
    for path in (broken, notes):
        assert main(["ckpt", "--registry", str(tmp_path / "r.json"), "add", "x", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "cannot read as a torch fairseq checkpoint" in err[0] and str(path) in err[0]


def test_packed_releases_hold_no_pickle_and_load_like_the_original(genuine, tmp_path, capsys):
    src = tmp_path / "ckpt.pt"
    torch.save(genuine, src)
    out = tmp_path / "F.safetensors"
    assert main(["ckpt", "pack", str(src), "--out", str(out)]) == 0
    raw = out.read_bytes()
    header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])  # safetensors: length + JSON header
    assert header["__metadata__"]["format"] == "gendergap-packed-wav2vec2/1"
    assert json.loads(header["__metadata__"]["fairseq_cfg"]) == genuine["cfg"]
    assert all(v["dtype"] == "F16" for k, v in header.items() if k != "__metadata__")
    packed = CheckpointRef.resolve(out)
    assert packed.kind == "packed" and packed.inspect()["updates"] == genuine["optimizer_history"][-1]["num_updates"]
    a, b = CheckpointRef.resolve(src).load(), packed.load()
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert main(["ckpt", "pack", str(src), "--out", str(tmp_path / "F.pt")]) == 2
    assert "a packed checkpoint is a .safetensors file" in capsys.readouterr().err
